#!/usr/bin/env bash
# run_cpu.sh: every CPU benchmark in one run, JSON lines on stdout (tables and notes on stderr):
#   bench/run_cpu.sh > bench/results-$(date +%F).jsonl
# First line: {"bench":"meta",...} with date, commit and machine. Then bench_roofline (the
# machine's FMA, bf16 dot-product and memory ceilings), bench_gemm --half on 1 and 2 threads
# (minidl in float32, bfloat16 and float16, and OpenBLAS), bench_gemm --gelu on 1 and 2 threads
# (the char-GPT's c_fc layer with and without its GELU), bench_train_step (the seed step in
# minidl, and AdamW's step over the larger char-GPT's parameters on 2 threads), bench_data_parallel
# (CPU replicas) and bench/torch_seed_step.py (the seed step in PyTorch) on 1 thread, then
# bench_gemm --char-gpt large and small on 1 and 2 threads (every GEMM of a char-GPT step beside
# OpenBLAS). Then, unless SKIP_TRAINERS=1, the trainers against PyTorch, some 25 minutes on a
# 2-core machine: the char-GPT's ms/iter (larger recipe in fp32 and bf16, the default recipe;
# run_char_gpt_speed.sh) and peak memory (run_char_gpt_precision.sh memory large), the
# Fashion-MNIST MLP and CNN epochs (run_fashion_mnist.sh, run_cnn_fashion_mnist.sh); their
# tables go to stderr, the Fashion-MNIST JSON lines to stdout. Builds the release preset's
# targets first; BUILD_DIR overrides the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build/release}

if [[ -z "${BUILD_DIR:-}" ]]; then
  cmake --preset release >&2
  cmake --build --preset release -j"$(nproc)" --target bench_roofline bench_gemm bench_train_step bench_data_parallel \
    char_gpt fashion_mnist >&2
fi

# Let OpenBLAS pick its best kernels for this CPU: an inherited OPENBLAS_CORETYPE (some images
# set Haswell) would handicap the baseline on AVX-512 machines. bench_gemm prints the core used.
unset OPENBLAS_CORETYPE

commit=$(git rev-parse --short HEAD 2>/dev/null || echo none)
dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo true || echo false)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
printf '{"bench":"meta","date":"%s","commit":"%s","dirty":%s,"cpu":"%s","cores":%s}\n' \
  "$(date -u +%FT%TZ)" "$commit" "$dirty" "$cpu" "$(nproc)"

"$build/bin/bench_roofline" --threads 2
for threads in 1 2; do
  OMP_NUM_THREADS=$threads "$build/bin/bench_gemm" --half
  OMP_NUM_THREADS=$threads "$build/bin/bench_gemm" --gelu
done
OMP_NUM_THREADS=1 "$build/bin/bench_train_step"
OMP_NUM_THREADS=2 "$build/bin/bench_train_step" --model char-gpt-adamw --n-layer 4 --n-head 4 --n-embd 256 \
  --warmup 5 --steps 1 --repeats 31
OMP_NUM_THREADS=1 "$build/bin/bench_data_parallel"

# Debian's python3-torch installs into the system python, which may not be the first python3.
have_torch=false
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import torch' 2>/dev/null; then
    OMP_NUM_THREADS=1 "$py" bench/torch_seed_step.py
    have_torch=true
    break
  fi
done
$have_torch || python3 bench/torch_seed_step.py || true  # prints why it is skipped

for threads in 1 2; do
  for recipe in large small; do OMP_NUM_THREADS=$threads "$build/bin/bench_gemm" --char-gpt "$recipe"; done
done

if [[ "${SKIP_TRAINERS:-0}" != 1 ]] && $have_torch; then
  BUILD_DIR=$build bench/run_char_gpt_speed.sh large 3 20 >&2
  BUILD_DIR=$build bench/run_char_gpt_speed.sh large 3 20 bf16 >&2
  BUILD_DIR=$build bench/run_char_gpt_speed.sh small 3 >&2
  BUILD_DIR=$build bench/run_char_gpt_precision.sh memory large >&2
  EPOCHS=3 ROUNDS=2 TORCH_OPENBLAS_THREADS=1 BUILD_DIR=$build bench/run_fashion_mnist.sh
  LIMIT=3200 ROUNDS=3 TORCH_OPENBLAS_THREADS=1 BUILD_DIR=$build bench/run_cnn_fashion_mnist.sh
fi
