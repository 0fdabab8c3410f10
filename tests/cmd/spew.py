"""Writes 2 MiB to stderr and 2 MiB to stdout before its steps, for command_test.cpp: a reader
that does not drain both pipes while the child runs deadlocks here."""
import sys

line = "x" * 1023 + "\n"
for _ in range(2048):
    sys.stderr.write(line)
    sys.stdout.write(line)
for _ in range(3):
    print("batchwise: step samples=4", flush=True)
