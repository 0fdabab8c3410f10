"""Subnormal values in a trained model's optimizer state, and what they cost a step on this CPU.

A weight whose gradient is exactly zero (the inputs of a ReLU unit that no longer fires) has its
AdamW first moment, or its SGD momentum, multiplied by 0.9 each step. Rounded to the nearest float,
0.9 x (k units of the last place) is k again for k of 4 or less, so the moment decays into the
subnormal range and stays there, a few units above zero, for the rest of the run; every step then
reads and writes it. On x86 a subnormal operand or result can cost the floating-point unit far more
than a normal one, unless the thread flushes them (FTZ/DAZ in MXCSR: `torch.set_flush_denormal`,
which sets the calling thread's only; the intra-op pool's threads keep theirs).

This trains batchwise's mlp on Fashion-MNIST in plain PyTorch on one thread (so the flag reaches all
of the work), counting the state's subnormal values and timing the steps, then times the moment's
update over a million values, normal, subnormal, and subnormal flushed, in turn: what a subnormal
costs on this CPU, and what it costs `lerp_` (AdamW's update) and a matrix product.

    /opt/batchwise-venv/bin/python bench/denormals.py                          # AdamW, batch 128, 6,000 steps
    /opt/batchwise-venv/bin/python bench/denormals.py --optimizer sgd --batch 16 --steps 20000

Run it alone: any other process on the cores is what it would measure.
"""
import argparse
import math
import statistics
import time

import torch

from fmnist_mlp import epoch_batches, load, mlp

SMALLEST_NORMAL = torch.finfo(torch.float32).tiny


def subnormals(t):
    a = t.abs()
    return int(((a > 0) & (a < SMALLEST_NORMAL)).sum())


def census(model, opt):
    """Subnormal values per tensor kind: weights, gradients, and each optimizer state buffer."""
    out = {}
    for p in model.parameters():
        for kind, t in [("weights", p.data), ("gradients", p.grad)] + list(opt.state.get(p, {}).items()):
            if torch.is_tensor(t) and t.is_floating_point() and t.dim() > 0:
                out[kind] = out.get(kind, 0) + subnormals(t)
    return {k: v for k, v in out.items() if v}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--every", type=int, default=1000, help="steps between the progress lines")
    p.add_argument("--repeats", type=int, default=60, help="times each kind of update is timed at the end")
    p.add_argument("--flush", action="store_true",
                   help="train with subnormals flushed (the control; its census reads none, flushed or not)")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(args.flush)
    xtr, ytr, _, _ = load()
    model = mlp()
    # The rates batchwise advises from its base (0.001 at 32, square root; SGD 0.01 at 32, linear).
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=0.001 * math.sqrt(args.batch / 32))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01 * args.batch / 32, momentum=0.9)
    cosine = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / args.steps)))
    window = []
    for step, idx in epoch_batches(len(xtr), args.batch, args.steps, torch.Generator().manual_seed(0)):
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        cosine.step()
        window.append(time.perf_counter() - start)
        if step % args.every == 0:
            print(f"step {step}: {1e3 * statistics.mean(window):.2f} ms a step, loss {loss.item():.4f}, "
                  f"subnormal values {census(model, opt) or 'none'}", flush=True)
            window = []
    # What a subnormal operand costs here, over a million values each way in turn: an update shaped
    # like AdamW's first moment (x 0.9, then + 0.1 x the same values), the `lerp_` AdamW's step runs,
    # normal, subnormal, and subnormal with the flag on; and a matrix product (512x784 by 784x256)
    # with a quarter of one operand's columns subnormal.
    n = 1 << 20
    normal, tiny = torch.full((n,), 3e-5), torch.full((n,), 3e-45)
    grad, out = torch.randn(n) * 1e-3, torch.empty(n)
    updates = {
        "x 0.9 + 0.1 x": lambda x: torch.add(torch.mul(x, 0.9, out=out), x, alpha=0.1, out=out),
        "lerp_": lambda x: out.copy_(x).lerp_(grad, 0.1),
    }
    for label, update in updates.items():
        took = {"normal": [], "subnormal": [], "subnormal, flushed": []}
        for _ in range(args.repeats):
            for kind, x, flush in (("normal", normal, False), ("subnormal", tiny, False),
                                   ("subnormal, flushed", tiny, True)):
                torch.set_flush_denormal(flush)
                start = time.perf_counter()
                update(x)
                took[kind].append(time.perf_counter() - start)
        torch.set_flush_denormal(args.flush)
        base = statistics.median(took["normal"])
        shown = ", ".join(f"{kind} {1e3 * statistics.median(t):.3f} ms ({statistics.median(t) / base:.2f}x)"
                          for kind, t in took.items())
        print(f"a million of `{label}`: {shown} (medians of {args.repeats}, in turn)")
    a, b = torch.randn(512, 784), torch.randn(784, 256)
    b_tiny = b.clone()
    b_tiny[:, :64] = 3e-45
    took = {"normal": [], "a quarter subnormal": []}
    for _ in range(args.repeats):
        for kind, w in (("normal", b), ("a quarter subnormal", b_tiny)):
            start = time.perf_counter()
            a @ w
            took[kind].append(time.perf_counter() - start)
    print("a matrix product: " + ", ".join(f"{kind} {1e3 * statistics.median(t):.3f} ms" for kind, t in took.items()))


if __name__ == "__main__":
    main()
