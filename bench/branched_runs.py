"""A pilot for issue #30's next step: can runs branched from a later point of the reference's run see
what the compressed runs cannot? Plain PyTorch, batchwise's mlp (784-512-256-10) on Fashion-MNIST,
SGD, a 35-epoch run with a warm-up of 1 % of it then a cosine decay, batches 128, 512 and 1,024 at
the rates tune advised for them on this machine (0.037, 0.052, 0.060; note: batchwise's own runs warm
up over about an epoch and sample without replacement, this one 0.35 epochs and with replacement).

    python branched_runs.py branch DELTA P...   # at each fraction P of the run, 512 and 1,024 branch
                                                # from the reference's weights for DELTA epochs at
                                                # their rates; the share of their samples that
                                                # counted, read off the reference's continuation
    python branched_runs.py anneal DELTA P...   # at each P, every batch decays its rate from there
                                                # to 0 over DELTA epochs: the final quality of each
    python branched_runs.py full 128 512 1024   # the full 35-epoch runs, for the truth

    /opt/batchwise-venv/bin/python bench/branched_runs.py branch 0.5 0.01 0.03 0.1 0.3
"""
import copy, math, sys

import torch
import torch.nn as nn

from fmnist_mlp import load, mlp

torch.set_num_threads(2)
xtr, ytr, xte, yte = load()
EPOCHS, N = 35.0, 60000
LR = {128: 0.037, 512: 0.052, 1024: 0.060}
def factor(frac):  # cosine over the run after a warm-up of 1 % of it
    w = 0.01
    return frac / w if frac < w else 0.5 * (1 + math.cos(math.pi * (frac - w) / (1 - w)))
def evaluate(net):
    with torch.no_grad():
        out = net(xte); return nn.functional.cross_entropy(out, yte).item(), (out.argmax(1) == yte).float().mean().item()
class Run:
    def __init__(self, net, batch, seed, samples=0):
        self.net, self.batch, self.samples = net, batch, samples
        self.opt = torch.optim.SGD(net.parameters(), lr=LR[batch]); self.g = torch.Generator().manual_seed(seed)
    def train(self, samples):
        lr0 = LR[self.batch]; end = self.samples + samples
        while self.samples < end:
            for pg in self.opt.param_groups: pg["lr"] = lr0 * factor(self.samples / (EPOCHS * N))
            i = torch.randint(0, N, (self.batch,), generator=self.g)
            loss = nn.functional.cross_entropy(self.net(xtr[i]), ytr[i]); self.opt.zero_grad(); loss.backward(); self.opt.step()
            self.samples += self.batch
mode = sys.argv[1]
if mode == "branch":
    delta = float(sys.argv[2]) * N
    ref = Run(mlp(), 128, 1)
    for p in [float(x) for x in sys.argv[3:]]:
        ref.train(p * EPOCHS * N - ref.samples)
        base = evaluate(ref.net)
        # the reference's continuation, read at quarters of delta (its curve over the branch)
        cont = Run(copy.deepcopy(ref.net), 128, 7, ref.samples); cont.opt.load_state_dict(ref.opt.state_dict())
        curve = [(0, base[0])]
        for q in range(1, 5):
            cont.train(delta / 4); curve.append((q * delta / 4, evaluate(cont.net)[0]))
        out = []
        for b in (512, 1024):
            br = Run(copy.deepcopy(ref.net), b, 7, ref.samples)
            br.train(delta); loss, acc = evaluate(br.net)
            # samples on the reference's continuation that reach this loss (linear between its readings)
            eq = delta
            for (s0, l0), (s1, l1) in zip(curve, curve[1:]):
                if l1 <= loss <= l0: eq = s0 + (s1 - s0) * (l0 - loss) / max(l0 - l1, 1e-12); break
            else:
                if loss > curve[0][1]: eq = 0
            out.append(f"{b}: loss {loss:.4f} share {eq / delta:.2f}")
        print(f"p {p:.3f} ({p * EPOCHS:.2f} epochs): ref loss {base[0]:.4f} acc {base[1]:.4f}; after delta ref {curve[-1][1]:.4f}; " + "; ".join(out), flush=True)
elif mode == "anneal":  # from the reference's checkpoint at p, each batch decays its rate to 0 over delta
    delta = float(sys.argv[2]) * N
    ref = Run(mlp(), 128, 1)
    for p in [float(x) for x in sys.argv[3:]]:
        ref.train(p * EPOCHS * N - ref.samples)
        f0 = factor(ref.samples / (EPOCHS * N)); out = []
        for b in (128, 512, 1024):
            br = Run(copy.deepcopy(ref.net), b, 7, 0)
            start = 0
            while br.samples < delta:
                for pg in br.opt.param_groups: pg["lr"] = LR[b] * f0 * 0.5 * (1 + math.cos(math.pi * br.samples / delta))
                i = torch.randint(0, N, (b,), generator=br.g)
                loss = nn.functional.cross_entropy(br.net(xtr[i]), ytr[i]); br.opt.zero_grad(); loss.backward(); br.opt.step()
                br.samples += b
            l, a = evaluate(br.net); out.append(f"{b}: loss {l:.4f} acc {a:.4f}")
        print(f"p {p:.3f}: " + "; ".join(out), flush=True)
else:  # full runs
    for b in [int(x) for x in sys.argv[2:]]:
        r = Run(mlp(), b, 1); r.train(EPOCHS * N); print(b, evaluate(r.net), flush=True)
