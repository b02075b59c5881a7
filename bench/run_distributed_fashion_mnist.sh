#!/usr/bin/env bash
# run_distributed_fashion_mnist.sh: the Fashion-MNIST MLP trainer in one process against the same
# training over PROCS processes started by mpirun (DistributedDataParallel, docs/distributed.md),
# each process with THREADS CPU threads, on the CPU. The global batch is the same in both, so
# the accuracy should agree and only the time should differ. JSON lines on stdout, one per epoch
# and configuration, then a summary line; the trainers' own lines and a table on stderr:
#   bench/run_distributed_fashion_mnist.sh > bench/distributed-fashion-mnist-$(date +%F).jsonl
# Environment: MODEL (mlp or cnn, default mlp), LIMIT (train on the first LIMIT examples, default
# 0 = all 60000), PROCS (default 2), THREADS per process (default 1), EPOCHS per run (default 3),
# ROUNDS (default 2: one process, PROCS processes, again, so that a change in the machine's
# load hits both), BUILD_DIR (skip the build and use that tree). Only the training pass of each
# epoch is timed (the trainer's samples/s); the summary gives each side's median epoch and the
# ratio. When run as root, Open MPI's refusal to run as root is lifted for this script's own
# mpirun only. With PROCS above the number of cores, Open MPI refuses to start (oversubscribing
# is a choice this script does not make for you).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build/release}
model=${MODEL:-mlp}
limit=${LIMIT:-0}
examples=$((limit > 0 && limit < 60000 ? limit : 60000))
procs=${PROCS:-2}
threads=${THREADS:-1}
epochs=${EPOCHS:-3}
rounds=${ROUNDS:-2}

if [[ -z "${BUILD_DIR:-}" ]]; then
  cmake --preset release >&2
  cmake --build --preset release -j"$(nproc)" --target fashion_mnist >&2
fi
launcher=$(command -v mpirun || command -v mpiexec || true)
if [[ -z "$launcher" ]]; then
  echo "run_distributed_fashion_mnist.sh: no mpirun (scripts/setup-deps installs Open MPI); skipped" >&2
  exit 0
fi
if ((rounds < 1 || procs < 2 || threads < 1)); then
  echo "run_distributed_fashion_mnist.sh: ROUNDS and THREADS must be at least 1 and PROCS at least 2" >&2
  exit 2
fi
# How the launcher passes OMP_NUM_THREADS on and places the processes. Open MPI binds each of up
# to two processes to one core: right for one thread per process; with more, each process gets
# no binding, so its threads are not all squeezed onto one core. MPICH's mpiexec (Hydra) passes
# the environment on by itself and binds nothing unless asked.
mpi_env=(env)
if "$launcher" --version 2>&1 | grep -q "Open MPI"; then
  launch_opts=(-x OMP_NUM_THREADS)
  if ((threads > 1)); then launch_opts+=(--bind-to none); fi
  if [[ $(id -u) == 0 ]]; then mpi_env+=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1); fi
else
  launch_opts=()
fi

commit=$(git rev-parse --short HEAD 2>/dev/null || echo none)
dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo true || echo false)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # GNU nproc honours those two
printf '{"bench":"meta","date":"%s","commit":"%s","dirty":%s,"cpu":"%s","cores":%s,"model":"%s","examples":%s,"procs":%s,"threads":%s,"load":"%s"}\n' \
  "$(date -u +%FT%TZ)" "$commit" "$dirty" "$cpu" "$cores" "$model" "$examples" "$procs" "$threads" "$(cut -d' ' -f1-3 /proc/loadavg)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The trainer's CSV gives samples/s of the training pass; one epoch is $examples examples.
to_json() {
  python3 - "$1" "$2" "$3" "$examples" <<'EOF'
import csv, json, sys
for row in csv.DictReader(open(sys.argv[1])):
    print(json.dumps({"bench": "distributed_fashion_mnist_epoch", "processes": int(sys.argv[2]), "round": int(sys.argv[3]),
                      "epoch": int(row["epoch"]), "train_s": round(int(sys.argv[4]) / float(row["samples_per_s"]), 4),
                      "train_loss": float(row["train_loss"]), "test_acc": float(row["test_acc"])},
                     separators=(",", ":")))
EOF
}
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r/$rounds: one process, $threads thread(s)" >&2
  OMP_NUM_THREADS=$threads "$build/bin/fashion_mnist" --model "$model" --device cpu --epochs "$epochs" --limit "$limit" \
    --progress lines --metrics "$work/one-$r.csv" >&2
  to_json "$work/one-$r.csv" 1 "$r"
  echo "round $r/$rounds: $procs processes, $threads thread(s) each" >&2
  "${mpi_env[@]}" OMP_NUM_THREADS="$threads" "$launcher" -n "$procs" ${launch_opts[@]+"${launch_opts[@]}"} \
    "$build/bin/fashion_mnist" --model "$model" --device cpu --epochs "$epochs" --limit "$limit" --progress lines \
    --metrics "$work/many-$r.csv" >&2
  to_json "$work/many-$r.csv" "$procs" "$r"
done | tee "$work/all.jsonl"

python3 - "$work/all.jsonl" "$procs" "$threads" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"distributed_fashion_mnist_epoch"' in l]
procs, threads = int(sys.argv[2]), int(sys.argv[3])
med = {p: statistics.median(r["train_s"] for r in rows if r["processes"] == p) for p in (1, procs)}
acc = {p: [r["test_acc"] for r in rows if r["processes"] == p and r["epoch"] == max(x["epoch"] for x in rows)] for p in (1, procs)}
print(f"median training epoch, {threads} thread(s) per process: 1 process {med[1]:.3f} s, {procs} processes "
      f"{med[procs]:.3f} s; ratio {med[procs] / med[1]:.3f}; last-epoch test accuracy {acc[1]} against {acc[procs]}",
      file=sys.stderr)
print(json.dumps({"bench": "distributed_fashion_mnist_summary", "processes": procs, "threads": threads,
                  "one_median_s": round(med[1], 4), "many_median_s": round(med[procs], 4),
                  "ratio": round(med[procs] / med[1], 4), "one_acc": acc[1], "many_acc": acc[procs]},
                 separators=(",", ":")))
EOF
