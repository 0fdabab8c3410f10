"""Runs three steps, then kills itself with SIGKILL, for command_test.cpp."""
import os
import signal

for _ in range(3):
    print("batchwise: step samples=8")
os.kill(os.getpid(), signal.SIGKILL)
