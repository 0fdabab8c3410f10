"""batchwise in process (batchwise.fit/sweep/tune on a Python model) beside the other ways, one run.

1. The step: the in-process sweep's samples/s against the plain Python loop of bench/python_loop.py
   (--float-data: the same float32 images batchwise holds), same model, data, optimizer (SGD,
   momentum 0.9, lr 0.01), loss and threads, each in a fresh process, alternated over --rounds;
   the ratio of medians per batch.
2. The finders, on the same model and data under --budget-mib: batchwise.fit in process, `batchwise
   fit --cmd` running this file as the user's script (one process per trial, the batchwise helper's
   step lines), and Lightning's Tuner.scale_batch_size (bench/lightning_vs_fit.py's rows; an
   address-space limit, not tensor bytes: its batch is not comparable, its trials and time are);
   then batchwise.tune in process against `batchwise tune --cmd`. Wall time of the call (in
   process), of the command (--cmd), with the trials and the batch each found.

    BATCHWISE_ENGINE=build/python/batchwise/_engine.cpython-311-x86_64-linux-gnu.so \\
        /opt/batchwise-venv/bin/python bench/inprocess.py --batchwise build/batchwise --model mlp
    ... bench/inprocess.py --part device --device cuda --budget-mib 8192   # resnet18 fitted on a GPU, in process
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)


def load(model_name, threads):
    import torch
    import python_loop
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    images = python_loop.read_idx(f"{python_loop.DATA}/train-images-idx3-ubyte.gz").unsqueeze(1)
    labels = python_loop.read_idx(f"{python_loop.DATA}/train-labels-idx1-ubyte.gz").long()
    images = images.float().div_(255.0).sub_(0.2860).div_(0.3530)
    model = python_loop.make_model(model_name)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), (images, labels)


def child(a):
    """One measurement in this (fresh) process; prints a JSON line."""
    import batchwise
    model, opt, data = load(a.model, a.threads)
    start = time.perf_counter()
    if a.child == "step":
        r = batchwise.sweep(model, opt, data, batch_sizes=[a.batch], warmup=5, steps=a.steps, repetitions=1, min_time=0,
                            progress=False)
        print(json.dumps({"samples_per_s": r.sweep.points[0].samples_per_s}))
        return
    if a.child == "fit":
        r = batchwise.fit(model, opt, data, memory_budget=f"{a.budget_mib}MiB", progress=False)
    else:
        r = batchwise.tune(model, opt, data, memory_budget=f"{a.budget_mib}MiB", progress=False)
    wall = time.perf_counter() - start
    trials = len(r.fit.trials) + (len(r.sweep.points) if r.sweep else 0)
    batch = r.fit.batch if a.child == "fit" else r.recommendation.batch
    print(json.dumps({"wall_s": wall, "trials": trials, "batch": batch}))


def held(a):
    """What the script's process holds after one step at batch 2 (peak RSS, bytes): --cmd's budget on
    CPU is its process tree's memory, so its fit gets the in-process fit's room above this."""
    import resource
    import torch
    model, opt, (images, labels) = load(a.model, a.threads)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(images[:2]), labels[:2]).backward()
    opt.step()
    print(json.dumps({"held_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


def as_cmd(a):
    """The user's script under `batchwise ... --cmd`: the plain loop with the batchwise helper."""
    import batchwise
    import torch
    model, opt, (images, labels) = load(a.model, a.threads)
    batch = batchwise.batch_size(default=64)
    gen = torch.Generator().manual_seed(0)
    while True:
        order = torch.randperm(len(images), generator=gen)
        for start in range(0, len(images) - batch + 1, batch):
            idx = order[start:start + batch]
            x, y = images.index_select(0, idx), labels.index_select(0, idx)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if batchwise.step(samples=batch, loss=loss.item()):
                batchwise.peak()
                return


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if out.returncode not in (0,):
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout


def me(a, *extra):
    return [sys.executable, os.path.abspath(__file__), "--model", a.model, "--threads", str(a.threads),
            "--budget-mib", str(a.budget_mib), *extra]


def steps(a):
    print(f"### The step: in process against the plain Python loop ({a.model}, {a.rounds} rounds of {a.steps} "
          "steps, medians)\n")
    print("| batch | plain loop samples/s | batchwise in process samples/s | ratio |")
    print("|---:|---:|---:|---:|")
    for batch in a.batches:
        loop, ours = [], []
        for _ in range(a.rounds):
            loop.append(json.loads(run([sys.executable, os.path.join(HERE, "python_loop.py"), "--model", a.model,
                                        "--batch", str(batch), "--threads", str(a.threads), "--float-data",
                                        "--steps", str(a.steps)]))
                        ["samples_per_s"])
            ours.append(json.loads(run(me(a, "--child", "step", "--batch", str(batch), "--steps", str(a.steps))))
                        ["samples_per_s"])
        lm, om = statistics.median(loop), statistics.median(ours)
        print(f"| {batch} | {lm:,.0f} | {om:,.0f} | {om / lm:.2f} |")
    print()


def alternate(a):
    """In one process: the plain loop (the same as python_loop.py's, on the same objects) and the
    in-process sweep with and without the utilisation monitor, alternated --rounds times a batch."""
    import torch
    import batchwise
    model, opt, (images, labels) = load(a.model, a.threads)

    def plain(batch):
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
        times = []
        for i in range(5 + a.steps):
            start = time.perf_counter()
            idx = order[i * batch % (len(images) - batch):][:batch]
            x, y = images.index_select(0, idx), labels.index_select(0, idx)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            loss.item()
            if i >= 5:
                times.append(time.perf_counter() - start)
        return batch / statistics.median(times)

    def ours(batch, monitor):
        r = batchwise.sweep(model, opt, (images, labels), batch_sizes=[batch], warmup=5, steps=a.steps,
                            repetitions=1, min_time=0, no_monitor=not monitor, progress=False)
        return r.sweep.points[0].samples_per_s

    # Each round's ratio is paired (the plain loop and ours back to back), so a drift of the machine's
    # speed between rounds cancels; the median of the paired ratios, and their quartiles.
    print(f"### The step in one process, alternated ({a.model}, {a.rounds} rounds of {a.steps} steps, medians)\n")
    print("| batch | plain loop | in process | ratio of medians | paired ratio, median (quartiles) "
          "| in process, no monitor | paired ratio, median (quartiles) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")

    def paired(runs, k):
        ratios = sorted(run[k] / run[0] for run in runs)
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        return f"{statistics.median(ratios):.2f} ({q[0]:.2f}-{q[2]:.2f})"
    for batch in a.batches:
        runs = [(plain(batch), ours(batch, True), ours(batch, False)) for _ in range(a.rounds)]
        p, q, r = (statistics.median(col) for col in zip(*runs))
        print(f"| {batch} | {p:,.0f} | {q:,.0f} | {q / p:.2f} | {paired(runs, 1)} | {r:,.0f} | {paired(runs, 2)} |")
    print()


def device_check(a):
    """batchwise.fit in process on --device (scripts/gpu-check.sh's `inprocess` row): torchvision's
    resnet18 on 3x32x32 synthetic images under --budget-mib, then the fitted batch swept for a few
    steps; the batch, trials, wall time, the peak against target x budget, and whether the model and
    the optimizer came back bit-identical. Prints one JSON object (--json-out too)."""
    import copy
    import torch
    import torchvision
    import batchwise
    torch.manual_seed(0)
    device = torch.device(a.device)
    model = torchvision.models.resnet18(num_classes=10).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = (torch.randn(a.samples, 3, 32, 32), torch.randint(0, 10, (a.samples,)))
    before = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
    start = time.perf_counter()
    report = batchwise.fit(model, opt, data, memory_budget=f"{a.budget_mib}MiB", progress=False)
    wall = time.perf_counter() - start
    batch = report.fit.batch
    swept = batchwise.sweep(model, opt, data, batch_sizes=[batch], warmup=1, steps=3, repetitions=1,
                            memory_budget=f"{a.budget_mib}MiB", progress=False) if batch else None
    point = swept.sweep.points[0] if swept else None
    same = all(torch.equal(v, model.state_dict()[k]) for k, v in before[0].items()) and not opt.state
    result = {"device": str(device), "outcome": report.fit.outcome, "batch": batch, "trials": len(report.fit.trials),
              "fit_wall_s": wall, "budget_bytes": report.budget_bytes, "target": report.target,
              "sweep_outcome": point.outcome if point else None, "peak_bytes": point.peak_bytes if point else None,
              "samples_per_s": point.samples_per_s if point else None, "bit_identical": same}
    print(json.dumps(result))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(result, f)


def finders(a):
    print(f"### Finding the batch: in process, --cmd and Lightning ({a.model}, budget {a.budget_mib} MiB)\n")
    print("| how | wall s | trials | batch |")
    print("|---|---:|---:|---:|")
    # target x budget (0.9) leaves the same 0.9 x --budget-mib above what the process holds
    cmd_budget = int(json.loads(run(me(a, "--child", "held")))["held_bytes"] / 2**20 / 0.9) + a.budget_mib
    with tempfile.TemporaryDirectory() as work:
        for command in ("fit", "tune"):
            r = json.loads(run(me(a, "--child", command)).strip().splitlines()[-1])
            print(f"| batchwise.{command} in process | {r['wall_s']:.1f} | {r['trials']} | {r['batch']} |")
            out = os.path.join(work, f"{command}.json")
            start = time.perf_counter()
            run([a.batchwise, command, "--memory-budget", f"{cmd_budget}MiB", "--json", out, "--no-history",
                 "--cmd", "--", *me(a, "--as-cmd")])
            wall = time.perf_counter() - start
            rep = json.load(open(out))
            trials = len(rep["fit"]["trials"]) + len((rep.get("sweep") or {}).get("points", []))
            batch = rep["fit"].get("batch") if command == "fit" else rep["recommendation"]["batch"]
            print(f"| batchwise {command} --cmd (budget {cmd_budget} MiB of process memory) | {wall:.1f} | {trials} | "
                  f"{batch} |")
        if a.lightning:
            table = os.path.join(work, "lightning.json")
            run([sys.executable, os.path.join(HERE, "lightning_vs_fit.py"), "--batchwise", a.batchwise, "--model",
                 a.model, "--budget-mib", str(a.budget_mib), "--epoch-for", "none", "--json-out", table])
            for row in json.load(open(table))["rows"]:
                if row["key"].startswith("lightning"):
                    wall = f"{row['wall_s']:.1f} (in trials)" if "wall_s" in row else "crashed"
                    print(f"| {row['finder']} | {wall} | {row.get('trials', '-')} | {row.get('batch', '-')} |")
    print()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batchwise", default=os.path.join(ROOT, "build", "batchwise"))
    p.add_argument("--model", default="mlp")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--budget-mib", type=int, default=48)
    p.add_argument("--batches", type=lambda s: [int(b) for b in s.split(",")], default=[32, 128, 512])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=60, help="measured steps a run (after 5 warm-up steps)")
    p.add_argument("--no-lightning", dest="lightning", action="store_false")
    p.add_argument("--part", choices=["all", "steps", "alternate", "finders", "device"], default="all")
    p.add_argument("--device", default="cpu", help="--part device: where the model trains")
    p.add_argument("--samples", type=int, default=4096, help="--part device: synthetic images")
    p.add_argument("--json-out", default="")
    p.add_argument("--child", choices=["step", "fit", "tune", "held"], help=argparse.SUPPRESS)
    p.add_argument("--as-cmd", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child == "held":
        return held(a)
    if a.child:
        return child(a)
    if a.as_cmd:
        return as_cmd(a)
    if a.part in ("all", "steps"):
        steps(a)
    if a.part == "alternate":
        alternate(a)
    if a.part == "device":
        device_check(a)
    if a.part in ("all", "finders"):
        finders(a)


if __name__ == "__main__":
    main()
