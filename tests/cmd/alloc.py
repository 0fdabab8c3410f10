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
parser.add_argument("--hold-s", type=float, default=0.0)
args = parser.parse_args()

size = int(args.batch_size * args.mib_per_sample * 2**20)
if args.in_child:
    ready, written = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready)
        block = bytearray(b"\x01") * size  # written, so resident
        os.write(written, b"1")
        time.sleep(args.hold_s + 30)  # held until the parent ends it, or the group is killed over its limit
        os._exit(0)
    os.close(written)
    if not os.read(ready, 1):  # the steps start once the worker holds its memory, however slow the machine
        sys.exit("alloc.py: the worker ended before it held its memory")
else:
    block = bytearray(b"\x01") * size
for step in range(args.steps):
    time.sleep(0.05)
    print(f"batchwise: step samples={args.batch_size}")
if args.in_child:
    time.sleep(args.hold_s)  # the worker's memory held past the steps, for a sampler on a loaded machine to see
    os.kill(pid, 9)
    os.waitpid(pid, 0)
