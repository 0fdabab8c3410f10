"""Writes its pid to argv[1], prints one step, then hangs: for the interrupted-batchwise test."""
import os
import sys
import time

with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
print("batchwise: step samples=1", flush=True)
while True:
    time.sleep(60)
