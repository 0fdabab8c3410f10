#!/usr/bin/env python3
"""Keras 3's model.fit on Fashion-MNIST (Debian's files), tuned by batchwise through one callback.

    pip install ./python keras            # and torch, for Keras's torch backend
    KERAS_BACKEND=torch batchwise tune --cmd -- python examples/keras_fashion_mnist.py --batch-size {batch}

The only batchwise line is `callbacks=[BatchwiseCallback()]`: under batchwise it prints one
`batchwise: step` line per batch and stops fit after the steps batchwise asks for; run by itself the
script trains as it would without it. Any Keras backend works (KERAS_BACKEND: torch, tensorflow, jax).
"""
import argparse
import gzip
import os

import keras
import numpy as np

from batchwise.keras import BatchwiseCallback


def read_idx(path):
    """An IDX file (gzipped) as a uint8 array: Fashion-MNIST's images or labels."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[:4], "big")
    if magic not in (2049, 2051):
        raise SystemExit(f"{path}: expected magic 2049 or 2051, found {magic}")
    rank = magic & 0xff
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--width", type=int, default=32, help="channels of the first conv layer")
    parser.add_argument("--samples", type=int, default=60000, help="training images used (the first N)")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--without-batchwise", action="store_true", help="leave the callback out")
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    images = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))[:args.samples, :, :, None]
    labels = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))[:args.samples]
    w = args.width
    model = keras.Sequential([
        keras.Input((28, 28, 1)), keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(w, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(2 * w, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Flatten(), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(images, labels, batch_size=args.batch_size, epochs=args.epochs, verbose=0 if args.quiet else "auto",
                        callbacks=[] if args.without_batchwise else [BatchwiseCallback()])
    losses = history.history.get("loss") or []  # none where no step trained (epochs 0)
    print(f"trained {model.optimizer.iterations.numpy()} optimizer steps, loss {f'{losses[-1]:.6f}' if losses else '-'}")


if __name__ == "__main__":
    main()
