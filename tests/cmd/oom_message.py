"""Runs two steps, then fails the way PyTorch's CPU allocator does, for command_test.cpp."""
import sys

for _ in range(2):
    print("batchwise: step samples=64")
print("Traceback (most recent call last):", file=sys.stderr)
print('  File "train.py", line 12, in <module>', file=sys.stderr)
print("RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes. "
      "Error code 12 (Cannot allocate memory)", file=sys.stderr)
sys.exit(1)
