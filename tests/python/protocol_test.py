#!/usr/bin/env python3
"""The `batchwise` Python package (python/) without any framework: what it prints, when it says
the steps are done, and its errors. Each case runs a short script in a fresh interpreter with the
environment batchwise would give it (or none), and reads its output as batchwise's parser does (a
line counts when it begins with `batchwise:`; a trailing \\r is dropped).

    python tests/python/protocol_test.py
    python tests/python/protocol_test.py --batchwise build/batchwise   # also a plain torch loop, swept

With --batchwise, a plain PyTorch loop that trains until batchwise.step() says it is done
(tests/python/plain_loop.py) is swept at two batch sizes: every trial ok, stopped by itself after
its steps, its samples/s from the step lines. Skipped (77) without torch. Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77
failures = []


def run(code, env=None):
    """Runs `code` with python/ on the path and only the given BATCHWISE_ variables; (exit, stdout, stderr)."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("BATCHWISE_") and k != "RANK"}
    child["PYTHONPATH"] = os.path.join(ROOT, "python")
    child.update(env or {})
    done = subprocess.run([sys.executable, "-c", code], env=child, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def protocol_lines(text):
    """The lines batchwise's parser reads as protocol lines."""
    return [line.rstrip("\r") for line in text.split("\n") if line.rstrip("\r").startswith("batchwise:")]


def case(name, condition, detail=""):
    print(f"{'ok  ' if condition else 'FAIL'} {name}" + ("" if condition else f": {detail}"))
    if not condition:
        failures.append(name)


def test_without_batchwise():
    code = ("import batchwise, sys\n"
            "print(batchwise.active(), batchwise.batch_size(64), batchwise.steps(), batchwise.steps(9))\n"
            "print([batchwise.step(32, 0.5) for _ in range(3)], batchwise.done())\n"
            "batchwise.peak()\n"
            "print('torch' in sys.modules)\n")
    status, out, err = run(code)
    case("without batchwise: defaults, no stop, nothing printed",
         status == 0 and out == "False 64 None 9\n[False, False, False] False\nFalse\n" and err == "", (status, out, err))


def test_step_lines():
    code = ("import batchwise\n"
            "print(batchwise.active(), batchwise.batch_size(64), batchwise.steps(1000))\n"
            "print('\\rprogress 10%', end='', flush=True)\n"  # a progress bar's partial line
            "print([batchwise.step(32, 0.5), batchwise.step(batch=32), batchwise.step(samples=96, loss=1.25e-3)])\n"
            "print(batchwise.done())\n"
            "batchwise.peak()\n")
    status, out, err = run(code, {"BATCHWISE_BATCH": "32", "BATCHWISE_STEPS": "3"})
    lines = protocol_lines(out)
    case("under batchwise: batch and steps from the environment",
         out.startswith("True 32 3\n"), out)
    case("step lines, one per step, each at the start of a line (after a progress bar's partial line too)",
         lines == ["batchwise: step samples=32 loss=0.5", "batchwise: step batch=32",
                   "batchwise: step samples=96 loss=0.00125"],
         repr(out))
    case("step() says done at the last step asked for; no peak_bytes on CPU",
         status == 0 and "[False, False, True]\nTrue\n" in out and "peak_bytes" not in out, (status, out, err))


def test_other_ranks():
    code = "import batchwise\nprint([batchwise.step(8) for _ in range(2)], batchwise.done())\n"
    status, out, _ = run(code, {"BATCHWISE_BATCH": "8", "BATCHWISE_STEPS": "2", "RANK": "1"})
    case("rank 1 counts its steps and stops with rank 0, but prints no step line",
         status == 0 and out == "[False, True] True\n", repr(out))


def test_bad_values():
    for name in ("BATCHWISE_BATCH", "BATCHWISE_STEPS"):
        for value in ("abc", "0", "-4", "1.5", "", "12abc"):
            status, _, err = run("import batchwise\nbatchwise.Reporter()\n", {name: value})
            last = err.strip().splitlines()[-1] if err.strip() else ""
            case(f"{name}={value!r} is refused, naming the variable",
                 status != 0 and last.startswith("batchwise.BatchwiseError: " + f"{name}={value!r}: expected a whole number"),
                 last)
    status, out, _ = run("import batchwise\nprint(batchwise.batch_size(1), batchwise.steps(1))\n",
                         {"BATCHWISE_BATCH": " 48 ", "BATCHWISE_STEPS": "7\n"})
    case("surrounding blanks are accepted", status == 0 and out == "48 7\n", out)


def test_batch_samples():
    code = ("import batchwise\n"
            "class A:\n"
            "    def __init__(self, *shape): self.shape = shape\n"
            "images = tuple(A(3, 32, 32) for _ in range(8))\n"
            "print(batchwise._batch_samples((images, tuple({'boxes': A(2, 4)} for _ in range(8)))),\n"
            "      batchwise._batch_samples(([A(5, 7), A(9, 7), A(2, 7)], A(3))),\n"
            "      batchwise._batch_samples(([A(16, 7), A(9, 7), A(2, 7)],)),\n"
            "      batchwise._batch_samples((images, tuple(A() for _ in range(8)))),\n"
            "      batchwise._batch_samples([{'x': A(3)}, {'x': A(3)}]),\n"
            "      batchwise._batch_samples([[A(16, 10), A(16, 5)], A(16)]),\n"
            "      batchwise._batch_samples([[A(16, 10), A(16, 5)], [A(16), A(16)]]),\n"
            "      batchwise._batch_samples({'input_ids': A(4, 128), 'text': ['a'] * 4}),\n"
            "      batchwise._batch_samples([(A(3, 32, 32), {'boxes': A(2, 4)}) for _ in range(3)]),\n"
            "      batchwise._batch_samples([{'x': A(8, 5), 'y': A(8)}, {'x': A(8, 5), 'y': A(8)}]),\n"
            "      batchwise._batch_samples((A(), A(8, 5), A(8))),\n"
            "      batchwise._batch_samples([{'x': A(8, 5), 'text': ['a'] * 8}, {'x': A(8, 5), 'text': ['b'] * 8}]),\n"
            "      batchwise._batch_samples([(A(7, 5), 3), (A(9, 5), 1)]))\n"
            "import dataclasses\n"
            "@dataclasses.dataclass\n"
            "class Batch:\n"
            "    note: str\n"
            "    x: object\n"
            "    y: object\n"
            "class Opaque:\n"
            "    def __init__(self): self.x = A(8, 5)\n"
            "print(batchwise._batch_samples(Batch('a', A(6, 5), A(6))), batchwise._batch_samples(Opaque()))\n")
    status, out, err = run(code)
    # detection's tuples of images and target dicts; a list of sequences beside labels (their count is the
    # labels'), alone; images beside 0-d labels; dicts of one 1-d array each (two loaders' batches of 3, or 2 samples:
    # read as the first); fields of two inputs, and of two targets; a mapping;
    # samples as (image, target) tuples; Lightning's batches of two loaders, dicts (the first's); a 0-d value first;
    # two loaders' dicts that hold texts; samples as (sequence, int label) tuples
    case("a batch's samples: per-sample lists counted as such, batched fields by their first dimension",
         status == 0 and out == "8 3 3 8 3 16 16 4 3 8 8 8 2\n6 None\n", (status, out, err))


def test_plain_loop(binary):
    """A plain torch loop under `batchwise sweep --cmd`: it stops by itself after the steps asked for."""
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0:
        print("skipped the plain loop: torch is not installed")
        return SKIP
    with tempfile.TemporaryDirectory() as work:
        report = os.path.join(work, "sweep.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHWISE_")}
        env["PYTHONPATH"] = os.path.join(ROOT, "python")
        argv = [binary, "sweep", "--cmd", "--batch-sizes", "32,128", "--warmup", "1", "--steps", "3", "--repetitions",
                "1", "--json", report, "--no-history", "--no-monitor", "--trial-timeout", "60", "--",
                sys.executable, os.path.join(HERE, "plain_loop.py"), "--batch-size", "{batch}"]
        start = time.monotonic()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        print(f"  {time.monotonic() - start:.1f} s: {' '.join(argv)}")
        case("batchwise sweep --cmd of the plain loop exits 0", done.returncode == 0, done.stdout + done.stderr)
        if done.returncode != 0:
            return 1
        with open(report) as f:
            points = json.load(f)["sweep"]["points"]
    for p in points:
        times = sorted(p["step_times_s"])
        # batchwise ranks by the median step (the wall-time fallback would carry a message instead)
        case(f"plain loop, batch {p['batch']}: ok, 4 step lines, samples/s from them (not the wall-time fallback)",
             p["outcome"] == "ok" and "message" not in p and p["steps_run"] == 4 and len(times) == 3 and
             times[0] > 0 and abs(p["samples_per_s"] - p["batch"] / times[1]) <= 1e-6 * p["samples_per_s"], p)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batchwise", help="the batchwise binary: also sweep a plain torch loop")
    opts = parser.parse_args()
    test_without_batchwise()
    test_step_lines()
    test_other_ranks()
    test_bad_values()
    test_batch_samples()
    if opts.batchwise:
        test_plain_loop(opts.batchwise)
    print(f"{len(failures)} failed: {', '.join(failures)}" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
