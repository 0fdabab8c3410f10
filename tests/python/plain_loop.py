"""A plain PyTorch loop with the batchwise helper: it trains until batchwise.step() says the steps
batchwise asked for are done (and forever without batchwise: run it only under batchwise or with
--steps). For tests/python/protocol_test.py:

    batchwise sweep --cmd -- python tests/python/plain_loop.py --batch-size {batch}
"""
import argparse
import itertools

import torch
from torch import nn

import batchwise


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=None, help="steps when not run by batchwise (default: no end)")
    args = parser.parse_args()

    torch.manual_seed(0)
    # Steps of some milliseconds: batchwise times a step line when it reads it, and lines that
    # arrive in one read (sub-millisecond steps) would share a time.
    model = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = batchwise.steps(args.steps)
    for step in itertools.count(1):
        x = torch.randn(args.batch_size, 64)
        y = (x[:, :10].argmax(dim=1))
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if batchwise.step(samples=len(x), loss=loss) or (steps is not None and step >= steps):
            break
    batchwise.peak()


if __name__ == "__main__":
    main()
