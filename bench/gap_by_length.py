"""How a batch's gap behind a smaller batch changes with the length of the run: full runs of each
length (`batchwise validate --epochs E --lr-schedule cosine`, every batch at the rate tune would
advise for it, final accuracy on the whole test split), per training seed, and the gap behind the
first batch in accuracy points. With --grid, the cell's kept grid (bench/grids/CELL.csv) adds the
same seeds' runs at its own length as the last row. The run race reads the gaps of runs a few
hundredths of the run long and carries them to its end (docs/advice.md, step 4); this measures
what happens in between.

    python3 bench/gap_by_length.py --flags "--model mlp --optimizer sgd" --batches 128,256,512,1024 \\
        --lengths 0.5,1,2,4,8,16 --seeds 0,1 --grid bench/grids/mlp-sgd.csv --out DIR

Reports already in DIR (LENGTH.SEED.json) are read, not trained again. Prints a markdown table."""
import argparse
import json
import os
import shlex
import subprocess
import sys

from advice_grid import read_kept_grid


def runs_of(report):
    """batch -> final accuracy, from one validate report."""
    return {r["batch"]: r.get("final_accuracy") for r in report["validation"]["runs"]}


def numbers(kind, text):
    """A comma-separated list of positive numbers of one kind (int or float), or a usage error."""
    try:
        values = [kind(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive numbers separated by commas, e.g. 0.5,1,2")
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flags", required=True, help='the workload flags, e.g. "--model mlp --optimizer sgd"')
    ap.add_argument("--batches", required=True, type=lambda t: numbers(int, t),
                    help="comma-separated; gaps are behind the first")
    ap.add_argument("--lengths", required=True, type=lambda t: numbers(float, t),
                    help="comma-separated run lengths in epochs")
    ap.add_argument("--seeds", default=[0], type=lambda t: [int(x) for x in t.split(",")],
                    help="comma-separated training seeds (default 0)")
    ap.add_argument("--grid", help="a kept grid (bench/grids/CELL.csv) whose runs of the same seeds give the last rows")
    ap.add_argument("--out", required=True, help="where the validate reports go (and are read from)")
    ap.add_argument("--batchwise", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                        "batchwise"))
    args = ap.parse_args()
    batches, lengths, seeds = args.batches, args.lengths, args.seeds
    os.makedirs(args.out, exist_ok=True)
    rows = []  # (label, seed, batch -> final accuracy)
    for length in lengths:
        for seed in seeds:
            path = os.path.join(args.out, f"{length:g}.{seed}.json")
            if not os.path.exists(path):
                cmd = [args.batchwise, "validate", *shlex.split(args.flags), "--batch-sizes",
                       ",".join(map(str, batches)), "--epochs", f"{length:g}", "--lr-schedule", "cosine", "--seed",
                       str(seed), "-q", "--no-history", "--json", path]
                if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
                    sys.exit(f"validate failed: {' '.join(cmd)}")
            acc = runs_of(json.load(open(path)))
            if sorted(acc) != sorted(batches):
                sys.exit(f"{path} holds batches {sorted(acc)}, not {batches}: another run's report; give another --out")
            rows.append((f"{length:g}", seed, acc))
    if args.grid:
        grid = read_kept_grid(args.grid)
        if not grid:
            sys.exit(f"{args.grid}: no runs in the grid")
        for seed in seeds:
            rows.append((f"{grid[0]['epochs']:g} (grid)", seed,
                         {r["batch"]: r["final_accuracy"] for r in grid if int(r["seed"]) == seed}))
    ref = batches[0]
    print(f"| epochs | seed | {' | '.join(f'{b}' for b in batches)} |")
    print(f"|---:|---:|{'---:|' * len(batches)}")
    for label, seed, acc in rows:
        cells = []
        for b in batches:
            if acc.get(b) is None or acc.get(ref) is None:
                cells.append("-")
            else:
                cells.append(f"{acc[b]:.4f}" if b == ref else f"{acc[b]:.4f} ({100 * (acc[ref] - acc[b]):.2f})")
        print(f"| {label} | {seed} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
