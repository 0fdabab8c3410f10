"""PyTorch Lightning's own batch-size finder beside `batchwise fit`, same model and data, one run.

Lightning (`Tuner.scale_batch_size`, mode power and binsearch) runs the mlp or lenet of
bench/python_loop.py on Fashion-MNIST under an address-space limit (RLIMIT_AS, like `ulimit -v`)
of BUDGET bytes above what the process holds after one warm-up step, so that its CPU out-of-memory
detection fires. batchwise runs `fit` with `--memory-budget BUDGET` in model and binsearch modes.
The two budgets are not the same quantity (address space, which also holds allocator slack,
against batchwise's exact tensor bytes), so the batches found differ; trials and wall time are the
comparison. Prints a markdown table.

    /opt/batchwise-venv/bin/python bench/lightning_vs_fit.py --batchwise build/batchwise --model mlp --budget-mib 48
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def lightning_side(model_name, budget, mode):
    import lightning as L
    import torch
    import torch.nn.functional as F
    from lightning.pytorch.tuner import Tuner
    sys.path.insert(0, HERE)
    from python_loop import DATA, make_model, read_idx

    torch.set_num_threads(2)
    images = read_idx(f"{DATA}/train-images-idx3-ubyte.gz").unsqueeze(1)
    labels = read_idx(f"{DATA}/train-labels-idx1-ubyte.gz").long()
    dataset = torch.utils.data.TensorDataset(images, labels)
    tried = []

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = make_model(model_name)
            self.batch_size = 2

        def training_step(self, batch, _):
            x, y = batch
            if not tried or tried[-1] != len(x):
                tried.append(len(x))
            x = x.float().div_(255.0).sub_(0.2860).div_(0.3530)
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(dataset, batch_size=self.batch_size, shuffle=True)

    def trainer():
        return L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)

    module = Module()
    trainer().fit(module, train_dataloaders=torch.utils.data.DataLoader(dataset, batch_size=2), )  # warm-up
    tried.clear()
    vm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + budget, vm + budget))
    start = time.perf_counter()
    found = Tuner(trainer()).scale_batch_size(module, mode=mode, init_val=2, max_trials=25, steps_per_trial=3)
    return {"batch": found, "trials": len(tried), "wall_s": time.perf_counter() - start, "tried": tried}


def batchwise_side(args, mode):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        start = time.perf_counter()
        subprocess.run([args.batchwise, "fit", "--model", args.model, "--dataset", "fashion-mnist", "--optimizer", "sgd",
                        "--memory-budget", f"{args.budget_mib}MiB", "--mode", mode, "--min", "2", "--threads", "2",
                        "--device", "cpu", "--quiet", "--json", f.name], check=True, capture_output=True)
        wall = time.perf_counter() - start
        fit = json.load(open(f.name))["fit"]
        trial_s = sum(t["wall_s"] for t in fit["trials"])
        return {"batch": fit["batch"], "trials": len(fit["trials"]), "wall_s": trial_s, "process_s": wall,
                "tried": [t["batch"] for t in fit["trials"]]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batchwise", default="build/batchwise")
    p.add_argument("--model", default="mlp")
    p.add_argument("--budget-mib", type=int, default=48)
    p.add_argument("--side", default="")
    p.add_argument("--mode", default="binsearch")
    args = p.parse_args()
    if args.side == "lightning":  # run in a child, so its address-space limit binds only it
        print(json.dumps(lightning_side(args.model, args.budget_mib << 20, args.mode)))
        return
    rows = []
    for mode in ("power", "binsearch"):
        out = subprocess.run([sys.executable, __file__, "--side", "lightning", "--mode", mode, "--model", args.model,
                              "--budget-mib", str(args.budget_mib)], capture_output=True, text=True)
        if out.returncode != 0:  # the finder itself died: that is a result too
            last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
            rows.append((f"Lightning Tuner.scale_batch_size ({mode})",
                         {"batch": f"crashed: `{last}`", "trials": "-", "wall_s": float("nan"), "tried": []}))
            continue
        rows.append((f"Lightning Tuner.scale_batch_size ({mode})", json.loads(out.stdout.strip().splitlines()[-1])))
    for mode in ("power", "binsearch", "model"):
        rows.append((f"batchwise fit --mode {mode}", batchwise_side(args, mode)))
    print(f"{args.model} on Fashion-MNIST, SGD, budget {args.budget_mib} MiB, 2 threads\n")
    print("| finder | batch found | trials | wall s in trials | batches tried |")
    print("|---|---:|---:|---:|---|")
    for name, r in rows:
        tried = ", ".join(map(str, r["tried"][:12])) + (" ..." if len(r["tried"]) > 12 else "")
        print(f"| {name} | {r['batch']} | {r['trials']} | {r['wall_s']:.2f} | {tried} |")


if __name__ == "__main__":
    main()
