#!/usr/bin/env python3
"""scripts/gpu/results.py: the parts of scripts/gpu/gpu-check that read text and write JSON lines.

  results.py tests CTEST_LOG          one JSON line per test in a ctest log:
                                      {"kind":"test","name":...,"status":"passed|failed|skipped|
                                       timed out|not run","seconds":1.23}
  results.py sanitizer TOOL LOG       one JSON line for a compute-sanitizer run over the Catch2 tests:
                                      the tool's own count apart from the tests' outcome,
                                      {"kind":"sanitizer","tool":"memcheck","errors":0,"tests_failed":2,...}
                                      (errors null: the log has no summary line, the tool did not finish)
  results.py trainer-csv CSV BENCH DEVICE
                                      one JSON line per epoch of a fashion_mnist --metrics CSV, the
                                      records bench/run_fashion_mnist.sh writes: {"bench":BENCH,
                                      "impl":"minidl","epoch":1,"train_s":X,"samples_per_s":Y,...}
  results.py training RESULTS_JSONL   one JSON line per trained model and device, minidl beside PyTorch:
                                      {"bench":"fashion_mnist_summary","model":"mlp","device":"cuda:0",
                                       "minidl_median_s":X,"pytorch_median_s":Y,"ratio":X/Y,...}
  results.py gpu-state WHEN CSV_FILE  one JSON line of `nvidia-smi --query-gpu=...` output
                                      (header line, then one line per GPU): {"kind":"gpu_state",...}
  results.py summary RESULTS_JSONL    short lines for a person: the tests, the sanitizers, the training,
                                      the GPU's state and the figures, in that order, at most about
                                      SUMMARY_CHARS characters (the figures are cut first).
Standard library only (the GPU machine may have nothing else)."""
import json
import re
import statistics
import sys

# The summary is read from the tail of the script's output (12,000 characters come back): this
# part leaves room for the step lines printed before it.
SUMMARY_CHARS = 8000
EXAMPLES_PER_EPOCH = 60000  # Fashion-MNIST's training split, as bench/run_fashion_mnist.sh counts

# " 12/50 Test #12: some name .........   Passed    1.23 sec"; the status may be prefixed by
# "***" (Failed, Skipped, Timeout, Not Run, Exception: ...).
# The name is greedy up to the last run of dots, so a name with dots of its own stays whole.
TEST_LINE = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (?P<name>.*) \.+\s*(?:\*\*\*)?(?P<status>Passed|Failed|Skipped"
                       r"|Timeout|Not Run|Exception:.*?|[A-Z][A-Za-z ]*?)\s+(?P<seconds>[0-9.]+) sec\s*$")
STATUS = {"Passed": "passed", "Failed": "failed", "Skipped": "skipped", "Timeout": "timed out", "Not Run": "not run"}

# compute-sanitizer's last lines: "========= ERROR SUMMARY: 3 errors" (memcheck, initcheck,
# synccheck; "1 error") and "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)".
ERROR_SUMMARY = re.compile(r"^=+ ERROR SUMMARY: (\d+) errors?\b", re.M)
RACECHECK_SUMMARY = re.compile(
    r"^=+ RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", re.M)
# A finding's first line ("========= Invalid __global__ read of size 4 bytes") and where it was
# ("=========     at 0x70 in kernel(...)"): the summary names the first few.
FINDING = re.compile(r"^=+ (?!ERROR SUMMARY|RACECHECK SUMMARY|COMPUTE-SANITIZER|Target application|Program hit"
                     r"|LEAK SUMMARY|\s)(?P<what>\S.*?)\s*$")
WHERE = re.compile(r"^=+\s+at (?:0x[0-9a-f]+ in )?(?P<where>.*?)\s*$")
# Catch2's closing lines: "All tests passed (2399 assertions in 17 test cases)", or
# "test cases:   45 |   43 passed |  2 failed" (v3 may add "| 1 skipped").
CATCH_ALL_PASSED = re.compile(r"^All tests passed \((\d+) assertions? in (\d+) test cases?\)", re.M)
CATCH_TEST_CASES = re.compile(r"^test cases:\s*(\d+)((?:\s*\|\s*\d+ \w+)*)\s*$", re.M)


def compact(record):
    return json.dumps(record, separators=(",", ":"))


def read_records(path):
    records = []
    with open(path, errors="replace") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                pass
    return records


def tests(log_path):
    with open(log_path, errors="replace") as f:
        for line in f:
            m = TEST_LINE.match(line)
            if not m:
                continue
            status = STATUS.get(m.group("status"), "failed")  # "Exception: ..." and the like
            print(compact({"kind": "test", "name": m.group("name").strip(), "status": status,
                           "seconds": float(m.group("seconds"))}))


def sanitizer(tool, log_path):
    with open(log_path, errors="replace") as f:
        text = f.read()
    record = {"kind": "sanitizer", "tool": tool, "errors": None}
    race = RACECHECK_SUMMARY.findall(text)
    errors = ERROR_SUMMARY.findall(text)
    if race:  # the last summary counts (one per process; the tests run in one)
        hazards, errs, warnings = (int(v) for v in race[-1])
        record.update(errors=errs, warnings=warnings, hazards=hazards)
    elif errors:
        record["errors"] = int(errors[-1])
    findings, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        m = FINDING.match(line)
        if not m or len(findings) >= 3:
            continue
        where = next((w.group("where") for w in map(WHERE.match, lines[i + 1:i + 4]) if w), "")
        finding = m.group("what") + (f" at {where[:100]}" if where else "")
        if finding not in findings:
            findings.append(finding)
    if findings:
        record["first"] = findings
    # The tests' own outcome under the tool, from Catch2's closing lines.
    if m := CATCH_ALL_PASSED.search(text):
        record.update(test_cases=int(m.group(2)), tests_passed=int(m.group(2)), tests_failed=0)
    elif m := CATCH_TEST_CASES.search(text):
        record["test_cases"] = int(m.group(1))
        for n, word in re.findall(r"(\d+) (\w+)", m.group(2)):
            record[f"tests_{word}"] = int(n)
        record.setdefault("tests_failed", 0)
    print(compact(record))


def trainer_csv(csv_path, bench, device):
    """The per-epoch records of bench/run_fashion_mnist.sh (train_s from the training pass's
    samples/s over one epoch of 60000 examples), with the device."""
    import csv
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            print(compact({"bench": bench, "impl": "minidl", "device": device, "epoch": int(row["epoch"]),
                           "train_s": round(EXAMPLES_PER_EPOCH / float(row["samples_per_s"]), 4),
                           "samples_per_s": round(float(row["samples_per_s"]), 1),
                           "train_loss": float(row["train_loss"]), "test_acc": float(row["test_acc"])}))


EPOCH_BENCHES = {"fashion_mnist_epoch": "mlp", "cnn_fashion_mnist_epoch": "cnn"}


def training_runs(records):
    """{(model, device): {impl: [epoch records in order]}} of the Fashion-MNIST epoch records."""
    runs = {}
    for r in records:
        model = EPOCH_BENCHES.get(r.get("bench"))
        if model and "impl" in r and "epoch" in r:
            runs.setdefault((model, r.get("device", "cpu")), {}).setdefault(r["impl"], []).append(r)
    return runs


def training_summary(model, device, sides):
    record = {"bench": "fashion_mnist_summary", "model": model, "device": device}
    for impl in ("minidl", "pytorch"):
        epochs = sides.get(impl, [])
        if epochs:
            record[f"{impl}_epochs"] = len(epochs)
            record[f"{impl}_median_s"] = round(statistics.median(e["train_s"] for e in epochs), 4)
            record[f"{impl}_test_acc"] = epochs[-1]["test_acc"]
    if record.get("minidl_median_s") and record.get("pytorch_median_s"):
        record["ratio"] = round(record["minidl_median_s"] / record["pytorch_median_s"], 4)
    return record


def training(results_path):
    for (model, device), sides in training_runs(read_records(results_path)).items():
        print(compact(training_summary(model, device, sides)))


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
        print(compact(record))


def number(v):
    """A number in at most 4 significant digits, for the compact lines."""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def generic_line(r, skip=("step",)):
    step = r.get("step", "?")
    line = f"{step}: " + " ".join(f"{k}={number(v)}" for k, v in r.items() if k not in skip)
    return line if len(line) <= 180 else line[:177] + "..."


def gemm_lines(records):
    """bench_kernels' GEMM records, one line per shape: native/cuBLAS TFLOP/s and their ratio for each
    variant; the records of bench_kernels' plan sweep (kernel "gemm_plan"), one line per variant and
    shape: each plan's tile x splits, its TFLOP/s and its ratio to cuBLAS."""
    shapes, plans = {}, {}
    for r in records:
        shape = f"{r['n']}x{r['k']}x{r['m']}"
        if r.get("kernel") == "gemm_plan":  # one plan of bench_kernels' sweep: tile x splits
            tile = r.get("tile", "?")  # BMxBNxBK: two tiles differ only in their K step
            mark = "*" if r.get("heuristic") else ""
            bad = "" if r.get("matches_cublas", True) else " MISMATCH"
            plans.setdefault((r.get("step", "?"), r.get("variant", "?"), shape, "tile/K slices: TFLOP/s (ratio), * the heuristic's"), []).append(
                f"{tile}/{r.get('splits', '?')}{mark} {number(r.get('native_tflops'))} ({number(r.get('ratio'))}){bad}")
        else:
            shapes.setdefault((r.get("step", "?"), shape, r.get("what", "")), []).append(
                f"{r['variant']} {r['native_tflops']:.3g}/{r['cublas_tflops']:.3g} {r['ratio']:.2f}")
    lines = [f"{step}: gemm {shape} ({what}) native/cublas TFLOP/s ratio: " + ", ".join(v)
             for (step, shape, what), v in shapes.items()]
    lines += [f"{step}: gemm plans {variant} {shape} ({unit}): " + ", ".join(v)
              for (step, variant, shape, unit), v in plans.items()]
    return lines


def figure_line(r):
    """One short line for a benchmark record other than a GEMM's, or None for records that are not
    figures or are shown elsewhere."""
    step = r.get("step", "?")
    if r.get("kind") in ("test", "step", "gpu_state", "meta", "sanitizer"):
        return None
    if r.get("bench") in EPOCH_BENCHES or r.get("bench") == "fashion_mnist_summary":
        return None  # the training block shows them
    if r.get("kernel") == "copy_d2d":
        return f"{step}: copy d2d {r['bytes'] >> 20} MiB: {r['gbps']:.0f} GB/s"
    if "copy_gbps" in r:
        check = "" if r.get("matches_cpu", True) else "  OUTPUT DIFFERS FROM THE CPU"
        return f"{step}: {r['kernel']} {r['shape']}: {r['gbps']:.0f} GB/s, {r['ratio']:.2f} of copy{check}"
    if r.get("bench") == "dp_step":
        overhead = f" ({100 * r['overhead_vs_plain']:+.1f}% vs plain)" if "overhead_vs_plain" in r else ""
        return (f"{step}: {r['model']} batch {r['batch']} on {r['device']}, {r['impl']} x{r['replicas']}: "
                f"{r['us_per_step']:.1f} us/step{overhead}")
    if "us_per_step" in r:
        batch = f" batch {r['batch']}" if "batch" in r else ""
        return f"{step}: {r.get('bench')} {r.get('impl')} on {r.get('device')}{batch}: {r['us_per_step']:.2f} us/step"
    # Anything else (bench_data_parallel's all-reduce records, ...): its numbers, compactly.
    return generic_line(r)


def test_lines(tests_):
    counts = {}
    for t in tests_:
        counts[t["status"]] = counts.get(t["status"], 0) + 1
    yield (f"tests: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) +
           f" (of {len(tests_)}, {sum(t['seconds'] for t in tests_):.0f} s in all)")
    not_passed = [t for t in tests_ if t["status"] != "passed"]
    for t in not_passed[:15]:
        yield f"  {t['status'].upper()}: {t['name']} ({t['seconds']:.1f} s)"
    if len(not_passed) > 15:
        yield f"  ... and {len(not_passed) - 15} more not passed (results.jsonl has them all)"
    slowest = sorted(tests_, key=lambda t: -t["seconds"])[:3]
    yield "  slowest: " + "; ".join(f"{t['name'][:50]} {t['seconds']:.1f} s" for t in slowest)


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def sanitizer_line(r):
    tool = r["tool"]
    if r.get("errors") is None:
        found = "no summary line in its log (the tool did not finish: stopped, or crashed)"
    elif "hazards" in r:
        found = (f"{plural(r['hazards'], 'hazard')} ({plural(r['errors'], 'error')}, "
                 f"{plural(r['warnings'], 'warning')}) (tool)")
    else:
        found = f"{plural(r['errors'], 'error')} (tool)"
    if "test_cases" not in r:
        under = "no Catch2 summary"
    elif r.get("tests_failed"):
        others = ", ".join(f"{r[k]} {k[6:]}" for k in r if k.startswith("tests_") and k != "tests_failed" and r[k])
        under = f"{r['tests_failed']} failed" + (f", {others}" if others else "") + f" of {r['test_cases']}"
    else:
        under = f"all {r['test_cases']} passed"
    line = f"{tool}: {found}; tests under it: {under}"
    for finding in r.get("first", [])[:3] if r.get("errors") else []:
        line += f"\n  {tool} finding: {finding}"
    return line


def training_lines(records):
    names = {"mlp": "MLP", "cnn": "CNN"}
    for (model, device), sides in training_runs(records).items():
        s = training_summary(model, device, sides)
        epochs = max(s.get("minidl_epochs", 0), s.get("pytorch_epochs", 0))
        parts = []
        for impl, shown in (("minidl", "minidl"), ("pytorch", "PyTorch")):
            if f"{impl}_epochs" in s:
                cut = "" if s[f"{impl}_epochs"] == epochs else f" after {s[f'{impl}_epochs']} epochs"
                parts.append(f"{shown} {100 * s[f'{impl}_test_acc']:.2f}% {s[f'{impl}_median_s']:.2f} s/epoch{cut}")
            else:
                parts.append(f"{shown}: no epoch finished")
        ratio = f"; minidl/PyTorch {s['ratio']:.2f}" if "ratio" in s else ""
        yield f"Fashion-MNIST {names[model]} {epochs} epochs on {device}: " + "; ".join(parts) + ratio
        for impl, shown in (("minidl", "minidl"), ("pytorch", "PyTorch")):
            if sides.get(impl):
                yield (f"  {shown} test acc by epoch: " + " ".join(f"{100 * e['test_acc']:.1f}" for e in sides[impl]) +
                       "; s/epoch: " + " ".join(f"{e['train_s']:.2f}" for e in sides[impl]))


def gpu_state_line(r):
    def field(*prefixes):
        return next((v for k, v in r.items() for p in prefixes if k.startswith(p)), "?")
    return (f"gpu {r.get('gpu')} {r.get('when')}: {field('pstate')}, sm {field('clocks.current.sm', 'clocks.sm')}/"
            f"{field('clocks.max.sm')} MHz, mem {field('clocks.current.memory', 'clocks.mem')} MHz, "
            f"{field('power.draw')}/{field('power.limit')} W, {field('temperature.gpu')} C, "
            f"util {field('utilization.gpu')}%, {field('memory.used')} MiB used, "
            f"reasons {field('clocks_event_reasons', 'clocks_throttle_reasons')}")


def summary(results_path):
    records = read_records(results_path)
    lines = []
    tests_ = [r for r in records if r.get("kind") == "test"]
    if tests_:
        lines += test_lines(tests_)
    lines += [sanitizer_line(r) for r in records if r.get("kind") == "sanitizer"]
    lines += training_lines(records)
    lines += [gpu_state_line(r) for r in records if r.get("kind") == "gpu_state"]
    # The figures last: cut first when the summary would outgrow SUMMARY_CHARS.
    figures = gemm_lines([r for r in records if r.get("kernel") in ("gemm", "gemm_plan") and "n" in r])
    for r in records:
        if r.get("kernel") in ("gemm", "gemm_plan") and "n" in r:
            continue
        try:
            line = figure_line(r)
        except (KeyError, TypeError, ValueError):
            line = generic_line(r)
        if line:
            figures.append(line)
    room = SUMMARY_CHARS - sum(len(line) + 1 for line in lines)
    for i, line in enumerate(figures):
        if len(line) + 1 > room - 80:
            lines.append(f"... {len(figures) - i} more figure lines in results.jsonl")
            break
        lines.append(line)
        room -= len(line) + 1
    if lines:
        print("\n".join(lines))


def main(argv):
    if len(argv) == 3 and argv[1] == "tests":
        tests(argv[2])
    elif len(argv) == 4 and argv[1] == "sanitizer":
        sanitizer(argv[2], argv[3])
    elif len(argv) == 5 and argv[1] == "trainer-csv":
        trainer_csv(argv[2], argv[3], argv[4])
    elif len(argv) == 3 and argv[1] == "training":
        training(argv[2])
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
