#!/usr/bin/env python3
"""bench/torch_attention.py: PyTorch's scaled_dot_product_attention, forward + backward, causal,
on the shapes bench_attention --gpu-only times (B x H x T x hs: the GPT shapes and T = --gpu-T
with 12 heads of 64), in float32 and bfloat16 on --device (cuda:0 by default), so that minidl's
fused-bf16 line has PyTorch's beside it from the same GPU. Each case: one warm-up, samples of at
least --min-ms, the median of --reps samples, the device synchronised before each clock read.
JSON lines on stdout, in bench_attention's format (impl "torch" and "torch-bf16"). Needs PyTorch 2.0 or
later (F.scaled_dot_product_attention)."""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def median_seconds(fn, reps, min_seconds, sync):
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - t0, 1e-9)
    calls = max(1, int(min_seconds / once + 0.999))
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--gpu-T", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-ms", type=float, default=200)
    args = ap.parse_args()
    device = torch.device(args.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    b = args.batch
    cases = [(b, 4, 64, 32), (b, 6, 128, 64), (b, 4, 256, 32), (b, 6, 256, 64), (b, 12, args.gpu_T, 64)]
    for (B, H, T, hs) in cases:
        for dtype, impl in ((torch.float32, "torch"), (torch.bfloat16, "torch-bf16")):
            g = torch.Generator(device="cpu").manual_seed(1)
            q, k, v, dout = (torch.randn(B, H, T, hs, generator=g).to(device, dtype) for _ in range(4))
            for t in (q, k, v):
                t.requires_grad_(True)

            def step():
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)

            seconds = median_seconds(step, args.reps, args.min_ms / 1e3, sync)
            print(json.dumps({"bench": "attention", "device": device.type, "impl": impl, "B": B, "H": H, "T": T,
                              "hs": hs, "causal": True, "ms_fwd_bwd": round(seconds * 1e3, 4),
                              "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
