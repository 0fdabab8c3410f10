"""Runs one step, then hangs (with --ignore-term, deaf to SIGTERM too), for command_test.cpp."""
import signal
import sys
import time

if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("batchwise: step samples=8")
while True:
    time.sleep(60)
