"""Fashion-MNIST (Debian's dataset-fashion-mnist) as normalised float tensors, and batchwise's mlp
(784-512-256-10, ReLU), for the plain-PyTorch pilots beside the run race (paired_tolerance.py,
branched_runs.py)."""
import gzip

import numpy as np
import torch
import torch.nn as nn

FOLDER = "/usr/share/datasets/fashion-mnist"


def _idx(name, header):
    with gzip.open(f"{FOLDER}/{name}.gz") as f:
        return np.frombuffer(f.read()[header:], np.uint8)


def load():
    """(train inputs, train labels, test inputs, test labels), inputs normalised by the training mean and std."""
    xtr = torch.tensor(_idx("train-images-idx3-ubyte", 16).reshape(-1, 784), dtype=torch.float32) / 255
    ytr = torch.tensor(_idx("train-labels-idx1-ubyte", 8), dtype=torch.long)
    xte = torch.tensor(_idx("t10k-images-idx3-ubyte", 16).reshape(-1, 784), dtype=torch.float32) / 255
    yte = torch.tensor(_idx("t10k-labels-idx1-ubyte", 8), dtype=torch.long)
    m, s = xtr.mean(), xtr.std()
    return (xtr - m) / s, ytr, (xte - m) / s, yte


def mlp():
    """batchwise's mlp, from torch.manual_seed(0)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def epoch_batches(size, batch, steps, generator):
    """(step, the batch's sample indices) for steps 1 to `steps`: each epoch a fresh permutation of
    the `size` samples drawn from `generator`, taken in batches; an epoch's remainder is dropped."""
    order, at = torch.randperm(size, generator=generator), 0
    for step in range(1, steps + 1):
        if at + batch > size:
            order, at = torch.randperm(size, generator=generator), 0
        yield step, order[at:at + batch]
        at += batch
