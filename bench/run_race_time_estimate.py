"""How well the run race's full-run times match the grid's, on the kept cells (bench/grids): per
batch, the grid's mean train_s over two estimates of it, the race's `full_run_s` (the run's samples
at the sweep's samples/s) and the longest compressed run's own training seconds scaled to the run's
samples; then how much each ratio moves between adjacent batches of a cell (a 1.10x verdict between
adjacent batches asks for an estimate steadier than that).

    python3 bench/run_race_time_estimate.py [--grids bench/grids]
"""
import argparse
import csv
import glob
import json
import os
import statistics

parser = argparse.ArgumentParser()
parser.add_argument("--grids", default=os.path.join(os.path.dirname(__file__), "grids"))
args = parser.parse_args()

changes = {"sweep": [], "compressed": []}
print("| cell | batch: grid / sweep's estimate, grid / compressed run's | adjacent change, sweep's | compressed run's |")
print("|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(args.grids, "*.race.json"))):
    cell = os.path.basename(path)[: -len(".race.json")]
    race = json.load(open(path))["run_race"]
    if race:  # a longer round's own entries: the first round's verdicts it kept are at other lengths
        race["entries"] = [e for e in race["entries"] if not e.get("earlier_round")]
    if not race.get("runs") or race.get("best_batch") is None:
        print(f"| {cell} | the run race picked nothing | | |")
        continue
    epochs, lengths = race["epochs"], race["lengths_epochs"]
    grid = {}
    for row in csv.DictReader(open(os.path.join(args.grids, cell + ".csv"))):
        if abs(float(row["epochs"]) - epochs) < 1e-9:
            grid.setdefault(int(row["batch"]), []).append(float(row["train_s"]))
    dataset = race["runs"][-1]["steps"] * race["entries"][0]["batch"] / lengths[-1]
    ratios = []
    for i, e in enumerate(race["entries"]):
        run = race["runs"][-1] if i == 0 else e.get("run")
        if e["batch"] not in grid or not run:
            continue
        measured = statistics.mean(grid[e["batch"]])
        compressed = run["train_s"] * epochs * dataset / (run["steps"] * e["batch"])
        ratios.append((e["batch"], measured / e["full_run_s"], measured / compressed))

    def adjacent(k):
        return [abs(ratios[j + 1][k] / ratios[j][k] - 1) for j in range(len(ratios) - 1)]

    changes["sweep"] += adjacent(1)
    changes["compressed"] += adjacent(2)
    print(f"| {cell} | " + ", ".join(f"{b}: {s:.2f}, {c:.2f}" for b, s, c in ratios) + " | "
          + ", ".join(f"{x:.0%}" for x in adjacent(1)) + " | " + ", ".join(f"{x:.0%}" for x in adjacent(2)) + " |")
for name, values in changes.items():
    print(f"{name}: median adjacent change {statistics.median(values):.1%}, largest {max(values):.0%} "
          f"({len(values)} pairs)")
