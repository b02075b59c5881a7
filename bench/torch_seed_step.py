#!/usr/bin/env python3
"""bench/torch_seed_step.py: the seed tutorial's training step in PyTorch, timed like
`bench_train_step --model seed`: DataLoader batch (TensorDataset 100x10 randn, labels randint
[0, 2), batch 10, shuffled), SimpleModel forward, CrossEntropyLoss, backward, SGD step (lr 0.01),
zero_grad, on --device (cpu, or cuda:0: the batch is copied to the GPU each step, as minidl does).
A warm-up, then --repeats runs of --steps steps; the median is one JSON line on stdout:
  {"bench":"seed_step","impl":"pytorch","device":"cpu","threads":1,"steps":10000,"us_per_step":X}
Threads: OMP_NUM_THREADS when set (the same variable minidl reads), else PyTorch's default.
Exits 0 with a message on stderr when torch (or the requested GPU) is missing."""
import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.optim as optim
    from torch.utils.data import DataLoader, TensorDataset
except ImportError:
    print("torch_seed_step.py: torch is not installed (Debian: apt-get install python3-torch); skipped",
          file=sys.stderr)
    sys.exit(0)


class SimpleModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 5)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def train_steps(steps, loader, model, optimizer, criterion, device):
    done = 0
    while done < steps:
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            done += 1
            if done == steps:
                return


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_seed_step.py: no CUDA device for torch; skipped", file=sys.stderr)
        return
    model = SimpleModel().to(device)
    dataset = TensorDataset(torch.randn(100, 10), torch.randint(0, 2, (100,)))
    loader = DataLoader(dataset, batch_size=10, shuffle=True)
    optimizer = optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()

    train_steps(args.warmup, loader, model, optimizer, criterion, device)
    runs = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        train_steps(args.steps, loader, model, optimizer, criterion, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        runs.append((time.perf_counter() - start) * 1e6 / args.steps)
    median = statistics.median(runs)
    print(f"seed step in PyTorch {torch.__version__} on {device}: median {median:.3f} us/step over "
          f"{args.repeats} runs of {args.steps} steps (min {min(runs):.3f}, max {max(runs):.3f})", file=sys.stderr)
    print(json.dumps({"bench": "seed_step", "impl": "pytorch", "device": str(device),
                      "threads": torch.get_num_threads(), "steps": args.steps,
                      "us_per_step": round(median, 3)}, separators=(",", ":")))


if __name__ == "__main__":
    main()
