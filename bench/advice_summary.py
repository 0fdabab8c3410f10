#!/usr/bin/env python3
"""Summarises bench/advice.sh's results: for each workload, tune's picks (one per tune seed) against
the grid's time to the target, on two clocks, as markdown.

  python3 bench/advice_summary.py bench-results/advice
  python3 bench/advice_summary.py DIR --target accuracy=0.88   # grids of full curves (validate with an
                                                              # unreachable target), read at 88 %

Reads NAME.tune.SEED.json (plain `batchwise tune`) and NAME.grid.SEED.json (+ NAME.pick.SEED.json)
(`batchwise validate`). A run's time to the target is read from its curve: the first evaluation at
or past the target, on validate's clock (training seconds in validate's loop) and on the sweep's
clock (the samples it took at the samples/s tune's interleaved sweep measured for that batch, every
batch on one time axis). A batch that missed the target in a grid seed (or was stopped at 1.6x the
fastest) has no mean; the ratio is the pick's mean time over the grid's best mean time.
"""
import argparse
import glob
import json
import os
import statistics


def load(path):
    with open(path) as f:
        return json.load(f)


def reached_at(run, target):
    """(samples, validate seconds) at the first evaluation that reached the target, or None."""
    kind, value = target
    for p in run.get("curve", []):
        if kind == "accuracy" and p.get("accuracy") is not None and p["accuracy"] >= value:
            return p["samples"], p["train_s"]
        if kind == "loss" and p["loss"] <= value:
            return p["samples"], p["train_s"]
    return None


def target_of(validation):
    text = validation["target"]  # "test accuracy >= 0.88" or "test loss <= 1"
    value = float(text.split()[-1])
    return ("accuracy", value) if "accuracy" in text else ("loss", value)


def grid_times(out, name, rates, override=None):
    """Per grid seed: batch -> (validate seconds, sweep seconds) to the target (the grid's own, or the
    override read off its curves)."""
    seeds = []
    for grid in sorted(glob.glob(os.path.join(out, f"{name}.grid.*.json"))):
        runs = load(grid)["validation"]["runs"]
        pick = grid.replace(".grid.", ".pick.")
        if os.path.exists(pick):
            runs = runs + load(pick)["validation"]["runs"]
        validation = load(grid)["validation"]
        target = override or target_of(validation)
        times = {}
        for run in runs:
            hit = reached_at(run, target)
            if hit and run["batch"] in rates:
                times[run["batch"]] = (hit[1], hit[0] / rates[run["batch"]])
        seeds.append(times)
    if override and seeds:
        return seeds, f"test {override[0]} {'>=' if override[0] == 'accuracy' else '<='} {override[1]:g}"
    return seeds, validation["target"] if seeds else ""


def mean_over_seeds(seeds, clock):
    batches = set.intersection(*(set(s) for s in seeds)) if seeds else set()
    return {b: statistics.mean(s[b][clock] for s in seeds) for b in batches}


def grid_against_itself(seeds, clock):
    """The benchmark's own resolution: each grid seed's best batch, timed in every other grid seed, over
    that seed's best (None where that seed stopped it or it missed the target there). A pick cannot be
    scored more finely than the grid reproduces its own best."""
    ratios = []
    for i, own in enumerate(seeds):
        if not own:
            continue
        best = min(own, key=lambda b: own[b][clock])
        for j, other in enumerate(seeds):
            if j != i and other:
                fastest = min(t[clock] for t in other.values())
                ratios.append(other[best][clock] / fastest if best in other else None)
    return ratios


def summarise(out, name, override=None):
    tunes = sorted(glob.glob(os.path.join(out, f"{name}.tune.*.json")), key=lambda p: int(p.split(".")[-2]))
    if not tunes:
        return None
    reports = [load(t) for t in tunes]
    # The sweep's clock: seed 0's sweep (every batch measured side by side in one interleaved sweep).
    rates = {p["batch"]: p["samples_per_s"] for p in reports[0]["sweep"]["points"] if p["outcome"] == "ok"}
    seeds, target = grid_times(out, name, rates, override)
    if not seeds:
        return None
    validate_mean, sweep_mean = mean_over_seeds(seeds, 0), mean_over_seeds(seeds, 1)
    if not validate_mean:
        return {"name": name, "target": target, "note": "no batch reached the target in every grid seed"}
    best_v = min(validate_mean, key=validate_mean.get)
    best_s = min(sweep_mean, key=sweep_mean.get)
    picks = [r["recommendation"]["batch"] for r in reports]
    ranges = [(r.get("race") or {}).get("within_5_percent") or [r["recommendation"]["batch"]] for r in reports]

    def ratio(means, best, pick):
        return means[pick] / means[best] if pick in means else None

    walls = []
    for t in tunes:
        wall = t.replace(".json", ".wall")
        walls.append(float(open(wall).read()) if os.path.exists(wall) else float("nan"))
    grid_wall = sum(float(open(w).read()) for w in glob.glob(os.path.join(out, f"{name}.grid.*.wall")))
    return {
        "name": name, "target": target, "picks": picks, "ranges": ranges,
        "lr": (reports[0].get("lr") or {}).get("lr"),
        "ratios_v": [ratio(validate_mean, best_v, p) for p in picks],
        "ratios_s": [ratio(sweep_mean, best_s, p) for p in picks],
        "best_v": (best_v, validate_mean[best_v]), "best_s": (best_s, sweep_mean[best_s]),
        "stable": all(p in r for p in picks for r in ranges),
        "self_v": grid_against_itself(seeds, 0),
        "tune_s": walls, "race_s": [(r.get("race") or {}).get("wall_s", 0) for r in reports],
        "grid_s": grid_wall, "grid_seeds": len(seeds), "validate_mean": validate_mean, "sweep_mean": sweep_mean,
        "commit": reports[0]["context"]["build_commit"],
    }


def fmt_ratio(r):
    return "not reached" if r is None else f"{r:.2f}"


def main(out, override=None):
    names = sorted({os.path.basename(p).split(".tune.")[0] for p in glob.glob(os.path.join(out, "*.tune.*.json"))})
    rows = [s for s in (summarise(out, n, override) for n in names) if s]
    print("| workload | target | picks, tune seeds 0.. (flat range of seed 0) | lr (seed 0) | grid's best: validate's clock / sweep's clock | pick / best, validate's clock | pick / best, sweep's clock | a grid seed's best in the other seeds, validate's clock | every pick in every range | tune s (race s) | grid s (seeds) | build |")
    print("|---|---|---|---:|---|---|---|---|---|---|---|---|")
    for s in rows:
        if "note" in s:
            print(f"| {s['name']} | {s['target']} | | | {s['note']} | | | | | | | |")
            continue
        lr = f"{s['lr']:.4g}" if s["lr"] else "-"
        tune = ", ".join(f"{w:.0f} ({r:.0f})" for w, r in zip(s["tune_s"], s["race_s"]))
        own = ", ".join("stopped" if r is None else f"{r:.2f}" for r in s["self_v"]) or "one seed"
        print(f"| {s['name']} | {s['target']} | {', '.join(map(str, s['picks']))} ({', '.join(map(str, s['ranges'][0]))}) "
              f"| {lr} | {s['best_v'][0]} ({s['best_v'][1]:.1f} s) / {s['best_s'][0]} ({s['best_s'][1]:.1f} s) "
              f"| {', '.join(fmt_ratio(r) for r in s['ratios_v'])} | {', '.join(fmt_ratio(r) for r in s['ratios_s'])} "
              f"| {own} | {'yes' if s['stable'] else 'no'} | {tune} | {s['grid_s']:.0f} ({s['grid_seeds']}) | {s['commit']} |")
    print()
    print("Seconds of training to the target per grid batch (mean over grid seeds; validate's clock / the sweep's):")
    print()
    for s in rows:
        if "note" in s:
            continue
        cells = [f"{b}: {s['validate_mean'][b]:.1f} / {s['sweep_mean'][b]:.1f}" for b in sorted(s["validate_mean"])]
        print(f"- {s['name']}: " + "; ".join(cells))


def target_arg(text):
    kind, _, value = text.partition("=")
    if kind not in ("accuracy", "loss"):
        raise argparse.ArgumentTypeError(f"--target {text}: give accuracy=VALUE or loss=VALUE")
    return kind, float(value)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", default="bench-results/advice", help="bench/advice.sh's result folder")
    parser.add_argument("--target", type=target_arg, help="read the grids' curves at this target: accuracy=0.88")
    args = parser.parse_args()
    main(args.out, args.target)
