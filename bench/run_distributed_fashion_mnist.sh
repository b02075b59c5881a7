#!/usr/bin/env bash
# run_distributed_fashion_mnist.sh: the Fashion-MNIST MLP trainer in one process against the same
# training over PROCS processes started by mpirun (DistributedDataParallel, docs/distributed.md),
# each process with THREADS CPU threads, on the CPU. The global batch is the same in both, so
# the accuracy should agree and only the time should differ.
#
# A third configuration, the floor, says what the machine itself allows: PROCS independent
# one-process trainers side by side (each pinned to its own core when THREADS is 1, as mpirun
# binds the distributed ones), each on 1/PROCS of the examples at BATCH/PROCS rows per step.
# Each does the computation of one distributed process and communicates nothing, so the floor's
# epoch (that of the slowest of the PROCS) is, approximately, what a data-parallel scheme with
# free communication would reach on this machine (approximately: the independent trainers never
# wait for each other, so each step does not wait for the slowest one): the distributed epoch
# over the floor's is what communication costs, the floor's over one process's is what the
# extra cores give.
#
# JSON lines on stdout, one per epoch and configuration, then a summary line; the trainers' own
# lines and a table on stderr:
#   bench/run_distributed_fashion_mnist.sh > bench/distributed-fashion-mnist-$(date +%F).jsonl
# Environment: MODEL (mlp or cnn, default mlp), LIMIT (train on the first LIMIT examples, default
# 0 = all 60000), BATCH (the global batch, default 64 as in the trainer), PROCS (default 2),
# THREADS per process (default 1), EPOCHS per run (default 3), ROUNDS (default 2: one process,
# PROCS processes, the floor, again, so that a change in the machine's load hits all three),
# BUILD_DIR (skip the build and use that tree). Only the training pass of each epoch is timed
# (the trainer's samples/s); the summary gives each configuration's median epoch and the ratios.
# When run as root, Open MPI's refusal to run as root is lifted for this script's own mpirun
# only. With PROCS above the number of cores, Open MPI refuses to start (oversubscribing is a
# choice this script does not make for you).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build/release}
model=${MODEL:-mlp}
limit=${LIMIT:-0}
examples=$((limit > 0 && limit < 60000 ? limit : 60000))
batch=${BATCH:-64}
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
if ((rounds < 1 || procs < 2 || threads < 1 || batch < procs || batch % procs != 0 || examples % procs != 0)); then
  echo "run_distributed_fashion_mnist.sh: ROUNDS and THREADS must be at least 1, PROCS at least 2, and BATCH" \
    "($batch) and the number of examples ($examples) multiples of PROCS" >&2
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
printf '{"bench":"meta","date":"%s","commit":"%s","dirty":%s,"cpu":"%s","cores":%s,"model":"%s","examples":%s,"batch":%s,"procs":%s,"threads":%s,"load":"%s"}\n' \
  "$(date -u +%FT%TZ)" "$commit" "$dirty" "$cpu" "$cores" "$model" "$examples" "$batch" "$procs" "$threads" \
  "$(cut -d' ' -f1-3 /proc/loadavg)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# to_json CSV CONFIG ROUND EXAMPLES PROCESSES: the trainer's CSV gives samples/s of the training
# pass, and one epoch of that run is EXAMPLES examples.
to_json() {
  python3 - "$@" <<'EOF'
import csv, json, sys
path, config, rnd, examples, processes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
for row in csv.DictReader(open(path)):
    print(json.dumps({"bench": "distributed_fashion_mnist_epoch", "config": config, "processes": processes,
                      "round": rnd, "epoch": int(row["epoch"]), "train_s": round(examples / float(row["samples_per_s"]), 4),
                      "train_loss": float(row["train_loss"]), "test_acc": float(row["test_acc"])},
                     separators=(",", ":")))
EOF
}
train=(--model "$model" --device cpu --epochs "$epochs")
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r/$rounds: one process, $threads thread(s)" >&2
  OMP_NUM_THREADS=$threads "$build/bin/fashion_mnist" "${train[@]}" --limit "$limit" --batch-size "$batch" \
    --progress lines --metrics "$work/one-$r.csv" >&2
  to_json "$work/one-$r.csv" one "$r" "$examples" 1
  echo "round $r/$rounds: $procs processes, $threads thread(s) each" >&2
  "${mpi_env[@]}" OMP_NUM_THREADS="$threads" "$launcher" -n "$procs" ${launch_opts[@]+"${launch_opts[@]}"} \
    "$build/bin/fashion_mnist" "${train[@]}" --limit "$limit" --batch-size "$batch" --progress lines \
    --metrics "$work/ddp-$r.csv" >&2
  to_json "$work/ddp-$r.csv" ddp "$r" "$examples" "$procs"
  echo "round $r/$rounds: the floor, $procs independent processes of $((examples / procs)) examples at batch" \
    "$((batch / procs)), side by side" >&2
  pids=()
  for ((p = 0; p < procs; ++p)); do
    pin=()
    if ((threads == 1)) && command -v taskset > /dev/null; then pin=(taskset -c "$((p % cores))"); fi
    OMP_NUM_THREADS=$threads ${pin[@]+"${pin[@]}"} "$build/bin/fashion_mnist" "${train[@]}" \
      --limit "$((examples / procs))" --batch-size "$((batch / procs))" --progress none \
      --metrics "$work/floor-$r-$p.csv" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  for ((p = 0; p < procs; ++p)); do to_json "$work/floor-$r-$p.csv" floor "$r" "$((examples / procs))" 1; done
done | tee "$work/all.jsonl"

python3 - "$work/all.jsonl" "$procs" "$threads" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"distributed_fashion_mnist_epoch"' in l]
procs, threads = int(sys.argv[2]), int(sys.argv[3])
floor = collections.defaultdict(float)  # (round, epoch) -> the slowest independent process's epoch
for r in rows:
    if r["config"] == "floor":
        floor[r["round"], r["epoch"]] = max(floor[r["round"], r["epoch"]], r["train_s"])
med = {c: statistics.median(r["train_s"] for r in rows if r["config"] == c) for c in ("one", "ddp")}
med["floor"] = statistics.median(floor.values())
last = max(r["epoch"] for r in rows)
acc = {c: [r["test_acc"] for r in rows if r["config"] == c and r["epoch"] == last] for c in ("one", "ddp")}
print(f"median training epoch, {threads} thread(s) per process: 1 process {med['one']:.3f} s; {procs} processes "
      f"{med['ddp']:.3f} s, ratio {med['ddp'] / med['one']:.3f}; the floor ({procs} processes that communicate "
      f"nothing) {med['floor']:.3f} s, ratio {med['floor'] / med['one']:.3f}; last-epoch test accuracy {acc['one']} "
      f"against {acc['ddp']}", file=sys.stderr)
print(json.dumps({"bench": "distributed_fashion_mnist_summary", "processes": procs, "threads": threads,
                  "one_median_s": round(med["one"], 4), "many_median_s": round(med["ddp"], 4),
                  "floor_median_s": round(med["floor"], 4), "ratio": round(med["ddp"] / med["one"], 4),
                  "floor_ratio": round(med["floor"] / med["one"], 4), "one_acc": acc["one"], "many_acc": acc["ddp"]},
                 separators=(",", ":")))
EOF
