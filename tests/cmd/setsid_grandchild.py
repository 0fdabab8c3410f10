"""Starts a grandchild in a session of its own (as torchrun starts its workers) that holds --mib MiB
and sleeps, writes the grandchild's pid to --pid-file, prints its steps and exits without waiting for
it: for command_test.cpp (the grandchild's memory is the run's, and it is gone after the run)."""
import argparse
import os
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--mib", type=int, default=150)
parser.add_argument("--pid-file", required=True)
parser.add_argument("--steps", type=int, default=8)
args = parser.parse_args()
holder = (
    "import os, sys, time\n"
    f"data = bytearray(os.urandom(1 << 20)) * {args.mib}  # touched: resident\n"
    "with open(sys.argv[1] + '.tmp', 'w') as f:\n"
    "    f.write(str(os.getpid()))\n"
    "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "time.sleep(60)\n"
)
subprocess.Popen([sys.executable, "-c", holder, args.pid_file], start_new_session=True)
while not os.path.exists(args.pid_file):
    time.sleep(0.01)
for _ in range(args.steps):
    time.sleep(0.1)
    print("batchwise: step samples=1", flush=True)
