"""How this machine's speed moves with nothing else running: a fixed matmul loop timed in short
windows, the windows' spread, how alike windows a lag apart are (autocorrelation of the log rate),
and the 1 s means. With --stat, each second's steal time from /proc/stat and the loop's own
run-queue wait beside its rate; with --sustained, how the rate moves under minutes of load (start it
after a minute idle). The latest figures are in docs/benchmarks.md ("Built: the retry at
the sweep's end").

    /opt/batchwise-venv/bin/python bench/speed_drift.py              # 40 s in 50 ms windows
    /opt/batchwise-venv/bin/python bench/speed_drift.py --stat 60    # 60 one-second lines
    /opt/batchwise-venv/bin/python bench/speed_drift.py --sustained 300   # 5 s means under load

Run it alone: any other process on the cores is what it would measure.
"""
import argparse
import glob
import math
import statistics
import time

import torch


def loop(seconds, window_s):
    a, w, w2 = torch.randn(256, 512), torch.randn(512, 512), torch.randn(512, 512)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        n, start = 0, time.perf_counter()
        while (took := time.perf_counter() - start) < window_s:
            (a @ w).relu() @ w2
            n += 1
        yield n / took


def cpu_times():
    """/proc/stat's first line: user nice system idle iowait irq softirq steal ..."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def run_queue():
    """This process's threads: time run and time waited for a core (ns)."""
    ran = waited = 0
    for path in glob.glob("/proc/self/task/*/schedstat"):
        with open(path) as f:
            r, w, _ = f.read().split()
        ran, waited = ran + int(r), waited + int(w)
    return ran, waited


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=40)
    p.add_argument("--window", type=float, default=0.05, help="seconds a window")
    p.add_argument("--stat", type=int, metavar="N", help="instead: N one-second lines with steal and wait")
    p.add_argument("--sustained", type=float, metavar="S", help="instead: S seconds of load, its 5 s means")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.sustained:
        means = list(loop(args.sustained, 5.0))
        print(f"5 s means over {args.sustained:.0f} s of load:", " ".join(f"{m:.0f}" for m in means))
        return
    if args.stat:
        before, queued = cpu_times(), run_queue()
        for second, rate in enumerate(loop(args.stat, 1.0)):
            after, now = cpu_times(), run_queue()
            d = [x - y for x, y in zip(after, before)]
            ran, waited = now[0] - queued[0], now[1] - queued[1]
            print(f"{second:3d}  {rate:6.0f} it/s  steal {100 * d[7] / sum(d):4.1f} %  "
                  f"waited {100 * waited / max(1, ran + waited):4.1f} %", flush=True)
            before, queued = after, now
        return
    rates = list(loop(args.seconds, args.window))
    logs = [math.log(r) for r in rates]
    mean, var = statistics.mean(logs), statistics.pvariance(logs)
    print(f"{len(rates)} windows of {1e3 * args.window:.0f} ms: {min(rates):.0f} to {max(rates):.0f} it/s, "
          f"coefficient of variation {statistics.pstdev(rates) / statistics.mean(rates):.3f}")
    per_s = max(1, round(1 / args.window))  # windows in about a second
    for lag in sorted({1, 2, 4, per_s // 2, per_s, 2 * per_s, 5 * per_s} - {0}):
        if lag < len(logs):
            ac = sum((logs[i] - mean) * (logs[i + lag] - mean) for i in range(len(logs) - lag))
            print(f"autocorrelation at {lag * args.window:5.2f} s: {ac / ((len(logs) - lag) * var):.2f}")
    blocks = [statistics.mean(rates[i:i + per_s]) for i in range(0, len(rates) - per_s + 1, per_s)]
    print(f"{per_s * args.window:g} s means:", " ".join(f"{b:.0f}" for b in blocks))


if __name__ == "__main__":
    main()
