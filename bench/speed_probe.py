"""Would a probe of the machine's speed between sweep trials steady the sweep? A lenet-shaped model
(random data, SGD) swept over 32..512, three repetitions interleaved as the sweep does, each trial
(2 warm-up steps, then at least 0.25 s and 5 steps; samples/s from the median step) between two
probes of a fixed matmul loop (0.1 s before, 0.05 s after). Repeated over several sweeps: each
batch's samples/s and the ratios between batches (what the knee reads), their coefficient of
variation across sweeps, raw and divided by the probes' mean rate. The latest figures are in
docs/benchmarks.md ("Tried and dropped: a probe of the machine's speed between trials").

    /opt/batchwise-venv/bin/python bench/speed_probe.py            # 8 sweeps, about 70 s

Run it alone.
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn

BATCHES = [32, 64, 128, 256, 512]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweeps", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
                          nn.ReLU(), nn.Linear(84, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    data = {b: (torch.randn(b, 1, 28, 28), torch.randint(0, 10, (b,))) for b in BATCHES}
    a, w, w2 = torch.randn(256, 512), torch.randn(512, 512), torch.randn(512, 512)

    def probe(seconds):
        n, start = 0, time.perf_counter()
        while (took := time.perf_counter() - start) < seconds:
            (a @ w).relu() @ w2
            n += 1
        return n / took

    def step(x, y):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    def trial(b):
        x, y = data[b]
        for _ in range(2):
            step(x, y)
        steps, start = [], time.perf_counter()
        while time.perf_counter() - start < 0.25 or len(steps) < 5:
            t = time.perf_counter()
            step(x, y)
            steps.append(time.perf_counter() - t)
        return b / statistics.median(steps)

    raw = {b: [] for b in BATCHES}
    probed = {b: [] for b in BATCHES}
    for sweep in range(args.sweeps):
        r = {b: [] for b in BATCHES}
        n = {b: [] for b in BATCHES}
        for rep in range(3):
            for b in BATCHES if rep % 2 == 0 else BATCHES[::-1]:
                before = probe(0.1)
                rate = trial(b)
                after = probe(0.05)
                r[b].append(rate)
                n[b].append(rate / ((before + after) / 2))
        for b in BATCHES:
            raw[b].append(statistics.median(r[b]))
            probed[b].append(statistics.median(n[b]))
        print(f"sweep {sweep}: " + " ".join(f"{b}:{raw[b][-1]:.0f}" for b in BATCHES), flush=True)

    def cv(xs):
        return statistics.pstdev(xs) / statistics.mean(xs)

    print("coefficient of variation across sweeps: raw, divided by the probes")
    for b in BATCHES:
        print(f"  samples/s at {b:3d}: {cv(raw[b]):.3f}  {cv(probed[b]):.3f}")
    for hi, lo in [(512, 64), (256, 128), (128, 64)]:
        rr = [x / y for x, y in zip(raw[hi], raw[lo])]
        pr = [x / y for x, y in zip(probed[hi], probed[lo])]
        print(f"  ratio {hi}/{lo}:      {cv(rr):.3f}  {cv(pr):.3f}  (raw: {', '.join(f'{x:.2f}' for x in rr)})")


if __name__ == "__main__":
    main()
