"""Holds --mib MiB, then forks --workers workers that only read it (copy-on-write: shared, not
copied), prints its steps and exits: for command_test.cpp (shared pages must not count per worker)."""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--mib", type=int, default=120)
parser.add_argument("--workers", type=int, default=3)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()
data = bytearray(os.urandom(1 << 20)) * args.mib  # touched: resident in the parent
children = []
for _ in range(args.workers):
    pid = os.fork()
    if pid == 0:
        total = sum(data[::4096])  # reads every page: resident in the worker too, still shared
        time.sleep(0.6)
        os._exit(0 if total >= 0 else 1)
    children.append(pid)
for step in range(args.steps):
    time.sleep(0.1)
    print(f"batchwise: step samples=1", flush=True)
for pid in children:
    os.waitpid(pid, 0)
