#!/usr/bin/env python3
"""bench/torch_mlp_step.py: the MLP training step of `bench_train_step --model mlp` in PyTorch eager:
784 -> 256 -> ReLU -> 128 -> ReLU -> 10, CrossEntropyLoss, backward, SGD (lr 0.01, momentum 0.9),
zero_grad, on a random batch already on the device, for each batch size of the sweep. fp32 with
TF32 disabled, as minidl computes. A warm-up, then --repeats runs of --steps steps; the median is
one JSON line per batch size on stdout:
  {"bench":"mlp_step","impl":"pytorch","device":"cuda:0","batch":128,"steps":200,"us_per_step":X}
Exits 0 with a message on stderr when torch (or the requested GPU) is missing."""
import argparse
import json
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("torch_mlp_step.py: torch is not installed; skipped", file=sys.stderr)
    sys.exit(0)


def mlp():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def time_step(device, batch, steps, warmup, repeats, seed):
    torch.manual_seed(seed)
    model = mlp().to(device)
    x = torch.randn(batch, 784, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()

    def run(n):
        for _ in range(n):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    run(warmup)
    us = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(steps)
        us.append((time.perf_counter() - start) * 1e6 / steps)
    return statistics.median(us)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--batch-sizes", default="128,512,1024,4096")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_mlp_step.py: no CUDA device for torch; skipped", file=sys.stderr)
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for batch in [int(b) for b in a.batch_sizes.split(",")]:
        us = time_step(device, batch, a.steps, a.warmup, a.repeats, a.seed)
        print(f"pytorch {torch.__version__} mlp step on {a.device}, batch {batch}: median {us:.2f} us/step",
              file=sys.stderr)
        print(json.dumps({"bench": "mlp_step", "impl": "pytorch", "version": torch.__version__, "device": a.device,
                          "batch": batch, "steps": a.steps, "us_per_step": round(us, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
