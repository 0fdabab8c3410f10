"""A fake trainer that speaks batchwise's line protocol (docs/cmd.md), for command_test.cpp."""
import argparse
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, required=True)
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--step-s", type=float, default=0.02, help="seconds each step sleeps")
parser.add_argument("--samples-per-s", type=float, help="also report this throughput")
parser.add_argument("--peak-bytes", type=int, help="also report this device peak")
parser.add_argument("--accumulate", type=int, default=1, help="each step trains this many batches")
parser.add_argument("--samples", type=int, help="each step trains this many samples, whatever the batch")
parser.add_argument("--ragged", type=int, help="every other step trains this many samples, in as long")
parser.add_argument("--loader-batch", type=int, help="step lines name this as their data loader's batch (batch=)")
parser.add_argument("--reporter", help="says a callback of this name reports, then trains --steps (0: none)")
parser.add_argument("--garbage", action="store_true", help="also print malformed protocol lines")
parser.add_argument("--stderr", action="store_true", help="protocol lines on stderr")
parser.add_argument("--quiet", action="store_true", help="no protocol lines at all")
parser.add_argument("--forever", action="store_true", help="train until stopped")
parser.add_argument("--kill-at", type=int, action="append", default=[],
                    help="at this batch size, kill itself with SIGKILL after one step")
parser.add_argument("--hang-at", type=int, action="append", default=[], help="at this batch size, hang after one step")
args = parser.parse_args()
if args.batch_size in args.kill_at + args.hang_at:
    import os
    import signal

    print(f"batchwise: step samples={args.batch_size}", flush=True)
    if args.batch_size in args.kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        time.sleep(60)
out = sys.stderr if args.stderr else sys.stdout

print(f"training at batch {args.batch_size} for {args.steps} steps")
if args.reporter:
    print(f"batchwise: reporter={args.reporter}", file=out, flush=True)
    if args.steps == 0:
        time.sleep(1.2)  # evaluation only: long enough for the wall-time fallback
step = 0
while args.forever or step < args.steps:
    short = args.ragged is not None and step % 2 == 1
    time.sleep(args.step_s)
    step += 1
    if args.garbage:
        print("batchwise: step samples=abc loss=nan? =5 step=", file=out)  # a step, samples ignored
        print("batchwise:", file=out)
        print("batchwise: samples_per_s=fast peak_bytes=-3 unknown=1", file=out)
        continue
    if not args.quiet:
        samples = args.samples if args.samples is not None else args.batch_size * args.accumulate
        samples = args.ragged if short else samples
        loader = f" batch={args.loader_batch}" if args.loader_batch else ""
        print(f"batchwise: step samples={samples}{loader} loss={1.0 / step:.4f}", file=out, flush=True)
if args.samples_per_s is not None:
    print(f"batchwise: samples_per_s={args.samples_per_s}", file=out)
if args.peak_bytes is not None:
    print(f"batchwise: peak_bytes={args.peak_bytes}", file=out)
