"""Is a paired tolerance tighter than the binomial one where the run race measures? Two mlp models
(batchwise's: 784-512-256-10, ReLU), trained alike on Fashion-MNIST with SGD at batches 128 and 512
(rates 0.037 and 0.052, as tune advised them on this machine), a warm-up then a cosine decay, the
same initial weights and data order, for each length given in epochs; then, on the 10,000 test
images, their accuracies, the share of images they disagree on, and two standard errors of their
paired accuracy difference against the binomial two standard errors of one model's accuracy.

    /opt/batchwise-venv/bin/python bench/paired_tolerance.py 0.39 4
"""
import math, sys

import torch
import torch.nn as nn

from fmnist_mlp import load, mlp

torch.set_num_threads(2)
xtr, ytr, xte, yte = load()
def run(batch, lr, epochs, seed=0):
    net = mlp()
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    steps = math.ceil(epochs * 60000 / batch); warm = min(steps // 4, 50)
    perm = torch.randperm(60000, generator=g); pos = 0
    for k in range(steps):
        f = (k + 1) / warm if k < warm else 0.5 * (1 + math.cos(math.pi * (k - warm) / max(1, steps - warm)))
        for pg in opt.param_groups: pg["lr"] = lr * f
        if pos + batch > 60000: perm = torch.randperm(60000, generator=g); pos = 0
        i = perm[pos:pos + batch]; pos += batch
        loss = nn.functional.cross_entropy(net(xtr[i]), ytr[i]); opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad(): return (net(xte).argmax(1) == yte)
for epochs in [float(a) for a in sys.argv[1:]]:
    a = run(128, 0.037, epochs); b = run(512, 0.052, epochs)
    n = len(yte); pa, pb = a.float().mean().item(), b.float().mean().item()
    d = a.float() - b.float(); disagree = (d != 0).float().mean().item()
    paired = d.std().item() / math.sqrt(n); binom = math.sqrt(pa * (1 - pa) / n)
    print(f"{epochs:g} epochs: acc 128 {pa:.4f}, 512 {pb:.4f}; disagree {100*disagree:.1f} %; 2 SE paired {200*paired:.2f} points, binomial {200*binom:.2f}")
