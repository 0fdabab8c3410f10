"""Does a training step slow as the model trains, or as the machine's minutes pass?

Trains batchwise's mlp (plain PyTorch, AdamW at a cosine rate) and, twelve times along the run,
times 40 steps, on the same random batches, of each of: T, a copy of the run's model with its
optimizer state; W, a copy of its weights with a fresh AdamW; F, the initial weights with a fresh
AdamW. The three take turns at going first. The run's own steps are timed throughout ("run", the
median and mean since the last line); the probes draw their batches from a generator of their own
and step copies, so the run is the run it would be without them. Where the run slows and F slows
with it, the minutes are slower, not the model's step; where T / F grows, the trained state itself
costs more.

    /opt/batchwise-venv/bin/python bench/step_drift.py                               # 2 threads, 128, 12,000 steps
    /opt/batchwise-venv/bin/python bench/step_drift.py --batch 16 --steps 36000
    /opt/batchwise-venv/bin/python bench/step_drift.py --threads 1 --steps 3600 --flush   # subnormals flushed

Run it alone: any other process on the cores is what it would measure.
"""
import argparse
import copy
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fmnist_mlp import epoch_batches, load, mlp  # noqa: E402

PROBE_STEPS = 40


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=12000)
    p.add_argument("--flush", action="store_true",
                   help="flush subnormals (torch.set_flush_denormal: the calling thread's only, so use --threads 1)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(args.flush)
    xtr, ytr, _, _ = load()
    model = mlp()
    init = copy.deepcopy(model.state_dict())
    lr0 = 0.001 * math.sqrt(args.batch / 32)  # batchwise's rule: 0.001 at 32, square root
    opt = torch.optim.AdamW(model.parameters(), lr=lr0)
    cosine = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / args.steps)))
    run_g, probe_g = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)

    def step(m, o, idx):
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(m(xtr[idx]), ytr[idx])
        o.zero_grad(set_to_none=False)
        loss.backward()
        o.step()
        return time.perf_counter() - start

    every = args.steps // 12
    window = []
    for s, idx in epoch_batches(len(xtr), args.batch, args.steps, run_g):
        window.append(step(model, opt, idx))
        cosine.step()
        if s % every:
            continue
        batches = [torch.randint(0, len(xtr), (args.batch,), generator=probe_g) for _ in range(PROBE_STEPS)]
        t = copy.deepcopy(model)
        t_opt = torch.optim.AdamW(t.parameters(), lr=lr0)
        t_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
        w = copy.deepcopy(model)
        f = mlp()
        f.load_state_dict(init)
        probes = {"T": (t, t_opt), "W": (w, torch.optim.AdamW(w.parameters(), lr=lr0)),
                  "F": (f, torch.optim.AdamW(f.parameters(), lr=lr0))}
        names = list(probes)
        k = s // every
        ms = {}
        for name in names[k % 3:] + names[:k % 3]:  # each goes first in turn
            m, o = probes[name]
            ms[name] = 1e3 * statistics.median(step(m, o, b) for b in batches)
        print(f"step {s}: run {1e3 * statistics.median(window):.2f} ms (mean {1e3 * statistics.mean(window):.2f}); "
              f"T {ms['T']:.2f}, W {ms['W']:.2f}, F {ms['F']:.2f} ms (first: {names[k % 3]}); "
              f"T / F {ms['T'] / ms['F']:.2f}, W / T {ms['W'] / ms['T']:.2f}", flush=True)
        window = []


if __name__ == "__main__":
    main()
