#!/usr/bin/env bash
# run_char_gpt_speed.sh: ms per training iteration of the char-GPT on the CPU, minidl
# (samples/char_gpt) against its PyTorch twin (bench/char_gpt_torch.py), side by side:
#   bench/run_char_gpt_speed.sh [small|large] [rounds] [iters] [fp32|bf16]
# small: the default recipe (4 layers, 4 heads, 128 wide, context 64, batch 12); large: 256 wide,
# context 256, batch 8. Each round runs minidl once and PyTorch once in each of its three thread
# settings, one after the other, so a noisy machine slows all of them alike; the medians over
# the rounds and minidl's ratio to each PyTorch setting are printed at the end. PyTorch's
# settings, because Debian's python3-torch does its matrix products in OpenBLAS, which keeps a
# thread team of its own beside PyTorch's:
#   default     torch.set_num_threads(2), OpenBLAS's own default (2 threads): both teams at once
#   blas1-omp2  OPENBLAS_NUM_THREADS=1, torch threads 2: products single-threaded, the rest on 2
#   blas2-omp1  OPENBLAS_NUM_THREADS=2, torch threads 1: products on 2 threads, the rest on 1
# bf16: both train under bfloat16 autocast (minidl --dtype bf16; PyTorch torch.autocast("cpu",
# torch.bfloat16)), float32 weights and optimizer in both.
# Needs the release build (build/release/bin/char_gpt; BUILD_DIR overrides) and /usr/bin/python3
# with torch (Debian's python3-torch). Evaluations are not timed (both print training ms/iter).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build/release}
size=${1:-small}
rounds=${2:-5}
iters=${3:-}
dtype=${4:-fp32}
case "$dtype" in
  fp32 | bf16) ;;
  *) echo "usage: $0 [small|large] [rounds] [iters] [fp32|bf16]" >&2; exit 2 ;;
esac
case "$size" in
  small) flags=(); iters=${iters:-100} ;;
  large) flags=(--n-layer 4 --n-head 4 --n-embd 256 --block-size 256 --batch-size 8); iters=${iters:-20} ;;
  *) echo "usage: $0 [small|large] [rounds] [iters] [fp32|bf16]" >&2; exit 2 ;;
esac
common=(--iters "$iters" --warmup 5 --eval-interval 100000 --eval-iters 1 --dtype "$dtype" "${flags[@]}")
py=/usr/bin/python3
# Debian's PyTorch does its products through the libblas.so.3 alternative: without OpenBLAS
# (scripts/setup-deps --bench) that is the reference BLAS, and PyTorch runs some 25x slower.
if ! readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null | grep -q openblas; then
  echo "run_char_gpt_speed.sh: libblas.so.3 is not OpenBLAS; PyTorch's figures would be the reference BLAS's" \
       "(install it: scripts/setup-deps --bench)" >&2
fi

ms() { sed -n 's/.*iterations in .* s, \([0-9.]*\) ms\/iter.*/\1/p' | tail -n 1; }
declare -A runs
for ((r = 1; r <= rounds; r++)); do
  runs[minidl]+="$(OMP_NUM_THREADS=2 "$build/bin/char_gpt" "${common[@]}" 2>&1 | ms) "
  runs[default]+="$($py bench/char_gpt_torch.py --threads 2 "${common[@]}" 2>&1 | ms) "
  runs[blas1-omp2]+="$(OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=2 $py bench/char_gpt_torch.py --threads 2 "${common[@]}" 2>&1 | ms) "
  runs[blas2-omp1]+="$(OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=1 $py bench/char_gpt_torch.py --threads 1 "${common[@]}" 2>&1 | ms) "
  echo "round $r done: minidl $(echo "${runs[minidl]}" | awk '{print $NF}') ms/iter" >&2
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
m=$(echo "${runs[minidl]}" | median)
echo "char_gpt $size $dtype, $iters iterations, $rounds rounds, ms/iteration (median; every run):"
for k in minidl default blas1-omp2 blas2-omp1; do
  med=$(echo "${runs[$k]}" | median)
  ratio=$(awk -v a="$m" -v b="$med" 'BEGIN {printf "%.2f", a / b}')
  printf '  %-18s %8s   [%s]   minidl/this %s\n' "$k" "$med" "${runs[$k]% }" "$ratio"
done
