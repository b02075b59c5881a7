#!/usr/bin/env python3
"""char_gpt_roofline.py: one char-GPT training step on the CPU, op by op, against the machine's
ceilings (bench_roofline): each op's time from a profiler trace, its floating-point work and
its memory traffic from the model's sizes, the rate it reached, and how far it is from the
bound the ceilings set.

  build/ci/bin/char_gpt --dtype fp32 --n-layer 4 --n-head 4 --n-embd 256 --block-size 256 \\
      --batch-size 8 --iters 15 --eval-interval 100000 --eval-iters 1 \\
      --profile step.json --profile-steps 10
  bench/char_gpt_roofline.py step.json --steps 10 --n-layer 4 --n-embd 256 --block-size 256 \\
      --batch-size 8 --peak-gflops 232.2 --bandwidth-gbs 33.5

Time: each op's self time on the host (its range minus the ranges nested directly inside it,
core/profiler.h), summed over the trace and divided by --steps. The CPU kernels run on the
calling thread and the pool's workers together, so a range's length is the op's wall time.

Work and traffic, per step, float32 (4 bytes a value), N = batch · block tokens, C the width,
L layers, V the vocabulary (read from the trace's logits), nh heads:
  - a product of [n, k] by [k, m] is 2·n·k·m flops and moves its operands and result once:
    4·(n·k + k·m + n·m) bytes. A linear layer's backward is two such products (dx, dW) plus
    the bias's column sums; linear_gelu's forward also writes its GELU, and its backward reads z
    for GELU's derivative.
  - causal attention over T = block positions, head size hd: the forward's two products
    (S = Q·Kᵀ, O = P·V) over the half of the T × T scores that is kept, 2·B·nh·T²·hd flops; the
    backward recomputes S and does four more such products (dV, dP, dQ, dK): 2.5× the forward.
    Traffic: q, k, v, o once each (4 · 4·N·C), the backward q, k, v, o, dO in and dq, dk, dv out.
  - every other op is counted as memory-bound: the bytes of its inputs and outputs, once each;
    its arithmetic (a few flops an element; GELU's two exponentials and a division, about 60)
    is listed where it sets the bound.
The bound is max(flops / peak, bytes / bandwidth); "x bound" is the op's time over it.
The ceilings: --peak-gflops (bench_roofline's fp32 FMA peak at the thread count the step ran
with) and --bandwidth-gbs (its copy bandwidth).
"""
import argparse
import json
import sys
from collections import defaultdict


def self_times(trace):
    """Total self time in ms per (name, category) over all complete ('X') host events."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("pid") == 1]
    by_thread = defaultdict(list)
    for e in events:
        by_thread[e["tid"]].append(e)
    totals = defaultdict(float)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [event, children's time]
        def close(upto):
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= upto + 1e-9:
                ev, child = stack.pop()
                totals[(ev["name"], ev.get("cat"))] += (ev["dur"] - child) / 1e3
                if stack:
                    stack[-1][1] += ev["dur"]
        for e in evs:
            close(e["ts"])
            stack.append([e, 0.0])
        close(float("inf"))
    return totals


def logits_vocab(trace):
    for e in trace["traceEvents"]:
        if e.get("name") == "softmax_cross_entropy":
            first = e["args"]["shapes"].split("]")[0].strip("[ ")
            return int(first.split(",")[-1])
    raise SystemExit("char_gpt_roofline: no softmax_cross_entropy in the trace")


def model(a, vocab):
    """(flops, bytes, note) per step for each op the char-GPT step runs."""
    n, c, layers, t, b = a.batch_size * a.block_size, a.n_embd, a.n_layer, a.block_size, a.batch_size
    f4 = 4

    def product(rows, k, m):
        return 2 * rows * k * m, f4 * (rows * k + k * m + rows * m)

    # The forward's plain linears: c_attn (C -> 3C), attn.c_proj (C -> C), mlp.c_proj (4C -> C)
    # per layer, and the tied output projection (C -> V) once.
    plain = [(n, c, 3 * c), (n, c, c), (n, 4 * c, c)] * layers + [(n, c, vocab)]
    gelu_fc = [(n, c, 4 * c)] * layers  # c_fc, with its GELU
    lin_f = [product(*p) for p in plain]
    fc_f = [product(*p) for p in gelu_fc]
    rows = {}
    rows["linear"] = (sum(f for f, _ in lin_f), sum(x for _, x in lin_f), "")
    fc_flops = sum(f for f, _ in fc_f) + layers * 60 * n * 4 * c
    fc_bytes = sum(x for _, x in fc_f) + layers * f4 * n * 4 * c  # y beside z
    rows["linear_gelu"] = (fc_flops, fc_bytes, "GELU: ~60 flops an element")
    # Backward: dx and dW, each a product of the forward's size, plus db's sums; after a GELU,
    # dz = dy · gelu'(z) first (z read, dz written).
    back_flops = 2 * (sum(f for f, _ in lin_f) + sum(f for f, _ in fc_f)) + layers * 60 * n * 4 * c
    back_bytes = 0
    for rows_, k, m in plain + gelu_fc:
        back_bytes += f4 * (rows_ * m + m * k + rows_ * k) + f4 * (rows_ * m + rows_ * k + m * k)
    back_bytes += layers * f4 * 3 * n * 4 * c
    rows["LinearBackward"] = (back_flops, back_bytes, "two products, and GELU's derivative after c_fc")
    hd = c // a.n_head
    attn_f = 2 * b * a.n_head * t * t * hd * layers
    rows["scaled_dot_product_attention"] = (attn_f, layers * f4 * 4 * n * c, "causal: half the scores")
    rows["ScaledDotProductAttentionBackward"] = (2.5 * attn_f, layers * f4 * 8 * n * c, "")
    ln = 2 * layers + 1
    rows["layer_norm"] = (ln * 8 * n * c, ln * f4 * 2 * n * c, "")
    rows["LayerNormBackward"] = (ln * 10 * n * c, ln * f4 * 3 * n * c, "")
    rows["add"] = (2 * layers * n * c, 2 * layers * f4 * 3 * n * c, "the residual adds")
    rows["softmax_cross_entropy"] = (5 * n * vocab, f4 * 2 * n * vocab, "logits in, their gradient out")
    rows["UnbindBackward"] = (0, layers * f4 * 2 * 3 * n * c, "q, k, v's gradients into one buffer")
    params = layers * (12 * c * c + 13 * c) + vocab * c + t * c + 2 * c
    rows["Optimizer.step#AdamW.step"] = (12 * params, 28 * params, "p, g, m, v in; p, m, v out")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--steps", type=int, required=True, help="the --profile-steps the trace recorded")
    p.add_argument("--n-layer", type=int, required=True)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, required=True)
    p.add_argument("--block-size", type=int, required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--peak-gflops", type=float, required=True)
    p.add_argument("--bandwidth-gbs", type=float, required=True)
    p.add_argument("--top", type=int, default=25, help="rows printed, most time first")
    a = p.parse_args()
    trace = json.load(open(a.trace))
    totals = self_times(trace)
    vocab = logits_vocab(trace)
    work = model(a, vocab)
    step_ms = {}
    for (name, cat), ms in totals.items():
        if cat in ("module",):
            continue  # a module's self time is its own bookkeeping; its ops are rows of their own
        step_ms[name] = step_ms.get(name, 0.0) + ms / a.steps
    all_ms = sum(step_ms.values())
    print(f"{a.steps} steps, {all_ms:.1f} ms of op self time a step; ceilings {a.peak_gflops} GFLOP/s, "
          f"{a.bandwidth_gbs} GB/s; vocabulary {vocab}")
    print("| op | ms/step | share | GFLOP | MB | GFLOP/s | GB/s | bound ms | × bound | |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, ms in sorted(step_ms.items(), key=lambda kv: -kv[1])[: a.top]:
        if name in work:
            flops, nbytes, note = work[name]
            bound = max(flops / (a.peak_gflops * 1e9), nbytes / (a.bandwidth_gbs * 1e9)) * 1e3
            which = "compute" if flops / a.peak_gflops > nbytes / a.bandwidth_gbs else "memory"
            print(f"| {name} | {ms:.2f} | {100 * ms / all_ms:.1f}% | {flops / 1e9:.2f} | {nbytes / 1e6:.1f} | "
                  f"{flops / (ms * 1e6):.1f} | {nbytes / (ms * 1e6):.1f} | {bound:.2f} ({which}) | "
                  f"{ms / bound:.1f} | {note} |")
        else:
            print(f"| {name} | {ms:.2f} | {100 * ms / all_ms:.1f}% | | | | | | | not modelled |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
