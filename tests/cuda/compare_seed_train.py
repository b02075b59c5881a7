#!/usr/bin/env python3
"""Runs samples/seed_train on the CPU and on cuda:0 with the same seed and checks that the
loss lines agree. The lines print 3 decimals, so two runs whose losses differ by < 1e-4 can
still round differently at a boundary: one unit in the last printed digit is allowed.
Exits 77 (ctest: skipped) when there is no GPU."""
import re
import subprocess
import sys

binary = sys.argv[1]


def run(device):
    out = subprocess.run([binary, "--device", device, "--seed", "7"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        sys.exit(f"seed_train --device {device} failed with exit code {out.returncode}")
    return out.stdout


cpu = run("cpu")
if "GPU is not available" in cpu:
    print("skipped: no usable CUDA device")
    sys.exit(77)
gpu = run("cuda:0")
pattern = re.compile(r"^\[(\d+), +(\d+)\] loss: ([0-9.]+)$", re.M)
a, b = pattern.findall(cpu), pattern.findall(gpu)
if not a or len(a) != len(b):
    sys.exit(f"loss lines differ in number: cpu {len(a)}, cuda {len(b)}")
for (e1, i1, l1), (e2, i2, l2) in zip(a, b):
    if (e1, i1) != (e2, i2) or abs(float(l1) - float(l2)) > 0.0011:
        sys.exit(f"cpu [{e1}, {i1}] loss {l1} vs cuda [{e2}, {i2}] loss {l2}")
print(f"{len(a)} loss lines agree between cpu and cuda:0")
