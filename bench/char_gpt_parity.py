#!/usr/bin/env python3
"""bench/char_gpt_parity.py: the same GPT in minidl and in PyTorch (bench/char_gpt_torch.py), from
the same weights on the same batch: one training step, compared number by number.

  bench/char_gpt_parity.py build/ci/bin/char_gpt [char_gpt flags...]

runs `char_gpt --dump-grads FILE --dropout 0 [flags]`, which builds the model (--seed), draws the
first training batch and writes the batch, the loss, every parameter before the step, its
gradient and its value after one step (global-norm clipping, AdamW with its two groups at the lr
of iteration 0) to a safetensors file (read here without the safetensors package). The script
loads the initial weights into the PyTorch model (the names are nanoGPT's; the tied weight comes
once, as transformer.wte.weight, and lm_head.weight is the same Parameter; Linear weights are
[out, in] in both), runs the same step in float32 and reports the largest absolute and relative
difference of the loss, of each gradient and of each parameter's update (its value after the step minus before). --double also runs
PyTorch in float64, a reference closer to the exact values than either float32 run.
Exits 1 when the loss or a gradient differs by more than --tol (default 1e-4, relative to the
tensor's largest magnitude); the updates are reported, not judged (see the note at the end of
main()). Exits 0 when torch is not installed (skipped)."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError as e:
    print(f"char_gpt_parity.py: {e.name} is not installed (Debian: apt-get install python3-torch); skipped",
          file=sys.stderr)
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import char_gpt_torch as twin  # noqa: E402

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        t = torch.frombuffer(bytearray(body[lo:hi]), dtype=DTYPES[info["dtype"]]) if hi > lo else \
            torch.empty(0, dtype=DTYPES[info["dtype"]])
        tensors[name] = t.reshape(info["shape"])
    return tensors, meta


def one_step(dump, meta, dtype):
    """The PyTorch step from the dumped weights and batch: (loss, grads, stepped weights, norm)."""
    hp = {k[3:]: v for k, v in meta.items() if k.startswith("hp.")}
    model = twin.GPT(int(hp["vocab_size"]), int(hp["block_size"]), int(hp["n_layer"]), int(hp["n_head"]),
                     int(hp["n_embd"]), 0.0).to(dtype)
    names = dict(model.named_parameters())  # the tied weight once, as transformer.wte.weight
    with torch.no_grad():
        for name, p in names.items():
            p.copy_(dump["init." + name].to(dtype))
    assert model.lm_head.weight is model.transformer.wte.weight
    loss = twin.loss_of(model, dump["x"], dump["y"])
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in names.items()}
    clip = float(hp["grad_clip"])
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else 1e30)
    opt = twin.make_optimizer(model, float(hp["lr"]), float(hp["weight_decay"]), float(hp["beta2"]))
    for g in opt.param_groups:
        g["lr"] = float(meta["lr"])
    opt.step()
    stepped = {n: p.detach().clone() for n, p in names.items()}
    return loss.item(), grads, stepped, norm.item(), set(names)


def diff(a, b):
    a, b = a.double(), b.double()
    abs_err = (a - b).abs().max().item()
    scale = max(b.abs().max().item(), 1e-30)
    return abs_err, abs_err / scale


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary, flags = sys.argv[1], sys.argv[2:]
    double = "--double" in flags
    tol = 1e-4
    if "--tol" in flags:
        i = flags.index("--tol")
        tol = float(flags[i + 1])
        del flags[i:i + 2]
    flags = [f for f in flags if f != "--double"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "step.safetensors")
        subprocess.run([binary, "--dump-grads", path, "--dropout", "0", "--device", "cpu"] + flags, check=True)
        dump, meta = read_safetensors(path)
    mini_names = {k[5:] for k in dump if k.startswith("init.")}
    loss, grads, stepped, norm, names = one_step(dump, meta, torch.float32)
    if names != mini_names:
        sys.exit(f"parameter names differ: only in minidl {sorted(mini_names - names)}, "
                 f"only in PyTorch {sorted(names - mini_names)}")
    mloss = dump["loss"].item()
    print(f"loss: minidl {mloss:.7f}, PyTorch {loss:.7f}, |diff| {abs(mloss - loss):.2e}")
    print(f"gradient norm: minidl {dump['grad_norm'].item():.7f}, PyTorch {norm:.7f}")
    worst = {"grad": (0.0, 0.0, ""), "step": (0.0, 0.0, "")}
    print(f"{'parameter':44} {'shape':>12} {'grad abs':>10} {'grad rel':>10} {'upd abs':>10} {'upd rel':>10}")
    for n in sorted(names):
        g = diff(dump["grad." + n], grads[n])
        # The update (after - before), not the weights: at the first iteration's small lr the
        # weights barely move, and comparing them would mostly compare the loaded initial values.
        s = diff(dump["step." + n] - dump["init." + n], stepped[n] - dump["init." + n])
        for key, d in (("grad", g), ("step", s)):
            if d[1] > worst[key][1]:
                worst[key] = (d[0], d[1], n)
        print(f"{n:44} {str(list(grads[n].shape)):>12} {g[0]:10.2e} {g[1]:10.2e} {s[0]:10.2e} {s[1]:10.2e}")
    for key, (a, r, n) in worst.items():
        print(f"largest {key} difference: {a:.2e} absolute, {r:.2e} relative to the tensor's largest magnitude ({n})")
    lr = float(meta["lr"])
    print(f"largest update difference in units of the lr ({lr:.3g}): {worst['step'][0] / lr:.2e}")
    if double:
        loss64, grads64, stepped64, _, _ = one_step(dump, meta, torch.float64)
        g_m = max(diff(dump["grad." + n], grads64[n])[1] for n in names)
        g_t = max(diff(grads[n], grads64[n])[1] for n in names)
        u_m = max(diff(dump["step." + n].double() - dump["init." + n].double(),
                       stepped64[n] - dump["init." + n].double())[0] for n in names)
        u_t = max(diff(stepped[n].double() - dump["init." + n].double(),
                       stepped64[n] - dump["init." + n].double())[0] for n in names)
        print(f"against PyTorch float64: loss minidl {abs(mloss - loss64):.2e}, PyTorch float32 {abs(loss - loss64):.2e}; "
              f"largest relative gradient error minidl {g_m:.2e}, PyTorch float32 {g_t:.2e}; "
              f"largest update error minidl {u_m:.2e}, PyTorch float32 {u_t:.2e}")
    # Only the loss and the gradients decide: Adam's first update is lr * g / (|g| + eps), which
    # turns the float32 rounding of a gradient element near eps = 1e-8 into a visible share of the
    # lr, so the updates of two correct float32 implementations differ there (--double shows
    # PyTorch float32 differing from float64 by as much).
    bad = abs(mloss - loss) > tol * max(1.0, abs(loss)) or worst["grad"][1] > tol
    print(json.dumps({"bench": "char_gpt_parity", "loss_abs": abs(mloss - loss), "grad_abs": worst["grad"][0],
                      "grad_rel": worst["grad"][1], "step_abs": worst["step"][0], "step_rel": worst["step"][1],
                      "tol": tol, "ok": not bad}))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
