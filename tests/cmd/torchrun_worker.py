"""One rank under `torchrun --nproc-per-node 2 --standalone` (CPU, gloo): holds --mib MiB, writes its
pid into --pid-dir, all-reduces a tensor per step (rank 0 prints the step lines), then trains on
until it is stopped: for command_test.cpp (every rank's memory is the run's, and every rank is gone
after it)."""
import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--mib", type=int, default=300)
parser.add_argument("--pid-dir", required=True)
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
data = bytearray(os.urandom(1 << 20)) * args.mib  # touched: resident
with open(os.path.join(args.pid_dir, f"rank{rank}.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(args.pid_dir, f"rank{rank}.tmp"), os.path.join(args.pid_dir, f"rank{rank}"))
batch = int(os.environ.get("BATCHWISE_BATCH", "1"))
step = 0
while True:
    t = torch.ones(1024)
    dist.all_reduce(t)
    time.sleep(0.15)
    step += 1
    if rank == 0 and step <= args.steps:
        print(f"batchwise: step samples={batch * world}", flush=True)
