"""How far the training seed moves the run race's gaps: over the tunes of one cell with different
seeds (DIR/CELL.tune.SEED.json, as bench/run_advice.sh writes them), the same batch's gap behind the
same reference at the same compressed length (accuracy points), and the spread of one run's held-out
accuracy for comparison. The seed moves the initial weights and the data order; within one tune
every candidate starts from the same weights, so the gap between two of them moves less than two
independent runs would. Only (cell, reference, batch, length) groups seen in three tunes or more are
counted.

    python3 bench/run_race_gap_spread.py DIR [DIR ...]
"""
import argparse
import collections
import glob
import json
import os
import statistics


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", help="folders of tune reports (CELL.tune.SEED.json)")
    args = ap.parse_args()
    gaps = collections.defaultdict(list)  # (cell, reference, batch, epochs) -> [(seed, gap)]
    single = collections.defaultdict(list)  # (cell, batch, epochs) -> [accuracy]
    for folder in args.dirs:
        for path in sorted(glob.glob(os.path.join(folder, "*.tune.*.json"))):
            cell, seed = os.path.basename(path)[: -len(".json")].split(".tune.")
            race = json.load(open(path)).get("run_race")
            if not race or race.get("measure") != "accuracy":
                continue
            ref = race["reference_batch"]
            ref_acc = {round(r["epochs"], 4): r["accuracy"] for r in race["runs"] if r.get("accuracy") is not None}
            for epochs, acc in ref_acc.items():
                single[(cell, ref, epochs)].append(100 * acc)
            for e in race["entries"][1:]:
                for run in (e.get("shorter_run"), e.get("run")):
                    if not run or run.get("accuracy") is None or round(run["epochs"], 4) not in ref_acc:
                        continue
                    epochs = round(run["epochs"], 4)
                    gaps[(cell, ref, e["batch"], epochs)].append((seed, 100 * (ref_acc[epochs] - run["accuracy"])))
                    single[(cell, e["batch"], epochs)].append(100 * run["accuracy"])
    print("| cell | reference | batch | epochs | gap behind it (points), by tune seed | mean | sd |")
    print("|---|---:|---:|---:|---|---:|---:|")
    spreads = {"small": [], "large": []}  # mean gap under 2 points, and the rest
    for (cell, ref, batch, epochs), seen in sorted(gaps.items()):
        if len(seen) < 3:
            continue
        values = [g for _, g in seen]
        mean, sd = statistics.mean(values), statistics.stdev(values)
        spreads["small" if abs(mean) < 2 else "large"].append(sd)
        text = ", ".join(f"{s}: {g:.2f}" for s, g in seen)
        print(f"| {cell} | {ref} | {batch} | {epochs:.3f} | {text} | {mean:.2f} | {sd:.2f} |")
    print()
    for name, what in (("small", "gaps under 2 points"), ("large", "gaps of 2 points or more")):
        if len(spreads[name]) >= 2:
            q = statistics.quantiles(spreads[name], n=4)
            print(f"{what}: sd median {statistics.median(spreads[name]):.2f} (quartiles {q[0]:.2f}, {q[2]:.2f}; "
                  f"{len(spreads[name])} groups)")
    ones = [statistics.stdev(v) for v in single.values() if len(v) >= 3]
    if ones:
        print(f"one run's accuracy: sd median {statistics.median(ones):.2f} ({len(ones)} groups)")


if __name__ == "__main__":
    main()
