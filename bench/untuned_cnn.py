"""A workload the advice was not tuned on: a small BatchNorm CNN with dropout, exported as TorchScript,
on Fashion-MNIST pooled to 14x14 (10,000 training images and 2,000 test images, fixed subsets), saved
as .npy for `--dataset npy`. docs/benchmarks.md, "A workload not tuned on".

    /opt/batchwise-venv/bin/python bench/untuned_cnn.py OUT_DIR
    W="--model OUT_DIR/cnn_dropout.pt --dataset npy --data-file OUT_DIR/train_x.npy \
       --labels-file OUT_DIR/train_y.npy --test-data-file OUT_DIR/test_x.npy --test-labels-file OUT_DIR/test_y.npy"
    build/batchwise tune $W --epochs 20 --lr-schedule cosine --seed 0 --no-history --json tune.json
    build/batchwise validate $W --batch-sizes 32,64,128,256,512 --epochs 20 --lr-schedule cosine --seed S \
        --no-history --json val_sS.json     # S = 0, 1, 2
"""
import gzip
import os
import sys

import numpy as np
import torch
from torch import nn

SOURCE = "/usr/share/datasets/fashion-mnist"


def read(name, header, shape):
    with gzip.open(os.path.join(SOURCE, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=header).reshape(shape)


def pooled(images):
    """28x28 bytes to 1x14x14 float32: 2x2 average pooling, normalised."""
    x = images.astype(np.float32) / 255.0
    x = x.reshape(-1, 14, 2, 14, 2).mean(axis=(2, 4))
    return np.ascontiguousarray(((x - 0.286) / 0.353).reshape(-1, 1, 14, 14).astype(np.float32))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Flatten(), nn.Dropout(0.25), nn.Linear(32 * 3 * 3, 64), nn.ReLU(), nn.Dropout(0.25),
                               nn.Linear(64, 10))

    def forward(self, x):
        return self.f(x)


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1234)
    train_x = read("train-images-idx3-ubyte.gz", 16, (-1, 28, 28))
    train_y = read("train-labels-idx1-ubyte.gz", 8, (-1,))
    test_x = read("t10k-images-idx3-ubyte.gz", 16, (-1, 28, 28))
    test_y = read("t10k-labels-idx1-ubyte.gz", 8, (-1,))
    train = rng.permutation(len(train_x))[:10000]
    test = rng.permutation(len(test_x))[:2000]
    np.save(os.path.join(out, "train_x.npy"), pooled(train_x[train]))
    np.save(os.path.join(out, "train_y.npy"), train_y[train].astype(np.int64))
    np.save(os.path.join(out, "test_x.npy"), pooled(test_x[test]))
    np.save(os.path.join(out, "test_y.npy"), test_y[test].astype(np.int64))
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(Net().train()), os.path.join(out, "cnn_dropout.pt"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench-results/untuned-cnn")
