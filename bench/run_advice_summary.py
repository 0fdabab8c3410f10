"""The run race's benchmark table from bench/run_advice.sh's reports: per cell, the grid's good set
(mean final accuracy, or loss, within max(0.005, 2 standard errors of the best mean) of it), the picks,
and whether each passes (in the good set, mean time within 1.10x of the good set's fastest)."""
import glob
import json
import math
import os
import statistics
import sys

out = sys.argv[1]
names = sorted({os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(out, "*.grid.*.json"))})
print("| cell | epochs | good set (mean final quality) | fastest good | pick (tune seed) | in good set | time / fastest good | pass |")
print("|---|---:|---|---:|---|---|---:|---|")
passed = total = 0
worst = 0.0
for name in names:
    runs = {}
    epochs = None
    for path in sorted(glob.glob(os.path.join(out, f"{name}.grid.*.json"))):
        v = json.load(open(path))["validation"]
        epochs = v.get("epochs")
        for r in v["runs"]:
            q = r.get("final_accuracy")
            loss = q is None
            if q is None:
                q = r.get("final_loss")
            if q is None:
                continue
            runs.setdefault(r["batch"], []).append((q, r["train_s"], loss))
    if not runs:
        continue
    loss_measure = next(iter(runs.values()))[0][2]
    stats = {}
    for b, xs in runs.items():
        qs = [x[0] for x in xs]
        se = statistics.stdev(qs) / math.sqrt(len(qs)) if len(qs) > 1 else 0.0
        stats[b] = (statistics.mean(qs), se, statistics.mean(x[1] for x in xs), len(qs))
    best = (min if loss_measure else max)(stats, key=lambda b: stats[b][0])
    good = []
    for b, (m, se, t, n) in sorted(stats.items()):
        # The best mean's own standard error: a batch whose seeds scatter widely (one diverges) must
        # not join the set by its own spread.
        tol = max(0.005 * (stats[best][0] if loss_measure else 1), 2 * stats[best][1])
        if (m - stats[best][0] if loss_measure else stats[best][0] - m) <= tol:
            good.append(b)
    fastest = min(good, key=lambda b: stats[b][2])
    for path in sorted(glob.glob(os.path.join(out, f"{name}.tune.*.json"))):
        seed = path.rsplit(".", 2)[1]
        pick = json.load(open(path))["recommendation"]["batch"]
        inside = pick in good
        ratio = stats[pick][2] / stats[fastest][2] if pick in stats else float("nan")
        ok = inside and ratio <= 1.10
        total += 1
        passed += ok
        if pick in stats:
            worst = max(worst, ratio)
        fmt_q = (lambda m: f"{m:.4f}")
        print(f"| {name} | {epochs:g} | {', '.join(f'{b} ({fmt_q(stats[b][0])})' for b in good)} | {fastest} "
              f"({stats[fastest][2]:.1f} s) | {pick} ({seed}) | {'yes' if inside else 'no'} | {ratio:.2f} | "
              f"{'pass' if ok else 'FAIL'} |")
print()
print(f"{passed} of {total} picks pass; the worst time ratio {worst:.2f}.")

# Batch-size schedules: what tune predicted against what the seeds' runs measured (issue #30: within
# 10 points of each other), and whether the schedule's final quality is in the grid's good set.
rows = []
for name in names:
    paths = sorted(glob.glob(os.path.join(out, f"{name}.schedule.*.json")))
    if not paths:
        continue
    tune_path = sorted(glob.glob(os.path.join(out, f"{name}.tune.*.json")))[0]
    race = json.load(open(tune_path))["run_race"]
    pick = json.load(open(tune_path))["recommendation"]["batch"]
    qs, ts, pts = [], [], []
    for path in paths:
        for r in json.load(open(path))["validation"]["runs"]:
            if r.get("schedule") and r.get("final_loss") is not None:
                q = r.get("final_accuracy")
                qs.append(q if q is not None else r["final_loss"])
                ts.append(r["train_s"])
            elif not r.get("schedule"):
                pts.append(r["train_s"])
    grid = {}
    loss_measure = False
    for path in glob.glob(os.path.join(out, f"{name}.grid.*.json")):
        for r in json.load(open(path))["validation"]["runs"]:
            q = r.get("final_accuracy")
            loss_measure = q is None
            grid.setdefault(r["batch"], []).append(q if q is not None else r.get("final_loss"))
    means = {b: statistics.mean(v) for b, v in grid.items() if None not in v}
    best = (min if loss_measure else max)(means, key=lambda b: means[b])
    se = statistics.stdev(grid[best]) / math.sqrt(len(grid[best])) if len(grid[best]) > 1 else 0.0
    tol = max(0.005 * (means[best] if loss_measure else 1), 2 * se)
    if not qs or not pts:
        rows.append(f"| {name} | {race['schedule']['text']} | {100 * race['schedule']['saving']:.0f} % | - | - | no run |")
        continue
    q = statistics.mean(qs)
    good = (q - means[best] if loss_measure else means[best] - q) <= tol
    measured = 1 - statistics.mean(ts) / statistics.mean(pts)
    close = abs(measured - race["schedule"]["saving"]) <= 0.10
    rows.append(f"| {name} | {race['schedule']['text']} (pick {pick}) | {100 * race['schedule']['saving']:.0f} % | "
                f"{100 * measured:.0f} % | {q:.4f} ({'good' if good else 'worse'}) | "
                f"{'yes' if close and good else 'no'} |")
if rows:
    print()
    print("| cell | schedule | predicted saving | measured saving | mean final quality | within 10 points, good |")
    print("|---|---|---:|---:|---|---|")
    print("\n".join(rows))

