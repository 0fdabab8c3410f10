"""Holds --mib-per-sample MiB of resident memory per sample while it "trains", for command_test.cpp.
With --in-child the memory is held by a forked child process (a data-loader worker, say)."""
import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, required=True)
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--mib-per-sample", type=float, default=1.0)
parser.add_argument("--in-child", action="store_true")
args = parser.parse_args()

size = int(args.batch_size * args.mib_per_sample * 2**20)
if args.in_child:
    pid = os.fork()
    if pid == 0:
        block = bytearray(b"\x01") * size  # written, so resident
        time.sleep(5)
        os._exit(0)
else:
    block = bytearray(b"\x01") * size
for step in range(args.steps):
    time.sleep(0.05)
    print(f"batchwise: step samples={args.batch_size}")
if args.in_child:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
