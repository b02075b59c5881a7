#!/usr/bin/env python3
"""fashion_mnist_resume: a 2-process Fashion-MNIST run stopped mid-epoch (rank 0 writes the
checkpoint) and resumed on 2 processes ends with the same metrics as an uninterrupted 2-process
run: every column of the metrics CSV but samples_per_s (a timing) is compared as text. Exits 77
(skipped) when the Fashion-MNIST files are not installed.

With --cnn it trains the CNN on 601 examples, so each epoch's last batch of 25 rows splits 12
and 13 between the ranks: its dropout draws different numbers of random values on each, and
the resumed ranks, all restored from rank 0's generator state, continue the run only if dropout
draws each rank's rows of the whole batch's mask (Note [random draws of a batch shard] in
core/generator.h).

Usage: fashion_mnist_resume.py --work-dir DIR [--cnn] -- MPIEXEC_PREFIX... FASHION_MNIST
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys


def run(command, work_dir, label):
    print("+", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=work_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    print(done.stdout)
    if done.returncode != 0:
        sys.exit(f"fashion_mnist_resume: FAILED: the {label} run exited with {done.returncode}")
    return done.stdout


def rows(path):
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k != "samples_per_s"} for r in csv.DictReader(f)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--cnn", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    data_dir = os.environ.get("MINIDL_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
    if not os.path.isdir(data_dir):
        print(f"fashion_mnist_resume: no Fashion-MNIST in {data_dir} (apt-get install dataset-fashion-mnist); skipped")
        return 77
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    # 600 (601) examples in batches of 64: 9 full batches and one of 24 (25) per epoch, 2 epochs.
    flags = ["--limit", "600", "--test-limit", "500", "--epochs", "2", "--progress", "lines"]
    if args.cnn:
        flags = ["--model", "cnn", "--limit", "601"] + flags[2:]
    out = run(command + flags + ["--metrics", "whole.csv"], args.work_dir, "uninterrupted")
    if "2 processes" not in out:
        sys.exit("fashion_mnist_resume: FAILED: the run did not train over 2 processes")
    run(command + flags + ["--checkpoint", "ck.safetensors", "--stop-after-batches", "13"], args.work_dir, "first half")
    out = run(command + flags + ["--resume", "ck.safetensors", "--checkpoint", "ck.safetensors", "--metrics",
                                 "resumed.csv"], args.work_dir, "resumed")
    if "resumed from ck.safetensors at epoch 2, batch 3" not in out:
        sys.exit("fashion_mnist_resume: FAILED: the resumed run did not start at epoch 2, batch 3")
    whole, resumed = rows(os.path.join(args.work_dir, "whole.csv")), rows(os.path.join(args.work_dir, "resumed.csv"))
    if whole != resumed or len(whole) != 2:
        sys.exit(f"fashion_mnist_resume: FAILED: the metrics differ:\n  uninterrupted {whole}\n  resumed       {resumed}")
    print("fashion_mnist_resume: the resumed run's metrics equal the uninterrupted run's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
