"""batchwise's C++ training step against the plain Python loop, side by side in one run.

For each model and batch size, runs the Python loop (bench/python_loop.py) and `batchwise sweep`
with the same warm-up, steps and threads, alternating which goes first on each round (A B, B A)
so drift favours neither. Each round pairs two runs adjacent in time; the ratio reported is the
median of the per-round ratios (robust to the slow spells a shared 2-core VM has), with their range,
beside the median samples/s of each side. Prints a markdown table for docs/benchmarks.md.

    /opt/batchwise-venv/bin/python bench/cpp_vs_python.py --batchwise build/batchwise --rounds 3
    python3 bench/cpp_vs_python.py --device cuda --batches 256,2048,16384 --json-out cpp_vs_python.json

`--json-out FILE` also writes the rows as JSON (scripts/gpu-check.sh reads them).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(argv):
    """argv's stdout; its stderr in the error when it fails (a child's traceback is the diagnosis)."""
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {out.returncode}\n{out.stderr.strip()}")
    return out.stdout


def python_side(model, batch, args):
    out = run([sys.executable, os.path.join(HERE, "python_loop.py"), "--model", model, "--batch", str(batch),
               "--warmup", str(args.warmup), "--steps", str(args.steps), "--threads", str(args.threads), "--device",
               args.device, "--data-dir", args.data_dir])
    return json.loads(out)["samples_per_s"]


def cpp_side(model, batch, args):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        run([args.batchwise, "sweep", "--model", model, "--dataset", "fashion-mnist", "--data-dir", args.data_dir,
             "--optimizer", "sgd", "--batch-sizes", str(batch), "--warmup", str(args.warmup), "--steps",
             str(args.steps), "--repetitions", "1", "--threads", str(args.threads), "--device", args.device, "--quiet",
             "--no-history", "--json", f.name])
        return json.load(open(f.name))["sweep"]["points"][0]["samples_per_s"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batchwise", default="build/batchwise")
    p.add_argument("--models", default="mlp,lenet")
    p.add_argument("--batches", default="16,128,1024")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: both sides train there")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--json-out", default="", help="also write the rows as JSON to this file")
    args = p.parse_args()
    rows = []
    for model in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            py, cpp = [], []
            for r in range(args.rounds):
                sides = [(py, python_side), (cpp, cpp_side)]
                for bucket, fn in (sides if r % 2 == 0 else sides[::-1]):
                    bucket.append(fn(model, batch, args))
            ratios = [c / p for c, p in zip(cpp, py)]
            rows.append((model, batch, statistics.median(py), statistics.median(cpp), statistics.median(ratios),
                         min(ratios), max(ratios)))
            print(f"{model} {batch}: python {py}, batchwise {cpp}", file=sys.stderr)
    import torch
    where = args.device if args.device == "cpu" else f"{args.device} ({torch.cuda.get_device_name(torch.device(args.device))})"
    print(f"Measured {datetime.date.today()} on {platform.node()} ({os.cpu_count()} cores, "
          f"{args.threads} threads, {where}), torch {torch.__version__}, {args.rounds} alternating rounds of "
          f"{args.warmup} warm-up + {args.steps} measured steps each.\n")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"device": where, "torch_version": torch.__version__, "rounds": args.rounds,
                       "warmup": args.warmup, "steps": args.steps, "threads": args.threads,
                       "rows": [dict(model=m, batch=b, python_samples_per_s=py, cpp_samples_per_s=cpp, ratio=r,
                                     ratio_min=lo, ratio_max=hi) for m, b, py, cpp, r, lo, hi in rows]}, f, indent=1)
    print("| model | batch | Python loop samples/s | batchwise C++ samples/s | C++ / Python (median of rounds) | range over rounds |")
    print("|---|---:|---:|---:|---:|---:|")
    for model, batch, py, cpp, ratio, lo, hi in rows:
        print(f"| {model} | {batch} | {py:,.0f} | {cpp:,.0f} | **{ratio:.2f}** | {lo:.2f} to {hi:.2f} |")


if __name__ == "__main__":
    main()
