"""Leaves a grandchild behind that holds stdout open, then exits 0, for command_test.cpp."""
import subprocess

child = subprocess.Popen(["sleep", "60"])
print(f"grandchild: {child.pid}")
for _ in range(3):
    print("batchwise: step samples=4")
