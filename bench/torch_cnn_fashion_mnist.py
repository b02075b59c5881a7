#!/usr/bin/env python3
"""bench/torch_cnn_fashion_mnist.py: the Fashion-MNIST CNN of samples/fashion_mnist (--model cnn)
in PyTorch, with the trainer's defaults: conv(1->32, 3x3, pad 1)-BN-ReLU-maxpool 2,
conv(32->64, 3x3, pad 1)-BN-ReLU-maxpool 2, flatten, dropout 0.25, Linear(3136->128)-ReLU,
Linear(128->10), PyTorch's default initialisation, cross-entropy, SGD momentum 0.9 with
weight decay, a cosine schedule stepped once per epoch, batch 64, shuffled, pixels / 255
normalised with mean 0.2860 and stddev 0.3530. It reads the same IDX files itself (gzip + numpy)
and prints one line per epoch on stderr and one JSON line per epoch on stdout:
  {"bench":"cnn_fashion_mnist_epoch","impl":"pytorch","epoch":1,"train_s":X,"samples_per_s":Y,...}
Only the training pass is timed (batches, forward, loss, backward, step), as minidl's trainer
times it; the test evaluation after it is not.
--loader: "dataloader" is torch.utils.data.DataLoader over a TensorDataset (what the tutorials
write); "index" gathers each batch with one tensor index from torch.randperm (PyTorch's fastest
way to batch in-memory data). Threads: --threads, else OMP_NUM_THREADS, else PyTorch's default.
Evaluation runs in eval mode (running batch-norm statistics, no dropout), as in minidl.
Exits 0 with a message on stderr when torch is not installed."""
import argparse
import gzip
import json
import os
import statistics
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.optim as optim
    from torch.utils.data import DataLoader, TensorDataset
except ImportError as e:
    print(f"torch_cnn_fashion_mnist.py: {e.name} is not installed (Debian: apt-get install python3-torch "
          "python3-numpy); skipped", file=sys.stderr)
    sys.exit(0)

MEAN, STDDEV = 0.2860, 0.3530


def read_idx(path, rank):
    """The array of an IDX file (gzipped when the name ends in .gz), checking its header."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 + 4 * rank or data[0] != 0 or data[1] != 0 or data[2] != 0x08 or data[3] != rank:
        sys.exit(f"{path}: not an IDX file of unsigned bytes with rank {rank}")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    offset = 4 + 4 * rank
    if len(data) != offset + int(np.prod(dims)):
        sys.exit(f"{path}: {len(data)} bytes, expected {offset + int(np.prod(dims))} for dims {dims}")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def load_split(data_dir, prefix, limit):
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 3)
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 1)
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / np.float32(255))
    x = (x - MEAN) / STDDEV
    return x, torch.from_numpy(labels.astype(np.int64))


def make_model():
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
        nn.Linear(128, 10))


def batches(x, y, batch_size, loader, generator):
    if loader == "dataloader":
        yield from DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, generator=generator)
        return
    order = torch.randperm(len(x), generator=generator)
    for start in range(0, len(x), batch_size):
        idx = order[start:start + batch_size]
        yield x[idx], y[idx]


def evaluate(model, x, y, criterion):
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(x), 1000):
            logits = model(x[start:start + 1000])
            loss_sum += criterion(logits, y[start:start + 1000]).item() * len(logits)
            correct += (logits.argmax(1) == y[start:start + 1000]).sum().item()
    model.train()
    return loss_sum / len(x), correct / len(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--schedule", choices=["cosine", "step", "none"], default="cosine")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--limit", type=int, default=0, help="first N training examples (0 = all)")
    parser.add_argument("--loader", choices=["dataloader", "index"], default="index")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()

    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS", "0"))
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)

    x_train, y_train = load_split(args.data_dir, "train", args.limit)
    x_test, y_test = load_split(args.data_dir, "t10k", 0)
    model = make_model()
    criterion = nn.CrossEntropyLoss()
    if args.optimizer == "sgd":
        optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                              weight_decay=args.weight_decay)
    else:
        optimizer = optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    if args.schedule == "cosine":
        scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    elif args.schedule == "step":  # the trainer's step schedule: x0.1 every third of the run
        scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=max(1, args.epochs // 3), gamma=0.1)
    else:
        scheduler = None

    times = []
    for epoch in range(1, args.epochs + 1):
        lr = optimizer.param_groups[0]["lr"]
        loss_sum, seen = 0.0, 0
        start = time.perf_counter()
        for inputs, labels in batches(x_train, y_train, args.batch_size, args.loader, generator):
            optimizer.zero_grad()
            loss = criterion(model(inputs), labels)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(labels)
            seen += len(labels)
        train_s = time.perf_counter() - start
        times.append(train_s)
        if scheduler is not None:
            scheduler.step()
        test_loss, test_acc = evaluate(model, x_test, y_test, criterion)
        print(f"epoch {epoch:2d}  train loss {loss_sum / seen:.4f}  test loss {test_loss:.4f}  "
              f"test acc {100 * test_acc:.2f}%  {train_s:.3f} s  ({seen / train_s:,.0f} samples/s)  lr {lr:.5g}",
              file=sys.stderr)
        print(json.dumps({"bench": "cnn_fashion_mnist_epoch", "impl": "pytorch", "version": torch.__version__,
                          "loader": args.loader, "threads": torch.get_num_threads(), "epoch": epoch,
                          "batch_size": args.batch_size, "train_s": round(train_s, 4),
                          "samples_per_s": round(seen / train_s, 1), "train_loss": round(loss_sum / seen, 6),
                          "test_loss": round(test_loss, 6), "test_acc": round(test_acc, 6), "lr": lr},
                         separators=(",", ":")), flush=True)
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} thread(s), loader {args.loader}: median epoch "
          f"{statistics.median(times):.3f} s over {len(times)} epochs", file=sys.stderr)


if __name__ == "__main__":
    main()
