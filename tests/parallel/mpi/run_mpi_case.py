#!/usr/bin/env python3
"""run_mpi_case: runs one multi-process test (mpiexec -n N mpi_check SCENARIO) and checks how it
ends: the exit status (0, or non-zero for the failure scenarios), a pattern its output must
contain, and a bound on the time it took. ctest runs it (tests/CMakeLists.txt, label `mpi`).

Usage: run_mpi_case.py --expect ok|fail [--match REGEX]... [--within SECONDS]
                       [--same-lines-as REFERENCE_COMMAND --lines REGEX] -- COMMAND...
--same-lines-as runs a one-process reference (a string, split at spaces) and checks that the
lines of both outputs that match --lines are the same, in the same order.
"""
import argparse
import re
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect", choices=["ok", "fail"], required=True)
    parser.add_argument("--match", action="append", default=[], help="a regex the output must contain")
    parser.add_argument("--within", type=float, default=240.0, help="seconds the job may take")
    parser.add_argument("--same-lines-as", default="", help="a reference command whose lines must reappear")
    parser.add_argument("--lines", default=r"^\[", help="the lines --same-lines-as compares")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    start = time.monotonic()
    try:
        run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=args.within)
    except subprocess.TimeoutExpired as e:
        out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
        print(out)
        print(f"run_mpi_case: FAILED: the job did not end within {args.within:.0f} s (a hang)")
        return 1
    elapsed = time.monotonic() - start
    print(run.stdout)
    print(f"run_mpi_case: exit status {run.returncode} after {elapsed:.1f} s")
    failures = []
    if args.expect == "ok" and run.returncode != 0:
        failures.append(f"expected exit status 0, got {run.returncode}")
    if args.expect == "fail" and run.returncode == 0:
        failures.append("expected a non-zero exit status, got 0")
    for pattern in args.match:
        if not re.search(pattern, run.stdout):
            failures.append(f"the output does not match /{pattern}/")
    if args.same_lines_as:
        ref = subprocess.run(args.same_lines_as.split(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=args.within)
        pick = lambda text: [line for line in text.splitlines() if re.search(args.lines, line)]
        want, got = pick(ref.stdout), pick(run.stdout)
        if ref.returncode != 0 or not want:
            failures.append(f"the reference failed (status {ref.returncode}) or printed no /{args.lines}/ lines")
        elif want != got:
            failures.append("the lines differ from the reference's:\n  reference: " + "\n             ".join(want) +
                            "\n  this job:  " + "\n             ".join(got))
    for f in failures:
        print(f"run_mpi_case: FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
