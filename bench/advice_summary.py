#!/usr/bin/env python3
"""Summarises bench/advice.sh's results as a markdown table (one row per workload)."""
import glob
import json
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def times(runs):
    """batch -> training seconds to the target, for the runs that reached it."""
    return {r["batch"]: r["train_s"] for r in runs if r["reached"]}


def main(out):
    names = sorted({os.path.basename(p).split(".tune.")[0] for p in glob.glob(os.path.join(out, "*.tune.*.json"))})
    print("| workload | target | tune's pick (flat range) | lr | grid's best | pick / best | runner-up | tune s (race s) | grid s | tune's build |")
    print("|---|---|---|---|---|---:|---|---:|---:|---|")
    for name in names:
        tunes = sorted(glob.glob(os.path.join(out, f"{name}.tune.*.json")))
        t0 = load(tunes[0])
        pick = t0["recommendation"]["batch"]
        picks = [load(p)["recommendation"]["batch"] for p in tunes]
        race = t0.get("race") or {}
        flat = race.get("within_5_percent") or [pick]
        tune_wall = float(open(tunes[0].replace(".json", ".wall")).read())
        per_seed = []
        grid_wall = 0.0
        target = ""
        for grid in sorted(glob.glob(os.path.join(out, f"{name}.grid.*.json"))):
            seed = grid.split(".grid.")[1].split(".json")[0]
            pick_run = load(grid.replace(".grid.", ".pick."))["validation"]
            v = load(grid)["validation"]
            target = v["target"]
            t = times(v["runs"])
            t.update(times(pick_run["runs"]))
            per_seed.append(t)
            grid_wall += float(open(grid.replace(".json", ".wall")).read())
        if not per_seed:
            continue
        batches = sorted(set.intersection(*(set(t) for t in per_seed)))
        mean = {b: statistics.mean(t[b] for t in per_seed) for b in batches}
        if not mean:
            print(f"| {name} | {target} | {pick} | | no batch reached the target in every seed | | | | | |")
            continue
        best = min(mean, key=mean.get)
        ranked = sorted(mean, key=mean.get)
        runner = ranked[1] if len(ranked) > 1 else None
        ratio = f"{mean[pick] / mean[best]:.2f}" if pick in mean else "not reached"
        lr = t0.get("lr", {}).get("lr")
        picks_text = "" if len(set(picks)) == 1 and len(picks) == 1 else f"; seeds: {', '.join(map(str, picks))}"
        print(f"| {name} | {target} | {pick} ({', '.join(map(str, flat))}){picks_text} | {lr:.4g} | {best} "
              f"({mean[best]:.1f} s) | {ratio} | {runner} ({mean[runner] / mean[best]:.2f}x) | {tune_wall:.0f} "
              f"({race.get('wall_s', 0):.0f}) | {grid_wall:.0f} | {t0['context']['build_commit']} |")


if __name__ == "__main__":
    main(sys.argv[1])
