"""Prints its arguments and batchwise's environment variables, one per line, then a step line per step, for
command_test.cpp and cmd_cli_test.cpp."""
import os
import sys
import time

for arg in sys.argv[1:]:
    print(f"arg: {arg}")
for name in ("BATCHWISE_BATCH", "BATCHWISE_STEPS", "PYTHONUNBUFFERED", "BATCHWISE_TEST_EXTRA"):
    print(f"env: {name}={os.environ.get(name, '')}")
print(f"stdin: {sys.stdin.read()!r}")
# A step line per step it was asked for: a command that trains nothing would be an error trial.
# Each flushed, a few milliseconds apart: lines read together would time no step (too short to time).
for _ in range(int(os.environ.get("BATCHWISE_STEPS") or 1)):
    time.sleep(0.005)
    print("batchwise: step", flush=True)
