"""Does a training step slow as the model trains, or as the machine's minutes pass?

Trains batchwise's mlp (plain PyTorch, AdamW at a cosine rate) and, twelve times along the run,
times 40 steps on the same random batches of each of: T, a copy of the run's model with its
optimizer state; W, a copy of its weights with a fresh AdamW; F, the initial weights with a fresh
AdamW, before and after the others (F, F2). The run's own steps are timed throughout ("run", the
median and mean since the last line). Where the run slows and F slows with it, the minutes are
slower, not the model's step; where T/F grows, the trained state itself costs more.

    /opt/batchwise-venv/bin/python bench/step_drift.py [THREADS [BATCH [STEPS]]]   # 2 128 12000

Run it alone: any other process on the cores is what it would measure.
"""
import copy
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fmnist_mlp import load, mlp  # noqa: E402
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 128
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 12000
every = steps // 12
probe = 40
torch.set_num_threads(threads)
xtr, ytr, _, _ = load()
model = mlp(); init = copy.deepcopy(model.state_dict())
lr0 = 0.001 * math.sqrt(batch / 32)
opt = torch.optim.AdamW(model.parameters(), lr=lr0)
cos = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
g = torch.Generator().manual_seed(0)
def step(m, o, idx):
    t = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(m(xtr[idx]), ytr[idx])
    o.zero_grad(set_to_none=False); loss.backward(); o.step()
    return time.perf_counter() - t
def batches(n):
    return [torch.randint(0, len(xtr), (batch,), generator=g) for _ in range(n)]
def timed(m, o, bs):
    return 1e3 * statistics.median([step(m, o, b) for b in bs])
order, at = torch.randperm(len(xtr), generator=g), 0
window = []
for s in range(1, steps + 1):
    if at + batch > len(xtr): order, at = torch.randperm(len(xtr), generator=g), 0
    idx = order[at:at + batch]; at += batch
    window.append(step(model, opt, idx)); cos.step()
    if s % every == 0:
        bs = batches(probe)
        w = copy.deepcopy(model); wo = torch.optim.AdamW(w.parameters(), lr=lr0)
        f = mlp(); f.load_state_dict(init); fo = torch.optim.AdamW(f.parameters(), lr=lr0)
        # T's probe: a copy of the model AND its optimizer state (so the run is not disturbed)
        t = copy.deepcopy(model); to = torch.optim.AdamW(t.parameters(), lr=lr0); to.load_state_dict(copy.deepcopy(opt.state_dict()))
        r = {}
        for name, (m, o) in [("F", (f, fo)), ("T", (t, to)), ("W", (w, wo)), ("F2", (f, fo))]:
            r[name] = timed(m, o, bs)
        print(f"step {s}: run {1e3*statistics.median(window):.2f} ms (mean {1e3*statistics.mean(window):.2f}); probes T {r['T']:.2f} W {r['W']:.2f} F {r['F']:.2f} F2 {r['F2']:.2f}  T/F {r['T']/r['F']:.2f}", flush=True)
        window = []
