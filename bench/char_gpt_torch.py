#!/usr/bin/env python3
"""bench/char_gpt_torch.py: samples/char_gpt in PyTorch (works with Debian's python3-torch 1.13):
nanoGPT's model.py and train.py for shakespeare_char, with minidl's defaults and the same
recipe, so the two print comparable curves and times:
  data      the bytes of --data (default: the corpus scripts/setup-deps fetches), the sorted set
            of them the vocabulary, the first int(0.9 * n) tokens train and the rest validate;
            a batch is --batch-size windows at uniform random offsets in [0, len - block_size)
            (torch.randint from a generator seeded --seed: the scheme of minidl, not its numbers)
  model     token + learned position embeddings, dropout, pre-LN blocks (LayerNorm, causal
            self-attention with one fused qkv Linear, LayerNorm, MLP 4x with exact GELU),
            final LayerNorm, lm_head tied to the token embedding; GPT-2 init (N(0, 0.02),
            residual projections N(0, 0.02 / sqrt(2 n_layer)), zero biases)
  training  AdamW (betas 0.9 / --beta2, eps 1e-8) with weight decay on the parameters of
            rank >= 2 only, nanoGPT's warm-up + cosine lr per iteration, global-norm clipping
            (--grad-clip, 0 = off), --grad-accum micro-batches, an evaluation every
            --eval-interval iterations and at the end over --eval-iters batches of each split
            (in eval mode, without autograd, from a generator restarted at every evaluation)
It prints "step N: train loss X, val loss Y" per evaluation and the mean ms per iteration
(evaluations not counted), then one JSON line. Threads: --threads, else PyTorch's default.
Torch 1.13 has no fused scaled_dot_product_attention: attention is nanoGPT's explicit path
(masked softmax of q·kᵀ/sqrt(hs)), as minidl computes it.
Exits 0 with a message on stderr when torch is not installed."""
import argparse
import contextlib
import json
import math
import os
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"char_gpt_torch.py: {e.name} is not installed (Debian: apt-get install python3-torch); skipped",
          file=sys.stderr)
    sys.exit(0)

DEFAULT_DATA = os.path.join(os.environ.get("MINIDL_SHAKESPEARE_DIR") or "/usr/local/share/datasets/shakespeare-char",
                            "input.txt")


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = self.attn_dropout(att) @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, dropout) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied: one Parameter
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        T = idx.size(1)
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))


def make_optimizer(model, lr, weight_decay, beta2):
    params = [p for p in model.parameters() if p.requires_grad]  # the tied weight once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, beta2), eps=1e-8)


def get_lr(it, lr, min_lr, warmup, decay_iters):
    """nanoGPT's schedule (optim::WarmupCosineLR in minidl)."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_iters:
        return min_lr
    ratio = (it - warmup) / (decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def load_text(path):
    with open(path, "rb") as f:
        text = f.read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    return chars, data[:n], data[n:]


def get_batch(data, batch_size, block_size, gen):
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=gen)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--lr-decay-iters", type=int, default=0, help="default: --iters")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--eval-iters", type=int, default=20)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: the forward and the loss under torch.autocast(device, torch.bfloat16), as minidl's "
                        "--dtype bf16 (float32 weights and optimizer)")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    decay_iters = a.lr_decay_iters or a.iters
    device = torch.device(a.device)

    chars, train, val = load_text(a.data)
    torch.manual_seed(a.seed)
    model = GPT(len(chars), a.block_size, a.n_layer, a.n_head, a.n_embd, a.dropout).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{a.data}: {len(train) + len(val)} characters, vocabulary of {len(chars)}; "
          f"{n_params / 1e6:.4f}M parameters; {torch.get_num_threads()} threads", file=sys.stderr)
    opt = make_optimizer(model, a.lr, a.weight_decay, a.beta2)
    gen = torch.Generator().manual_seed(a.seed)

    def precision():  # a fresh context manager each time: autocast for --dtype bf16
        if a.dtype == "bf16":
            return torch.autocast(device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @torch.no_grad()
    def evaluate():
        model.eval()
        eval_gen = torch.Generator().manual_seed(a.seed + 1)  # the same batches at every evaluation
        out = []
        for split in (train, val):
            losses = []
            for _ in range(a.eval_iters):
                x, y = (t.to(device) for t in get_batch(split, a.batch_size, a.block_size, eval_gen))
                with precision():
                    losses.append(loss_of(model, x, y).item())
            out.append(sum(losses) / len(losses))
        model.train()
        return out

    history, seconds = [], 0.0
    for it in range(a.iters + 1):
        if it % a.eval_interval == 0 or it == a.iters:
            tl, vl = evaluate()
            history.append({"iter": it, "train_loss": tl, "val_loss": vl})
            print(f"step {it}: train loss {tl:.4f}, val loss {vl:.4f}", flush=True)
        if it == a.iters:
            break
        start = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = get_lr(it, a.lr, a.min_lr, a.warmup, decay_iters)
        for _ in range(a.grad_accum):
            x, y = get_batch(train, a.batch_size, a.block_size, gen)
            with precision():
                loss = loss_of(model, x.to(device), y.to(device)) / a.grad_accum
            loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds += time.perf_counter() - start
    ms = 1000 * seconds / max(a.iters, 1)
    print(f"{a.iters} iterations in {seconds:.1f} s, {ms:.2f} ms/iter")
    print(json.dumps({"bench": "char_gpt", "impl": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "dtype": a.dtype,
                      "iters": a.iters, "ms_per_iter": ms, "history": history}))


if __name__ == "__main__":
    main()
