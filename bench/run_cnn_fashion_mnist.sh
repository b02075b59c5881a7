#!/usr/bin/env bash
# run_cnn_fashion_mnist.sh: minidl's Fashion-MNIST CNN (fashion_mnist --model cnn) against the
# same training in PyTorch (bench/torch_fashion_mnist.py --model cnn: same CNN, hyperparameters, batch
# size and data; PyTorch's convolutions run in oneDNN), on the CPU,
# in one run, with the same thread count. JSON lines on stdout, one per epoch and impl, then a
# summary line; tables and notes on stderr:
#   bench/run_cnn_fashion_mnist.sh > bench/cnn-fashion-mnist-$(date +%F).jsonl
# Environment: THREADS (default 2; sets OMP_NUM_THREADS for both, and torch.set_num_threads),
# EPOCHS per run (default 1), LIMIT (train on the first LIMIT examples, default 0 = all 60000;
# epoch times are then scaled to 60000 from the samples/s of the training pass), ROUNDS (default 2: minidl, PyTorch, minidl, PyTorch, ... so that a
# change in the machine's load hits both), LOADER (PyTorch's batching: index or dataloader),
# BUILD_DIR (skip the build and use that tree), TORCH_OPENBLAS_THREADS (OPENBLAS_NUM_THREADS for
# PyTorch only: Debian's OpenBLAS starts its own pthreads beside PyTorch's OpenMP team, and with
# THREADS=2 the two teams share 2 cores; 1 keeps PyTorch to its OpenMP threads, which is faster). Only the training pass of each epoch is timed;
# the summary gives each side's median epoch over all its epochs and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build/release}
threads=${THREADS:-2}
epochs=${EPOCHS:-1}
limit=${LIMIT:-0}
rounds=${ROUNDS:-2}
loader=${LOADER:-index}

if [[ -z "${BUILD_DIR:-}" ]]; then
  cmake --preset release >&2
  cmake --build --preset release -j"$(nproc)" --target fashion_mnist bench_conv >&2
fi

# Debian's python3-torch installs into the system python, which may not be the first python3.
py=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import torch, numpy' 2>/dev/null; then
    py=$candidate
    break
  fi
done
if [[ -z "$py" ]]; then
  echo "run_cnn_fashion_mnist.sh: no python3 with torch and numpy (Debian: apt-get install python3-torch); skipped" >&2
  exit 0
fi

# PyTorch's GEMMs run in Debian's OpenBLAS (0.3.21), which does not recognise every CPU: on
# an Intel Xeon VM (family 6, model 207) its own detection falls back to the
# Prescott (SSE3) kernels, about half the speed of its AVX-512 ones there, which is why that
# environment sets OPENBLAS_CORETYPE=Haswell. Give it the best kernels the CPU can run:
# SkylakeX with AVX-512, Haswell with AVX2 (BENCH_OPENBLAS_CORETYPE overrides; "auto" leaves
# OpenBLAS to detect). The meta line records the choice.
coretype=${BENCH_OPENBLAS_CORETYPE:-}
if [[ -z "$coretype" ]]; then
  if grep -qw avx512f /proc/cpuinfo; then coretype=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then coretype=Haswell
  else coretype=auto; fi
fi
if [[ "$coretype" == auto ]]; then unset OPENBLAS_CORETYPE; else export OPENBLAS_CORETYPE=$coretype; fi
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # GNU nproc honours those two
export OMP_NUM_THREADS=$threads

commit=$(git rev-parse --short HEAD 2>/dev/null || echo none)
dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo true || echo false)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
printf '{"bench":"meta","date":"%s","commit":"%s","dirty":%s,"cpu":"%s","cores":%s,"threads":%s,"openblas_coretype":"%s","torch_openblas_threads":"%s","load":"%s"}\n' \
  "$(date -u +%FT%TZ)" "$commit" "$dirty" "$cpu" "$cores" "$threads" "$coretype" "${TORCH_OPENBLAS_THREADS:-default}" "$(cut -d' ' -f1-3 /proc/loadavg)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r/$rounds: minidl" >&2
  "$build/bin/fashion_mnist" --model cnn --device cpu --epochs "$epochs" --limit "$limit" --progress lines --metrics "$work/minidl-$r.csv" >&2
  # The trainer's CSV gives samples/s of the training pass; one epoch is 60000 examples.
  "$py" - "$work/minidl-$r.csv" "$r" <<'EOF'
import csv, json, sys
for row in csv.DictReader(open(sys.argv[1])):
    print(json.dumps({"bench": "cnn_fashion_mnist_epoch", "impl": "minidl", "round": int(sys.argv[2]),
                      "epoch": int(row["epoch"]), "train_s": round(60000 / float(row["samples_per_s"]), 4),
                      "samples_per_s": round(float(row["samples_per_s"]), 1),
                      "train_loss": float(row["train_loss"]), "test_acc": float(row["test_acc"])},
                     separators=(",", ":")))
EOF
  echo "round $r/$rounds: PyTorch ($loader loader)" >&2
  ${TORCH_OPENBLAS_THREADS:+env OPENBLAS_NUM_THREADS=$TORCH_OPENBLAS_THREADS} \
    "$py" bench/torch_fashion_mnist.py --model cnn --epochs "$epochs" --limit "$limit" --loader "$loader" --threads "$threads" |
    "$py" -c 'import json, sys
for line in sys.stdin:
    d = json.loads(line); d["round"] = int(sys.argv[1]); d["train_s"] = round(60000 / d["samples_per_s"], 4); print(json.dumps(d, separators=(",", ":")))' "$r"
done | tee "$work/all.jsonl"

"$py" - "$work/all.jsonl" "$threads" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"cnn_fashion_mnist_epoch"' in l]
med = {impl: statistics.median(r["train_s"] for r in rows if r["impl"] == impl) for impl in ("minidl", "pytorch")}
n = {impl: sum(r["impl"] == impl for r in rows) for impl in med}
print(f"median CNN training epoch (60000 examples) over {n['minidl']} minidl and {n['pytorch']} PyTorch epochs, {sys.argv[2]} threads: "
      f"minidl {med['minidl']:.3f} s, PyTorch {med['pytorch']:.3f} s; minidl/PyTorch = {med['minidl'] / med['pytorch']:.3f}",
      file=sys.stderr)
print(json.dumps({"bench": "cnn_fashion_mnist_summary", "threads": int(sys.argv[2]), "minidl_median_s": round(med["minidl"], 4),
                  "pytorch_median_s": round(med["pytorch"], 4), "ratio": round(med["minidl"] / med["pytorch"], 4)},
                 separators=(",", ":")))
EOF
