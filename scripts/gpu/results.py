#!/usr/bin/env python3
"""scripts/gpu/results.py: the parts of scripts/gpu/gpu-check that read text and write JSON lines.

  results.py tests CTEST_LOG          one JSON line per test in a ctest log:
                                      {"kind":"test","name":...,"status":"passed|failed|skipped|
                                       timed out|not run","seconds":1.23}
  results.py gpu-state WHEN CSV_FILE  one JSON line of `nvidia-smi --query-gpu=...` output
                                      (header line, then one line per GPU): {"kind":"gpu_state",...}
  results.py summary RESULTS_JSONL    short lines for a person: the tests (counts, the failed and
                                      timed-out ones, the slowest) and one line per figure.
Standard library only (the GPU machine may have nothing else)."""
import json
import re
import sys

# " 12/50 Test #12: some name .........   Passed    1.23 sec"; the status may be prefixed by
# "***" (Failed, Skipped, Timeout, Not Run, Exception: ...).
# The name is greedy up to the last run of dots, so a name with dots of its own stays whole.
TEST_LINE = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (?P<name>.*) \.+\s*(?:\*\*\*)?(?P<status>Passed|Failed|Skipped"
                       r"|Timeout|Not Run|Exception:.*?|[A-Z][A-Za-z ]*?)\s+(?P<seconds>[0-9.]+) sec\s*$")
STATUS = {"Passed": "passed", "Failed": "failed", "Skipped": "skipped", "Timeout": "timed out", "Not Run": "not run"}


def tests(log_path):
    with open(log_path, errors="replace") as f:
        for line in f:
            m = TEST_LINE.match(line)
            if not m:
                continue
            status = STATUS.get(m.group("status"), "failed")  # "Exception: ..." and the like
            print(json.dumps({"kind": "test", "name": m.group("name").strip(), "status": status,
                              "seconds": float(m.group("seconds"))}, separators=(",", ":")))


def gpu_state(when, csv_path):
    with open(csv_path, errors="replace") as f:
        rows = [line.strip() for line in f if line.strip()]
    if len(rows) < 2:
        return
    keys = [k.strip() for k in rows[0].split(",")]
    for gpu, row in enumerate(rows[1:]):
        values = [v.strip() for v in row.split(",")]
        record = {"kind": "gpu_state", "when": when, "gpu": gpu}
        for k, v in zip(keys, values):
            try:
                record[k] = float(v) if re.fullmatch(r"-?[0-9.]+", v) else v
            except ValueError:
                record[k] = v
        print(json.dumps(record, separators=(",", ":")))


def figure_line(r):
    """One short line for a benchmark record, or None for records that are not figures."""
    step = r.get("step", "?")
    if r.get("kernel") == "gemm":
        return (f"{step}: gemm {r['variant']} {r['n']}x{r['k']}x{r['m']} ({r['what']}): native "
                f"{r['native_tflops']:.2f} cublas {r['cublas_tflops']:.2f} TFLOP/s ratio {r['ratio']:.2f}")
    if r.get("kernel") == "copy_d2d":
        return f"{step}: copy d2d {r['bytes'] >> 20} MiB: {r['gbps']:.0f} GB/s"
    if "copy_gbps" in r:
        check = "" if r.get("matches_cpu", True) else "  OUTPUT DIFFERS FROM THE CPU"
        return (f"{step}: {r['kernel']} {r['shape']}: {r['gbps']:.0f} GB/s, {r['ratio']:.2f} of copy{check}")
    if r.get("bench") == "dp_step":
        overhead = f" ({100 * r['overhead_vs_plain']:+.1f}% vs plain)" if "overhead_vs_plain" in r else ""
        return (f"{step}: {r['model']} batch {r['batch']} on {r['device']}, {r['impl']} x{r['replicas']}: "
                f"{r['us_per_step']:.1f} us/step{overhead}")
    if "us_per_step" in r:
        batch = f" batch {r['batch']}" if "batch" in r else ""
        return f"{step}: {r.get('bench')} {r.get('impl')} on {r.get('device')}{batch}: {r['us_per_step']:.2f} us/step"
    if r.get("kind") in ("test", "step", "gpu_state", "meta"):
        return None
    # Anything else (bench_data_parallel's records, ...): its numbers, compactly.
    fields = " ".join(f"{k}={v}" for k, v in r.items() if k not in ("step",))
    return f"{step}: {fields}"


def summary(results_path):
    records = []
    with open(results_path, errors="replace") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                pass
    tests_ = [r for r in records if r.get("kind") == "test"]
    if tests_:
        counts = {}
        for t in tests_:
            counts[t["status"]] = counts.get(t["status"], 0) + 1
        print("tests: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) +
              f" (of {len(tests_)}, {sum(t['seconds'] for t in tests_):.0f} s in all)")
        # At most 15 named, so that the figures below stay in the tail of a cut-off output.
        not_passed = [t for t in tests_ if t["status"] != "passed"]
        for t in not_passed[:15]:
            print(f"  {t['status'].upper()}: {t['name']} ({t['seconds']:.1f} s)")
        if len(not_passed) > 15:
            print(f"  ... and {len(not_passed) - 15} more not passed (results.jsonl has them all)")
        slowest = sorted(tests_, key=lambda t: -t["seconds"])[:5]
        print("  slowest: " + "; ".join(f"{t['name'][:60]} {t['seconds']:.1f} s" for t in slowest))
    for r in records:
        if r.get("kind") == "gpu_state":
            print(f"gpu {r.get('gpu')} {r.get('when')}: " +
                  ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("kind", "when", "gpu")))
    for r in records:
        try:
            line = figure_line(r)
        except (KeyError, TypeError, ValueError):
            line = json.dumps(r, separators=(",", ":"))
        if line:
            print(line)


def main(argv):
    if len(argv) == 3 and argv[1] == "tests":
        tests(argv[2])
    elif len(argv) == 4 and argv[1] == "gpu-state":
        gpu_state(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "summary":
        summary(argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
