"""Prints its arguments and batchwise's environment variables, one per line, for command_test.cpp."""
import os
import sys

for arg in sys.argv[1:]:
    print(f"arg: {arg}")
for name in ("BATCHWISE_BATCH", "BATCHWISE_STEPS", "PYTHONUNBUFFERED", "BATCHWISE_TEST_EXTRA"):
    print(f"env: {name}={os.environ.get(name, '')}")
print(f"stdin: {sys.stdin.read()!r}")
