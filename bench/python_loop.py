"""The plain PyTorch training loop a user would write, for batchwise's side-by-side benchmark.

Same models, data, sampler, optimizer and loss as batchwise's built-in workloads (mlp, lenet on
Fashion-MNIST, SGD momentum 0.9, lr 0.01, cross-entropy). Batches are gathered by tensor indexing
(the fast path a careful user writes), not a per-sample DataLoader. Prints one JSON object.
On CUDA the images stay in host memory, as batchwise keeps them: each batch is gathered there,
copied to the device and normalised there, and `loss.item()` ends every step (the synchronisation a
loop that logs its loss has).

    python bench/python_loop.py --model lenet --batch 128 --warmup 5 --steps 30 --threads 2
    python bench/python_loop.py --model lenet --batch 4096 --device cuda
"""
import argparse
import gzip
import json
import statistics
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    dims = [struct.unpack(">I", data[4 + 4 * i: 8 + 4 * i])[0] for i in range(magic & 0xFF)]
    offset = 4 + 4 * len(dims)
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims).copy())


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                             nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    if name == "resnet18":
        # batchwise's resnet18: torchvision's topology with the CIFAR-style stem small images need
        # (3x3 convolution, stride 1, no max-pool), one input channel.
        import torchvision
        m = torchvision.models.resnet18(num_classes=10)
        m.conv1 = nn.Conv2d(1, 64, 3, stride=1, padding=1, bias=False)
        m.maxpool = nn.Identity()
        return m
    raise SystemExit(f"unknown model {name}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="lenet")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--data-dir", default=DATA, help="Fashion-MNIST's IDX files")
    p.add_argument("--float-data", action="store_true",
                   help="normalise the images to float32 once and gather float batches (the data as "
                        "batchwise's in-process API holds it: bench/inprocess.py)")
    a = p.parse_args()
    device = torch.device(a.device)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    images = read_idx(f"{a.data_dir}/train-images-idx3-ubyte.gz").unsqueeze(1)
    labels = read_idx(f"{a.data_dir}/train-labels-idx1-ubyte.gz").long()
    if a.float_data:
        images = images.float().div_(255.0).sub_(0.2860).div_(0.3530)
    model = make_model(a.model).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(a.seed)
    n = images.shape[0]
    order, cursor = torch.randperm(n, generator=gen), 0
    times = []
    for step in range(a.warmup + a.steps):
        start = time.perf_counter()
        if cursor + a.batch > n:
            order, cursor = torch.randperm(n, generator=gen), 0
        idx = order[cursor:cursor + a.batch]
        cursor += a.batch
        x = images.index_select(0, idx).to(device)
        if not a.float_data:
            x = x.float().div_(255.0).sub_(0.2860).div_(0.3530)
        y = labels.index_select(0, idx).to(device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(json.dumps({"model": a.model, "batch": a.batch, "samples_per_s": a.batch / median,
                      "step_times_s": times, "torch_version": torch.__version__, "threads": torch.get_num_threads(),
                      "device": str(device)}))


if __name__ == "__main__":
    main()
