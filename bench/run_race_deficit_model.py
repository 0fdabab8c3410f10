"""A model tried for the run race's gaps at the run's end (2026-11-27, dropped): the samples a
larger batch falls behind by, priced at the reference's last gain per doubling.

For each candidate of a tune report's `run_race`: the samples its longer compressed run (4f) lost
against the reference (where the reference's learning curve, a power law with a floor through its
three runs, reached the candidate's held-out error), plus those McCandlish et al.'s (2018) model
says it loses over the rest of the run, a sample at batch B counting (1 + b / B_noise) / (1 + B /
B_noise) of one at the reference b, with B_noise carried along the run as the report's note says
(a power of the samples through the last two readings, at most linear). The gap at the end: the
reference's last gain per doubling times log2(run / (run - lost)). A candidate whose error did not
fall from its 2f run to its 4f run (a stalled or diverged run) is left out. Beside it: the race's own
prediction, and where a grid kept in bench/grids has the batch, its measured gap behind the grid's
best mean final accuracy. benchmarks.md ("The samples a batch falls behind by") says why it was
dropped: the carried noise scale differs 30x between two tunes of the same seed.

    python3 bench/run_race_deficit_model.py bench-results/run-advice/mlp-sgd.tune.0.json [--grid bench/grids/mlp-sgd.csv]
"""
import argparse
import csv
import json
import math
import re
import statistics

from run_race_deficit import needed  # the reference's learning curve, read backwards


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--grid", help="a kept grid (bench/grids/CELL.csv) for the reports' cell")
    args = ap.parse_args()
    measured = {}
    if args.grid:
        by_batch = {}
        for row in csv.DictReader(open(args.grid)):
            by_batch.setdefault(int(row["batch"]), []).append(float(row["final_accuracy"]))
        means = {b: statistics.mean(v) for b, v in by_batch.items()}
        measured = {b: max(means.values()) - m for b, m in means.items()}
    for path in args.reports:
        race = json.load(open(path))["run_race"]
        if race:  # a longer round's own entries: the first round's verdicts it kept are at other lengths
            race["entries"] = [e for e in race["entries"] if not e.get("earlier_round")]
        if race["measure"] != "accuracy":
            print(f"{path}: judged on the loss; this model reads accuracy")
            continue
        ref = race["reference_batch"]
        samples = [e * 1.0 for e in race["lengths_epochs"]]  # in epochs: only ratios matter
        errors = [1 - r["accuracy"] for r in race["runs"]]
        gain = errors[1] - errors[2]
        run = race["epochs"]
        note = " ".join(race.get("notes", []))
        end = re.search(r"carried on, (\d+) at the run's end", note)
        # The last noise scale measured (a longer round measures none after the run it adds).
        at, last = next((samples[i], r["b_simple"]) for i, r in reversed(list(enumerate(race["runs"]))) if r.get("b_simple"))
        grow = math.log(float(end.group(1)) / last) / math.log(run / at) if end else 0.0
        print(f"{path}: reference {ref}, {run:g} epochs, window {samples[2]:.3g} epochs, last gain "
              f"{100 * gain:.2f} points per doubling, noise scale {last:.0f} after {at:.3g} epochs, "
              f"{end.group(1) if end else '?'} at the run's end; tolerance {100 * race['tolerance']:.2f} points")
        print("  batch  window share  lost (epochs)  model gap  race's gap  measured gap")
        for e in race["entries"][1:]:
            if not e.get("run") or not e.get("shorter_run"):
                continue
            err, shorter = 1 - e["run"]["accuracy"], 1 - e["shorter_run"]["accuracy"]
            m = f"{100 * measured[e['batch']]:.2f}" if e["batch"] in measured else "-"
            if not err < shorter:
                print(f"  {e['batch']:5d}  (its run stalled or diverged)            {100 * e['predicted_gap']:9.2f}  {m:>12}")
                continue
            need = needed(samples, errors, err)  # None: the curve does not fall, nothing counted
            share = min(1.0, need / samples[2]) if need is not None else 0.0
            lost, n = samples[2] * (1 - share), 400
            for i in range(n):
                a = samples[2] * (run / samples[2]) ** (i / n)
                b = samples[2] * (run / samples[2]) ** ((i + 1) / n)
                noise = last * (math.sqrt(a * b) / samples[2]) ** grow
                lost += (1 - (1 + ref / noise) / (1 + e["batch"] / noise)) * (b - a)
            gap = max(0.0, gain) * math.log2(run / max(run - lost, 1e-9))
            print(f"  {e['batch']:5d}  {share:12.2f}  {lost:13.2f}  {100 * gap:9.2f}  {100 * e['predicted_gap']:10.2f}  {m:>12}")


if __name__ == "__main__":
    main()
