"""The frameworks' own batch-size finders beside `batchwise fit`, same model and data, one run.

Lightning (`Tuner.scale_batch_size`, mode power and binsearch) and Accelerate
(`find_executable_batch_size`, from `--start` down by its own rule, in 1.15 by 10 % a trial, until a
trial of 3 steps runs) train the mlp
or lenet of bench/python_loop.py on Fashion-MNIST under a budget of BUDGET bytes, each in a child
process so that the budget binds only it:
- on CPU an address-space limit (RLIMIT_AS, like `ulimit -v`) of BUDGET above what the process
  holds after one warm-up step, so that their CPU out-of-memory detection fires;
- on CUDA `torch.cuda.set_per_process_memory_fraction(BUDGET / total)`, the caching allocator's
  own limit, which is how `batchwise fit --memory-budget` enforces its budget there too.
batchwise runs `fit` with `--memory-budget BUDGET` in power, binsearch and model modes. On CPU the
two budgets are not the same quantity (address space, which also holds allocator slack, against
batchwise's exact tensor bytes), so the batches found differ; on CUDA they are the same limit, but
batchwise's answer stays within `--target` (0.9) of it while the others' use all of it. Trials and
wall time are the comparison. Then each finder's answer trains a full epoch (`--epoch-samples`
limits it) under the same budget, in a plain loop of its own process: whether the answer survives
training, not only the finder's few steps. Prints a markdown table; `--json-out FILE` also writes it
as JSON (scripts/gpu-check.sh reads it).

    /opt/batchwise-venv/bin/python bench/lightning_vs_fit.py --batchwise build/batchwise --model mlp --budget-mib 48
    python3 bench/lightning_vs_fit.py --device cuda --model lenet --budget-mib 1024 --json-out finders.json
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS_PER_TRIAL = 3


def load(args):
    import torch
    sys.path.insert(0, HERE)
    from python_loop import read_idx

    torch.set_num_threads(args.threads)
    images = read_idx(f"{args.data_dir}/train-images-idx3-ubyte.gz").unsqueeze(1)
    labels = read_idx(f"{args.data_dir}/train-labels-idx1-ubyte.gz").long()
    return torch.utils.data.TensorDataset(images, labels)


def normalise(x):
    return x.float().div_(255.0).sub_(0.2860).div_(0.3530)


def train_steps(model, opt, loader, device, steps):
    """Trains up to `steps` batches of `loader` (None: all of it); returns the steps run."""
    import torch.nn.functional as F
    run = 0
    for x, y in loader:
        if steps is not None and run >= steps:
            break
        x, y = normalise(x.to(device)), y.to(device)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        run += 1
    return run


def apply_budget(args, device):
    """Binds this process to the budget: after the warm-up on CPU (what is mapped by then is not
    counted), on CUDA as the caching allocator's fraction of the device."""
    import torch
    budget = args.budget_mib << 20
    if device.type == "cuda":
        if device.index is None:  # the allocator's calls want an index: "cuda" is the current device
            device = torch.device("cuda", torch.cuda.current_device())
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        return
    vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + budget, vm + budget))


def new_model(args, device):
    import torch
    from python_loop import make_model
    model = make_model(args.model).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def warm_up(args, dataset, device):
    import torch
    model, opt = new_model(args, device)
    train_steps(model, opt, torch.utils.data.DataLoader(dataset, batch_size=2), device, 1)


def lightning_side(args):
    import lightning as L
    import torch
    import torch.nn.functional as F
    from lightning.pytorch.tuner import Tuner

    dataset = load(args)
    from python_loop import make_model
    tried = []

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = make_model(args.model)
            self.batch_size = 2

        def training_step(self, batch, _):
            x, y = batch
            if not tried or tried[-1] != len(x):
                tried.append(len(x))
            return F.cross_entropy(self.net(normalise(x)), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=self.batch_size, shuffle=True)

    # The finder saves a checkpoint (.scale_batch_size_*.ckpt) in the trainer's root and removes it
    # only when it ends well: a crash left one in the directory the script ran from.
    root = tempfile.TemporaryDirectory(prefix="batchwise-lightning-")

    def trainer(**limits):
        return L.Trainer(accelerator="gpu" if args.device.startswith("cuda") else "cpu", devices=1, max_epochs=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=root.name, **limits)

    with root:
        module = Module()
        # One warm-up step (not an epoch at batch 2): what the process holds after it is not counted.
        trainer(max_steps=1).fit(module, train_dataloaders=torch.utils.data.DataLoader(dataset, batch_size=2))
        tried.clear()
        apply_budget(args, torch.device(args.device))
        start = time.perf_counter()
        found = Tuner(trainer()).scale_batch_size(module, mode=args.mode, init_val=2, max_trials=25,
                                                  steps_per_trial=STEPS_PER_TRIAL)
    return {"batch": found, "trials": len(tried), "wall_s": time.perf_counter() - start, "tried": tried}


def accelerate_side(args):
    import torch
    from accelerate.utils import find_executable_batch_size

    device = torch.device(args.device)
    dataset = load(args)
    warm_up(args, dataset, device)
    apply_budget(args, device)
    tried = []

    # Accelerate's pattern: the model, optimizer and loader are made inside the function, so that a
    # failed batch's memory is freed before the next, smaller one.
    @find_executable_batch_size(starting_batch_size=args.start)
    def run(batch_size):
        tried.append(batch_size)
        model, opt = new_model(args, device)
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True)
        train_steps(model, opt, loader, device, STEPS_PER_TRIAL)
        return batch_size

    start = time.perf_counter()
    found = run()
    return {"batch": found, "trials": len(tried), "wall_s": time.perf_counter() - start, "tried": tried}


def epoch_side(args):
    """One epoch (or --epoch-samples) at --batch under the budget: ok, or the error that ended it."""
    import torch
    device = torch.device(args.device)
    dataset = load(args)
    if args.epoch_samples:
        dataset = torch.utils.data.Subset(dataset, range(min(args.epoch_samples, len(dataset))))
    warm_up(args, dataset, device)
    apply_budget(args, device)
    model, opt = new_model(args, device)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True)
    start = time.perf_counter()
    out = {"batch": args.batch, "samples": len(dataset), "steps_planned": math.ceil(len(dataset) / args.batch)}
    try:
        out["steps"] = train_steps(model, opt, loader, device, None)
        out["outcome"] = "ok"
    except (RuntimeError, MemoryError) as e:  # torch.OutOfMemoryError is a RuntimeError
        out["outcome"], out["message"] = "failed", str(e).strip().splitlines()[0][:200]
    out["wall_s"] = time.perf_counter() - start
    if device.type == "cuda":
        out["peak_bytes"] = torch.cuda.max_memory_reserved(device)
    return out


def batchwise_side(args, mode):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        start = time.perf_counter()
        subprocess.run([args.batchwise, "fit", "--model", args.model, "--dataset", "fashion-mnist", "--data-dir",
                        args.data_dir, "--optimizer", "sgd", "--memory-budget", f"{args.budget_mib}MiB", "--mode", mode,
                        "--min", "2", "--threads", str(args.threads), "--device", args.device, "--quiet",
                        "--no-history", "--json", f.name], check=True, capture_output=True)
        wall = time.perf_counter() - start
        fit = json.load(open(f.name))["fit"]
        trial_s = sum(t["wall_s"] for t in fit["trials"])
        return {"batch": fit["batch"], "trials": len(fit["trials"]), "wall_s": trial_s, "process_s": wall,
                "tried": [t["batch"] for t in fit["trials"]]}


def child(args, side, *extra):
    """Runs one side in its own process (its budget binds only it); its last stdout line is JSON."""
    cmd = [sys.executable, __file__, "--side", side, "--model", args.model, "--budget-mib", str(args.budget_mib),
           "--device", args.device, "--data-dir", args.data_dir, "--threads", str(args.threads),
           "--start", str(args.start), "--epoch-samples", str(args.epoch_samples), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:  # the finder itself died: that is a result too
        last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
        return {"error": last}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batchwise", default="build/batchwise")
    p.add_argument("--model", default="mlp")
    p.add_argument("--budget-mib", type=int, default=48)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--start", type=int, default=32768, help="Accelerate's starting_batch_size")
    p.add_argument("--epoch-samples", type=int, default=0, help="train this many samples for the epoch check (0: all)")
    p.add_argument("--epoch-for", default="all", help="finders whose answer trains the epoch: all, none, or keys "
                   "such as lightning-power,accelerate,batchwise-model")
    p.add_argument("--lightning-modes", default="power,binsearch")
    p.add_argument("--json-out", default="")
    p.add_argument("--side", default="", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="binsearch", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    sides = {"lightning": lightning_side, "accelerate": accelerate_side, "epoch": epoch_side}
    if args.side:
        print(json.dumps(sides[args.side](args)))
        return
    rows = []  # (name, key, result)
    for mode in args.lightning_modes.split(","):
        rows.append((f"Lightning Tuner.scale_batch_size ({mode})", f"lightning-{mode}",
                     child(args, "lightning", "--mode", mode)))
    rows.append((f"Accelerate find_executable_batch_size (from {args.start})", "accelerate", child(args, "accelerate")))
    for mode in ("power", "binsearch", "model"):
        try:
            result = batchwise_side(args, mode)
        except subprocess.CalledProcessError as e:
            result = {"error": (e.stderr or b"").decode().strip()[-200:]}
        rows.append((f"batchwise fit --mode {mode}", f"batchwise-{mode}", result))
    for _, key, r in rows:
        if (args.epoch_for == "all" or key in args.epoch_for.split(",")) and isinstance(r.get("batch"), int):
            r["epoch"] = child(args, "epoch", "--batch", str(r["batch"]))
    budget = "an address-space limit" if args.device == "cpu" else "the caching allocator's limit"
    print(f"{args.model} on Fashion-MNIST, SGD, budget {args.budget_mib} MiB ({budget}), {args.device}, "
          f"{args.threads} threads\n")
    print("| finder | batch found | trials | wall s in trials | batches tried | epoch at that batch |")
    print("|---|---:|---:|---:|---|---|")
    for name, _, r in rows:
        if "error" in r:
            print(f"| {name} | crashed: `{r['error']}` | - | nan | | |")
            continue
        tried = ", ".join(map(str, r["tried"][:12])) + (" ..." if len(r["tried"]) > 12 else "")
        e = r.get("epoch", {})
        epoch = (e.get("outcome", "") + (f" ({e['steps']} steps)" if "steps" in e else "") +
                 (f": {e['message']}" if e.get("message") else "") + (f"crashed: {e['error']}" if "error" in e else ""))
        print(f"| {name} | {r['batch']} | {r['trials']} | {r['wall_s']:.2f} | {tried} | {epoch} |")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"model": args.model, "device": args.device, "budget_mib": args.budget_mib,
                       "epoch_samples": args.epoch_samples, "rows": [dict(finder=n, key=k, **r) for n, k, r in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
