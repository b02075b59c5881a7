#!/usr/bin/env python3
"""bench/torch_fashion_mnist.py: the Fashion-MNIST trainer of samples/fashion_mnist in PyTorch,
with the same defaults and the same two models (--model): the MLP 784-256-128-10 (ReLU, --hidden),
or the CNN conv(1->32, 3x3, pad 1)-BN-ReLU-maxpool 2, conv(32->64, 3x3, pad 1)-BN-ReLU-maxpool 2,
flatten, dropout 0.25, Linear(3136->128)-ReLU, Linear(128->10); PyTorch's default
initialisation, cross-entropy, SGD momentum 0.9 with weight decay, a cosine schedule stepped once
per epoch, batch 64, shuffled, pixels / 255 normalised with mean 0.2860 and stddev 0.3530. It
reads the same IDX files itself (gzip + torch) and prints one line per epoch on stderr and one
JSON line per epoch on stdout ("cnn_fashion_mnist_epoch" for the CNN):
  {"bench":"fashion_mnist_epoch","impl":"pytorch","epoch":1,"train_s":X,"samples_per_s":Y,...}
Evaluation runs in eval mode (running batch-norm statistics, no dropout), as in minidl.
Only the training pass is timed (batches, forward, loss, backward, step), as minidl's trainer
times it; the test evaluation after it is not.
--loader: "dataloader" is torch.utils.data.DataLoader over a TensorDataset (what the tutorials
write); "index" gathers each batch with one tensor index from torch.randperm (PyTorch's fastest
way to batch in-memory data). Threads: --threads, else OMP_NUM_THREADS, else PyTorch's default.
--device: cpu (the default) or cuda[:N]. On a GPU the model lives there, the data stays on the
CPU and each batch is gathered there into pinned memory and copied to the device, as minidl's
trainer does (DataLoader with pin_memory, then x.to(device)); the clock is read after a CUDA
synchronisation, and TF32 is off, as minidl computes in fp32.
Exits 0 with a message on stderr when torch (or the requested GPU) is not there."""
import argparse
import gzip
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
except ImportError as e:
    print(f"torch_fashion_mnist.py: {e.name} is not installed (Debian: apt-get install python3-torch); skipped",
          file=sys.stderr)
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
    size = 1
    for d in dims:
        size *= d
    if len(data) != offset + size:
        sys.exit(f"{path}: {len(data)} bytes, expected {offset + size} for dims {dims}")
    # A bytearray: torch.frombuffer wants a writable buffer. No numpy: a PyTorch install may lack it.
    return torch.frombuffer(bytearray(data), dtype=torch.uint8, offset=offset).reshape(dims)


def load_split(data_dir, prefix, limit):
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 3)
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 1)
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    x = images.reshape(len(images), -1).to(torch.float32) / 255
    x = (x - MEAN) / STDDEV
    return x, labels.to(torch.int64)


def make_mlp(hidden):
    layers, width = [], 784
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def make_cnn():
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
        nn.Linear(128, 10))


def batches(x, y, batch_size, loader, generator, pin=False):
    if loader == "dataloader":
        yield from DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, generator=generator,
                              pin_memory=pin)
        return
    order = torch.randperm(len(x), generator=generator)
    for start in range(0, len(x), batch_size):
        idx = order[start:start + batch_size]
        yield x[idx], y[idx]


def to_device(inputs, labels, device):
    """A batch built on the CPU, on `device`: on a GPU through pinned memory, copied asynchronously."""
    if device.type != "cuda":
        return inputs, labels
    pinned = [t if t.is_pinned() else t.pin_memory() for t in (inputs, labels)]  # the DataLoader pins already
    return [t.to(device, non_blocking=True) for t in pinned]


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def evaluate(model, x, y, criterion, device):
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(x), 1000):
            inputs, labels = to_device(x[start:start + 1000], y[start:start + 1000], device)
            logits = model(inputs)
            loss_sum += criterion(logits, labels).item() * len(logits)
            correct += (logits.argmax(1) == labels).sum().item()
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
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--hidden", default="256,128", help="the MLP's hidden layers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--limit", type=int, default=0, help="first N training examples (0 = all)")
    parser.add_argument("--loader", choices=["dataloader", "index"], default="index")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("torch_fashion_mnist.py: no CUDA device for torch; skipped", file=sys.stderr)
            return
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS", "0"))
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)

    x_train, y_train = load_split(args.data_dir, "train", args.limit)
    x_test, y_test = load_split(args.data_dir, "t10k", 0)
    model = (make_cnn() if args.model == "cnn" else make_mlp([int(h) for h in args.hidden.split(",") if h])).to(device)
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
        synchronize(device)
        start = time.perf_counter()
        for inputs, labels in batches(x_train, y_train, args.batch_size, args.loader, generator,
                                      pin=device.type == "cuda"):
            inputs, labels = to_device(inputs, labels, device)
            optimizer.zero_grad()
            loss = criterion(model(inputs), labels)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(labels)
            seen += len(labels)
        synchronize(device)  # the last step's update may still run on the GPU
        train_s = time.perf_counter() - start
        times.append(train_s)
        if scheduler is not None:
            scheduler.step()
        test_loss, test_acc = evaluate(model, x_test, y_test, criterion, device)
        print(f"epoch {epoch:2d}  train loss {loss_sum / seen:.4f}  test loss {test_loss:.4f}  "
              f"test acc {100 * test_acc:.2f}%  {train_s:.3f} s  ({seen / train_s:,.0f} samples/s)  lr {lr:.5g}",
              file=sys.stderr)
        bench = "cnn_fashion_mnist_epoch" if args.model == "cnn" else "fashion_mnist_epoch"
        print(json.dumps({"bench": bench, "impl": "pytorch", "version": torch.__version__,
                          "device": args.device, "loader": args.loader, "threads": torch.get_num_threads(), "epoch": epoch,
                          "batch_size": args.batch_size, "train_s": round(train_s, 4),
                          "samples_per_s": round(seen / train_s, 1), "train_loss": round(loss_sum / seen, 6),
                          "test_loss": round(test_loss, 6), "test_acc": round(test_acc, 6), "lr": lr},
                         separators=(",", ":")), flush=True)
    print(f"PyTorch {torch.__version__} on {args.device}, {torch.get_num_threads()} thread(s), loader {args.loader}: "
          f"median epoch {statistics.median(times):.3f} s over {len(times)} epochs", file=sys.stderr)


if __name__ == "__main__":
    main()
