#!/usr/bin/env python3
"""The Python callbacks with the real frameworks, end to end through the batchwise binary.

    python tests/python/framework_test.py FRAMEWORK CHECK --batchwise build/batchwise --work DIR

FRAMEWORK: lightning, transformers or keras (Keras 3 on its torch backend); each runs its example
from examples/ with sizes small enough for seconds on two CPU cores. CHECK:

  sweep         `batchwise sweep --cmd` at two batch sizes: every trial ok, its samples/s measured
                from the callback's step lines (not the wall-time fallback, which the JSON marks with
                a message), equal to samples over step time. Leaves sweep.json in --work for `fit`.
  fit           `batchwise fit --cmd --mode power` under a CPU memory budget placed halfway between
                the two sizes' peaks (from sweep.json, or a sweep run first): it finds the smaller.
  unchanged     without batchwise's variables the callback changes nothing: the script with and
                without it prints the same (timings masked) and trains the same steps to the same loss.
  accumulation  with gradient accumulation (2 batches a step), each step line's samples are the
                optimizer step's (2 x the batch), and training stops after BATCHWISE_STEPS steps.
  honest        a script that trains twice the batch batchwise asks for (`{batch}` ignored) is an
                error trial naming it, not that batch "accumulated"; and one that trains no step
                (Lightning's max_steps 0, Keras's epochs 0) is one too, "trained nothing", not the
                wall-time fallback's measure.
  loader        (the Trainer) a Trainer whose get_train_dataloader is the script's own: the step lines
                count the batch the model is given, not per_device_train_batch_size. Its loader at 64
                with per_device_train_batch_size {batch} is refused at 16, naming the batch it did not
                train; at {batch} with per_device_train_batch_size left at 8 it is measured at 16;
                with gradient accumulation, gradient checkpointing and an evaluation every step, each
                step line counts the accumulated batches once.

Exit status 0: passed; 1: failed (with the reason); 77: skipped, the framework is not installed.
Standard library only; the frameworks are imported by the child processes.
"""
import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77

# Per framework: the module that says it is installed, the example, its arguments for a small run,
# extra environment, the two batch sizes of the sweep and the fit (the second twice the first, far
# enough apart in memory that a budget between them is not a matter of noise: a process's peak
# moves by 50-70 MiB from one run to the next, and Lightning's 512 and 1,024, about 100 MiB apart,
# once put the fit's 1,024 2 MiB under the line; its 1,024 and 2,048 are about 300 MiB apart), and the arguments
# of a full run for `unchanged` (the example's own sizes, few steps, quiet) with the steps it makes.
# The sweep and the fit run with the frameworks' progress bars and logs on (Keras's bar rewrites a
# line of stdout with \r and backspaces, never ending it; the Trainer's tqdm bar does so on stderr
# and it logs its loss every step, which the callback passes on as `batchwise: loss=` lines;
# Lightning prints its model summary and, off a terminal, its Rich bar once): the protocol lines
# must be read through them.
FRAMEWORKS = {
    "lightning": dict(
        module="lightning.pytorch", script="examples/lightning_fashion_mnist.py", args=[], env={},
        batches=(1024, 2048), unchanged_args=["--batch-size", "32", "--max-steps", "6", "--quiet"], steps=6,
        accumulation=True, nothing_args=["--max-steps", "0"]),
    "transformers": dict(
        module="transformers", script="examples/transformers_gpt2.py",
        args=["--seq-len", "128", "--n-embd", "32", "--vocab-size", "2048", "--logging-steps", "1"], env={},
        batches=(64, 128), unchanged_args=["--batch-size", "4", "--max-steps", "6", "--logging-steps", "2",
                                           "--seq-len", "32", "--n-embd", "32", "--quiet"], steps=6,
        accumulation=True, nothing_args=None, own_loader=True),
    "keras": dict(
        module="keras", script="examples/keras_fashion_mnist.py", args=["--samples", "8192"],
        env={"KERAS_BACKEND": "torch"}, batches=(512, 1024),
        unchanged_args=["--batch-size", "32", "--samples", "192", "--epochs", "2", "--quiet"], steps=12,
        accumulation=False, nothing_args=["--epochs", "0"]),
}
WARMUP, STEPS = 1, 2   # sweep trials: 1 untimed + 2 timed step lines
TARGET = 0.9           # batchwise's default --target


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def child_env(spec, batchwise_vars=None):
    """The environment of a child: ours without any BATCHWISE_ variable, python/ first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHWISE_")}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(spec["env"])
    env.update(batchwise_vars or {})
    return env


def run(argv, env, timeout=300):
    start = time.monotonic()
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    print(f"  {time.monotonic() - start:5.1f} s, exit {done.returncode}: {' '.join(argv)}", flush=True)
    return done


def batchwise(opts, subcommand, flags, spec):
    """Runs `batchwise SUBCOMMAND --cmd FLAGS -- python EXAMPLE --batch-size {batch} ARGS`; its JSON report."""
    report = os.path.join(opts.work, f"{subcommand}.json")
    argv = [opts.batchwise, subcommand, "--cmd", *flags, "--json", report, "--no-history", "--no-monitor",
            "--trial-timeout", "120", "--", sys.executable, os.path.join(ROOT, spec["script"]),
            "--batch-size", "{batch}", *spec["args"]]
    done = run(argv, child_env(spec))
    check(done.returncode == 0, f"batchwise {subcommand} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    with open(report) as f:
        return json.load(f), done.stdout


def from_step_times(samples_per_s, batch, times):
    """Whether samples_per_s is `batch` samples per step over these step times: over their median
    (as batchwise ranks) or their sum. (The wall-time fallback passes this too, with equal shares of
    the whole run as its step times: the caller tells it apart by its message, by the step lines
    read and by step times that differ.)"""
    ordered = sorted(times)
    median = (ordered[(len(times) - 1) // 2] + ordered[len(times) // 2]) / 2
    return any(abs(samples_per_s - x) <= 1e-6 * x for x in (batch / median, batch * len(times) / sum(times)))


def check_sweep(opts, spec):
    a, b = spec["batches"]
    report, console = batchwise(opts, "sweep", ["--batch-sizes", f"{a},{b}", "--warmup", str(WARMUP), "--steps",
                                                str(STEPS), "--repetitions", "1"], spec)
    points = report["sweep"]["points"]
    check([p["batch"] for p in points] == [a, b], f"sweep points {[p['batch'] for p in points]}, expected {[a, b]}")
    for p in points:
        where = f"batch {p['batch']}"
        check(p["outcome"] == "ok", f"{where}: outcome {p['outcome']}: {p.get('message')}\n{console}")
        # An ok point carries a message only when its timing is the wall-time fallback (no step lines).
        check("message" not in p, f"{where}: timed by the wall-time fallback, not step lines: {p.get('message')}")
        check(p["steps_run"] == WARMUP + STEPS, f"{where}: {p['steps_run']} step lines read, expected {WARMUP + STEPS}")
        times = p["step_times_s"]
        check(len(times) == STEPS and len(set(times)) > 1, f"{where}: step times {times} are not per-step measures")
        check(from_step_times(p["samples_per_s"], p["batch"], times),
              f"{where}: {p['samples_per_s']} samples/s is not {p['batch']} samples over its step times {times}")
        check(p["loss_last"] is not None, f"{where}: no loss read from the step lines")
    print(f"  peaks: {[(p['batch'], p['peak_bytes'] >> 20) for p in points]} MiB, "
          f"samples/s: {[(p['batch'], round(p['samples_per_s'])) for p in points]}")
    return report


def check_fit(opts, spec):
    a, b = spec["batches"]
    path = os.path.join(opts.work, "sweep.json")
    if os.path.exists(path):
        with open(path) as f:
            sweep = json.load(f)
    else:
        sweep = check_sweep(opts, spec)
    peaks = {p["batch"]: p["peak_bytes"] for p in sweep["sweep"]["points"]}
    check(peaks[b] - peaks[a] >= 32 << 20,
          f"peaks {peaks[a] >> 20} MiB at batch {a} and {peaks[b] >> 20} MiB at {b} are too close for a budget between them")
    budget = int((peaks[a] + peaks[b]) / 2 / TARGET)  # the target line halfway between the two peaks
    # The fit's trials run the sweep's steps, so that their peaks are the sweep's (fewer steps can
    # peak lower: a DataLoader's next batch, a third step's allocations).
    report, console = batchwise(opts, "fit", ["--mode", "power", "--min", str(a), "--max", str(b),
                                              "--warmup", str(WARMUP), "--fit-steps", str(STEPS),
                                              "--memory-budget", str(budget)], spec)
    fit = report["fit"]
    check(fit["outcome"] == "fits" and fit["batch"] == a,
          f"fit under {budget >> 20} MiB: {fit['outcome']} at batch {fit.get('batch')}, expected batch {a}\n{console}")
    trials = {t["batch"]: t for t in fit["trials"]}
    check(trials[a]["outcome"] == "ok" and trials[a]["within_target"], f"batch {a}: {trials[a]}")
    check(trials[b]["outcome"] == "oom" or not trials[b].get("within_target", False),
          f"batch {b} fitted under a budget below its sweep peak: {trials[b]}")
    print(f"  budget {budget >> 20} MiB: batch {a} peaked at {trials[a]['peak_bytes'] >> 20} MiB, "
          f"batch {b} at {trials[b]['peak_bytes'] >> 20} MiB ({trials[b]['outcome']})")


# Figures that differ from run to run whatever the callback does: durations and rates.
TIMINGS = [re.compile(p) for p in (
    r"\d+(\.\d+)?\s*(it/s|s/it|ms/step|s/step|us/step)",
    r"'(train_runtime|train_samples_per_second|train_steps_per_second)': '?[\d.e+-]+'?",
    r"\[\d\d:\d\d<[\d:?]+",
    r"\b\d+s\b",
)]


def masked(text):
    for pattern in TIMINGS:
        text = pattern.sub("<t>", text)
    return text


def check_unchanged(opts, spec):
    base = [sys.executable, os.path.join(ROOT, spec["script"]), *spec["unchanged_args"]]
    with_callback = run(base, child_env(spec))
    without = run(base + ["--without-batchwise"], child_env(spec))
    for name, done in (("with the callback", with_callback), ("without it", without)):
        check(done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    check("batchwise:" not in with_callback.stdout + with_callback.stderr,
          f"the callback printed protocol lines without batchwise:\n{with_callback.stdout}")
    for stream in ("stdout", "stderr"):
        mine, theirs = masked(getattr(with_callback, stream)), masked(getattr(without, stream))
        if mine != theirs:
            diff = [f"  with:    {x!r}\n  without: {y!r}" for x, y in zip(mine.splitlines(), theirs.splitlines()) if x != y]
            raise Failure(f"{stream} differs with the callback (timings masked):\n" + "\n".join(diff[:10]) +
                          ("" if diff else f"\n  {len(mine.splitlines())} lines against {len(theirs.splitlines())}"))
    summary = [line for line in with_callback.stdout.splitlines() if line.startswith("trained ")]
    check(summary and summary[-1].startswith(f"trained {spec['steps']} optimizer steps"),
          f"expected a full run of {spec['steps']} steps, the script says: {summary}")
    print(f"  both: {summary[-1]}")


def check_accumulation(opts, spec):
    batch, steps = 4, 3
    argv = [sys.executable, os.path.join(ROOT, spec["script"]), *spec["unchanged_args"], "--accumulate", "2",
            "--max-steps", "50"]
    argv[argv.index("--batch-size") + 1] = str(batch)
    done = run(argv, child_env(spec, {"BATCHWISE_BATCH": str(batch), "BATCHWISE_STEPS": str(steps)}))
    check(done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("batchwise: step")]
    samples = [re.search(r"samples=(\d+)", line) for line in lines]
    check(len(lines) == steps, f"{len(lines)} step lines, expected {steps}:\n{done.stdout}")
    check(all(m and int(m.group(1)) == 2 * batch for m in samples),
          f"step lines {lines}: expected samples={2 * batch} (2 accumulated batches of {batch}) on each")
    check(f"trained {steps} optimizer steps" in done.stdout, f"did not stop after {steps} steps:\n{done.stdout}")
    print(f"  {lines}")


def check_honest(opts, spec):
    batch = 8
    script = [sys.executable, os.path.join(ROOT, spec["script"]), *spec["unchanged_args"]]

    def trial(args, name):
        report = os.path.join(opts.work, f"honest-{name}.json")
        argv = [opts.batchwise, "sweep", "--cmd", "--batch-sizes", str(batch), "--warmup", "1", "--steps", "2",
                "--repetitions", "1", "--json", report, "--no-history", "--no-monitor", "--trial-timeout", "120",
                "--", *args]
        done = run(argv, child_env(spec))
        check(done.returncode == 1, f"{name}: batchwise exited {done.returncode}, expected 1:\n{done.stdout}\n{done.stderr}")
        with open(report) as f:
            point = json.load(f)["sweep"]["points"][0]
        check(point["outcome"] == "error", f"{name}: outcome {point['outcome']}: {point.get('message')}")
        return point.get("message", "")

    own = list(script)
    own[own.index("--batch-size") + 1] = str(2 * batch)  # the script's own batch, whatever batchwise asks
    message = trial(own, "own-batch")
    check(f"batches of {2 * batch} from its data loader" in message and f"it did not train batch {batch}" in message,
          f"a script training batch {2 * batch} at batch {batch}: {message}")
    print(f"  {message[:160]}")
    if spec["nothing_args"]:
        nothing = list(script)
        nothing[nothing.index("--batch-size") + 1] = "{batch}"
        message = trial(nothing + spec["nothing_args"], "nothing")
        check(message.startswith("trained nothing:"), f"a script that trains no step: {message}")
        print(f"  {message[:160]}")


# A Trainer subclass whose get_train_dataloader is its own (--loader: its batch), on a tiny GPT-2 from a config
OWN_LOADER_SCRIPT = '''
import argparse, tempfile
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from batchwise.transformers import BatchwiseCallback

parser = argparse.ArgumentParser()
parser.add_argument("--loader", type=int, required=True)
parser.add_argument("--per-device", type=int, default=8)
parser.add_argument("--accumulate", type=int, default=1)
parser.add_argument("--checkpointing", action="store_true")
parser.add_argument("--eval-every-step", action="store_true")
args = parser.parse_args()
torch.manual_seed(0)
tokens = torch.randint(64, (512, 16))
data = [{"input_ids": t, "labels": t} for t in tokens]


class OwnLoader(Trainer):
    def get_train_dataloader(self):
        return torch.utils.data.DataLoader(data, batch_size=args.loader, collate_fn=self.data_collator)


model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=16, vocab_size=64))
with tempfile.TemporaryDirectory() as out:
    training = TrainingArguments(
        output_dir=out, per_device_train_batch_size=args.per_device, gradient_accumulation_steps=args.accumulate,
        max_steps=20, save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
        gradient_checkpointing=args.checkpointing, eval_strategy="steps" if args.eval_every_step else "no",
        eval_steps=1, per_device_eval_batch_size=32)
    trainer = OwnLoader(model=model, args=training, train_dataset=data, eval_dataset=data[:32],
                        callbacks=[BatchwiseCallback()])
    result = trainer.train()
print(f"trained {result.global_step} optimizer steps")
'''


def check_loader(opts, spec):
    script = os.path.join(opts.work, "own_loader.py")
    with open(script, "w") as f:
        f.write(OWN_LOADER_SCRIPT)

    def sweep(name, args, batches):
        report = os.path.join(opts.work, f"loader-{name}.json")
        argv = [opts.batchwise, "sweep", "--cmd", "--batch-sizes", ",".join(map(str, batches)), "--warmup", "1", "--steps", "2",
                "--repetitions", "1", "--json", report, "--no-history", "--no-monitor", "--trial-timeout", "120",
                "--", sys.executable, script, *args]
        home = os.path.join(opts.work, "home")  # no history or data of the user's
        done = run(argv, {**child_env(spec), "HOME": home, "XDG_DATA_HOME": os.path.join(home, "data")})
        with open(report) as f:
            return done, {p["batch"]: p for p in json.load(f)["sweep"]["points"]}

    # (a) its loader trains 64 whatever per_device_train_batch_size ({batch}) says: no batch is measured
    done, points = sweep("ignored", ["--loader", "64", "--per-device", "{batch}"], (16,))
    check(done.returncode == 1, f"a loader of 64: batchwise exited {done.returncode}, expected 1:\n{done.stdout}")
    for batch in (16,):
        p = points[batch]
        message = p.get("message", "")
        check(p["outcome"] == "error" and "batches of 64 from its data loader" in message
              and f"it did not train batch {batch}" in message,
              f"batch {batch} from a loader of 64: {p['outcome']}: {message}")
    print(f"  {points[16]['message'][:160]}")
    # (b) its loader trains {batch}, per_device_train_batch_size left at 8: each batch is measured as trained
    done, points = sweep("own", ["--loader", "{batch}"], (8, 16))
    check(done.returncode == 0, f"a loader of {{batch}}: batchwise exited {done.returncode}:\n{done.stdout}")
    for batch in (8, 16):
        p = points[batch]
        check(p["outcome"] == "ok" and "message" not in p, f"batch {batch}: {p['outcome']}: {p.get('message')}")
        check(from_step_times(p["samples_per_s"], batch, p["step_times_s"]),
              f"batch {batch}: {p['samples_per_s']} samples/s is not {batch} samples over {p['step_times_s']}")
    print(f"  samples/s: {[(b, round(p['samples_per_s'])) for b, p in points.items()]}")
    # Two batches of 4 a step, each layer recomputed in backward, the model evaluated (in eval mode) after each
    # step: the step's samples are the two batches', once, and batch= one of them, not per_device_train_batch_size
    steps = 3
    done = run([sys.executable, script, "--loader", "4", "--accumulate", "2", "--checkpointing", "--eval-every-step"],
               child_env(spec, {"BATCHWISE_BATCH": "4", "BATCHWISE_STEPS": str(steps)}))
    check(done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("batchwise: step")]
    check(lines == ["batchwise: step samples=8 batch=4"] * steps,
          f"step lines {lines}: expected {steps} of samples=8 batch=4 (2 accumulated batches of 4)")
    check(f"trained {steps} optimizer steps" in done.stdout, f"did not stop after {steps} steps:\n{done.stdout}")
    print(f"  {lines}")


CHECKS = {"sweep": check_sweep, "honest": check_honest, "fit": check_fit, "unchanged": check_unchanged,
          "accumulation": check_accumulation, "loader": check_loader}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("framework", choices=sorted(FRAMEWORKS))
    parser.add_argument("check", choices=sorted(CHECKS))
    parser.add_argument("--batchwise", default=os.path.join(ROOT, "build", "batchwise"), help="the batchwise binary")
    parser.add_argument("--work", required=True, help="a folder for reports (sweep.json is shared with fit)")
    opts = parser.parse_args()
    spec = FRAMEWORKS[opts.framework]
    if importlib.util.find_spec(spec["module"].split(".")[0]) is None:
        print(f"skipped: {spec['module']} is not installed in {sys.executable}")
        return SKIP
    if opts.check == "accumulation" and not spec["accumulation"]:
        print(f"skipped: {opts.framework} has no accumulation check")
        return SKIP
    if opts.check == "loader" and not spec.get("own_loader"):
        print(f"skipped: {opts.framework} has no check of a loader of its own")
        return SKIP
    os.makedirs(opts.work, exist_ok=True)
    start = time.monotonic()
    try:
        CHECKS[opts.check](opts, spec)
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAILED {opts.framework} {opts.check}: {e}")
        return 1
    print(f"passed {opts.framework} {opts.check} in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
