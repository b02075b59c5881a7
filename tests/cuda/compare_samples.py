#!/usr/bin/env python3
"""Runs a sample on the CPU and on CUDA with the same seed and checks that they train alike.

    compare_samples.py seed_train    <seed_train binary>     # cpu vs cuda:0
    compare_samples.py data_parallel <data_parallel binary>  # 2 CPU replicas vs every CUDA device
    compare_samples.py fashion_mnist <fashion_mnist binary> {mlp,cnn}
    compare_samples.py fashion_mnist_graph <fashion_mnist binary>  # cuda vs cuda --cuda-graph

The two runs do the same arithmetic in a different order (tiled GEMMs, parallel reductions), so
they agree to float32 rounding, which a few SGD steps carry forward without growing much:
  - seed_train and data_parallel print losses with 3 decimals; two runs whose losses differ by
    < 1e-4 can still round differently at a boundary, so one unit in the last digit is allowed;
  - fashion_mnist (--limit 512, 2 epochs, 16 steps): losses within 2e-3 (the largest gap
    measured on the simulated device is 1.5e-4; tenfold margin for other compilers and GPUs),
    test accuracy within 1 percentage point (an example on a decision boundary may flip).
fashion_mnist_graph runs the MLP on cuda:0 twice, eagerly and with --cuda-graph (every full
batch's step a replay of a captured graph, captured again when the cosine schedule changes the
learning rate): the same kernels on the same data in the same order, so every figure of the
metrics but the speed must be identical.
Exits 77 (ctest: skipped) when there is no usable CUDA device, or not two for data_parallel.
"""
import csv
import re
import subprocess
import sys
import tempfile
from pathlib import Path

LOSS_LINE = re.compile(r"^\[(\d+), +(\d+)\] loss: ([0-9.]+)$", re.M)


def run(args):
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        sys.exit(f"{' '.join(args)} failed with exit code {out.returncode}")
    return out.stdout


def skip(why):
    print(f"skipped: {why}")
    sys.exit(77)


def compare_loss_lines(cpu, gpu, what):
    a, b = LOSS_LINE.findall(cpu), LOSS_LINE.findall(gpu)
    if not a or len(a) != len(b):
        sys.exit(f"loss lines differ in number: cpu {len(a)}, {what} {len(b)}")
    for (e1, i1, l1), (e2, i2, l2) in zip(a, b):
        if (e1, i1) != (e2, i2) or abs(float(l1) - float(l2)) > 0.0011:
            sys.exit(f"cpu [{e1}, {i1}] loss {l1} vs {what} [{e2}, {i2}] loss {l2}")
    print(f"{len(a)} loss lines agree between cpu and {what}")


def seed_train(binary):
    cpu = run([binary, "--device", "cpu", "--seed", "7"])
    if "GPU is not available" in cpu:
        skip("no usable CUDA device")
    compare_loss_lines(cpu, run([binary, "--device", "cuda:0", "--seed", "7"]), "cuda:0")


def data_parallel(binary):
    cpu = run([binary, "--device", "cpu", "--replicas", "2", "--seed", "7", "--epochs", "4"])
    devices = re.search(r"\((\d+) CUDA device", cpu)
    if devices is None or int(devices.group(1)) != 2:
        skip("data_parallel is compared over exactly two CUDA devices")
    gpu = run([binary, "--device", "cuda", "--seed", "7", "--epochs", "4"])
    if "over [cuda:0, cuda:1]" not in gpu:
        sys.exit("data_parallel --device cuda did not replicate over cuda:0 and cuda:1:\n" + gpu)
    compare_loss_lines(cpu, gpu, "cuda:0,cuda:1")


def fashion_mnist_metrics(binary, runs):
    """Runs each of `runs` ({name: extra args}) on 512 examples for 2 epochs; their metrics rows."""
    if not Path("/usr/share/datasets/fashion-mnist").is_dir():
        skip("the Fashion-MNIST files are not installed (scripts/setup-deps installs them)")
    with tempfile.TemporaryDirectory() as tmp:
        rows = {}
        for name, extra in runs.items():
            metrics = Path(tmp) / f"{name}.csv"
            args = [binary, *extra, "--limit", "512", "--test-limit", "512",
                    "--epochs", "2", "--seed", "3", "--progress", "none", "--metrics", str(metrics)]
            done = subprocess.run(args, capture_output=True, text=True)
            if done.returncode != 0 and "0 CUDA device(s) visible" in done.stderr:
                skip("no usable CUDA device")
            if done.returncode != 0:
                sys.stderr.write(done.stdout + done.stderr)
                sys.exit(f"{' '.join(args)} failed with exit code {done.returncode}")
            with open(metrics) as f:
                rows[name] = list(csv.DictReader(f))
    return rows


def fashion_mnist(binary, model):
    rows = fashion_mnist_metrics(binary, {"cuda": ["--device", "cuda", "--model", model],
                                          "cpu": ["--device", "cpu", "--model", model]})
    cpu, gpu = rows["cpu"], rows["cuda"]
    if len(cpu) != 2 or len(gpu) != 2:
        sys.exit(f"expected 2 epochs of metrics, got cpu {len(cpu)} and cuda {len(gpu)}")
    for a, b in zip(cpu, gpu):
        for key, tol in (("train_loss", 2e-3), ("test_loss", 2e-3), ("test_acc", 1.0)):
            x, y = float(a[key]), float(b[key])
            scale = 100.0 if key == "test_acc" and max(x, y) <= 1.0 else 1.0  # accuracy as a fraction or in %
            if abs(x - y) * scale > tol:
                sys.exit(f"{model} epoch {a['epoch']}: {key} cpu {x} vs cuda {y} (tolerance {tol})")
        print(f"{model} epoch {a['epoch']}: train_loss {a['train_loss']} / {b['train_loss']}, "
              f"test_loss {a['test_loss']} / {b['test_loss']}, test_acc {a['test_acc']} / {b['test_acc']} (cpu / cuda)")


def fashion_mnist_graph(binary):
    rows = fashion_mnist_metrics(binary, {"eager": ["--device", "cuda"],
                                          "graph": ["--device", "cuda", "--cuda-graph"]})
    eager, graph = rows["eager"], rows["graph"]
    if len(eager) != 2 or len(graph) != 2:
        sys.exit(f"expected 2 epochs of metrics, got eager {len(eager)} and graph {len(graph)}")
    for a, b in zip(eager, graph):
        for key in ("epoch", "train_loss", "test_loss", "test_acc", "lr"):
            if a[key] != b[key]:
                sys.exit(f"epoch {a['epoch']}: {key} eager {a[key]} vs --cuda-graph {b[key]} (must be identical)")
        print(f"epoch {a['epoch']}: train_loss {a['train_loss']}, test_loss {a['test_loss']}, "
              f"test_acc {a['test_acc']}, identical eagerly and with --cuda-graph")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sample, binary = sys.argv[1], sys.argv[2]
    if sample == "seed_train":
        seed_train(binary)
    elif sample == "data_parallel":
        data_parallel(binary)
    elif sample == "fashion_mnist" and len(sys.argv) == 4 and sys.argv[3] in ("mlp", "cnn"):
        fashion_mnist(binary, sys.argv[3])
    elif sample == "fashion_mnist_graph":
        fashion_mnist_graph(binary)
    else:
        sys.exit(__doc__)
