#!/usr/bin/env python3
"""A Lightning Trainer on Fashion-MNIST (Debian's files), tuned by batchwise through one callback.

    pip install ./python lightning
    batchwise tune --cmd -- python examples/lightning_fashion_mnist.py --batch-size {batch}

The only batchwise line is `callbacks=[BatchwiseCallback()]`: under batchwise it prints one
`batchwise: step` line per optimizer step (with --accumulate k, each covers k batches) and stops the
Trainer after the steps batchwise asks for; run by itself the script trains as it would without it.
"""
import argparse
import gzip
import os
import struct

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from batchwise.lightning import BatchwiseCallback


def read_idx(path):
    """An IDX file (gzipped) as a uint8 tensor: Fashion-MNIST's images or labels."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">i", data[:4])
    if magic not in (2049, 2051):
        raise SystemExit(f"{path}: expected magic 2049 or 2051, found {magic}")
    dims = struct.unpack(f">{magic & 0xff}i", data[4:4 + 4 * (magic & 0xff)])
    return torch.frombuffer(bytearray(data[4 + 4 * len(dims):]), dtype=torch.uint8).reshape(dims)


class Classifier(L.LightningModule):
    """A small conv net; `width` channels in its first layer (memory per sample grows with it)."""

    def __init__(self, width, lr):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(2 * width * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = nn.functional.cross_entropy(self.net(images.unsqueeze(1).float() / 255), labels.long())
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=-1, help="optimizer steps at most (-1: the epochs decide)")
    parser.add_argument("--accumulate", type=int, default=1, help="batches accumulated into each optimizer step")
    parser.add_argument("--width", type=int, default=32, help="channels of the first conv layer")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no model summary")
    parser.add_argument("--without-batchwise", action="store_true", help="leave the callback out")
    args = parser.parse_args()

    L.seed_everything(0)
    images = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch_size, shuffle=True)
    trainer = L.Trainer(
        max_epochs=args.epochs, max_steps=args.max_steps, accumulate_grad_batches=args.accumulate,
        accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=not args.quiet, enable_model_summary=not args.quiet,
        callbacks=[] if args.without_batchwise else [BatchwiseCallback()])
    model = Classifier(args.width, args.lr)
    trainer.fit(model, loader)
    loss = trainer.callback_metrics.get("train_loss")  # none where no step trained (max_steps 0)
    print(f"trained {trainer.global_step} optimizer steps, last loss {'-' if loss is None else f'{float(loss):.6f}'}")


if __name__ == "__main__":
    main()
