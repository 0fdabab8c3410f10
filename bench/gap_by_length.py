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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flags", required=True, help='the workload flags, e.g. "--model mlp --optimizer sgd"')
    ap.add_argument("--batches", required=True, help="comma-separated; gaps are behind the first")
    ap.add_argument("--lengths", required=True, help="comma-separated run lengths in epochs")
    ap.add_argument("--seeds", default="0", help="comma-separated training seeds")
    ap.add_argument("--grid", help="a kept grid (bench/grids/CELL.csv) whose runs give the last row")
    ap.add_argument("--out", required=True, help="where the validate reports go (and are read from)")
    ap.add_argument("--batchwise", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                        "batchwise"))
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    lengths = [float(e) for e in args.lengths.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    os.makedirs(args.out, exist_ok=True)
    table = {}  # (length, seed) -> batch -> final accuracy
    for seed in seeds:
        for length in lengths:
            path = os.path.join(args.out, f"{length:g}.{seed}.json")
            if not os.path.exists(path):
                cmd = [args.batchwise, "validate", *shlex.split(args.flags), "--batch-sizes", args.batches, "--epochs",
                       f"{length:g}", "--lr-schedule", "cosine", "--seed", str(seed), "-q", "--no-history", "--json",
                       path]
                if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
                    sys.exit(f"validate failed: {' '.join(cmd)}")
            table[(length, seed)] = runs_of(json.load(open(path)))
    if args.grid:
        rows = read_kept_grid(args.grid)
        grid_length = rows[0]["epochs"]
        for seed in seeds:
            table[(grid_length, seed)] = {r["batch"]: r["final_accuracy"] for r in rows if int(r["seed"]) == seed}
        lengths.append(grid_length)
    ref = batches[0]
    print(f"| epochs | seed | {' | '.join(f'{b}' for b in batches)} |")
    print(f"|---:|---:|{'---:|' * len(batches)}")
    for length in lengths:
        for seed in seeds:
            acc = table[(length, seed)]
            cells = []
            for b in batches:
                if acc.get(b) is None or acc.get(ref) is None:
                    cells.append("-")
                else:
                    gap = 100 * (acc[ref] - acc[b])
                    cells.append(f"{acc[b]:.4f}" if b == ref else f"{acc[b]:.4f} ({gap:.2f})")
            grid_mark = " (grid)" if args.grid and length == lengths[-1] else ""
            print(f"| {length:g}{grid_mark} | {seed} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
