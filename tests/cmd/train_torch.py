"""A real PyTorch training loop that speaks batchwise's line protocol (docs/cmd.md): a small conv net
on synthetic 28x28 images, cross-entropy, SGD with momentum. For the CLI tests of `--cmd`:

  batchwise tune --cmd -- python tests/cmd/train_torch.py --batch-size={batch} --steps={steps}
"""
import argparse
import time

import torch
from torch import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--width", type=int, default=16, help="channels of the first conv layer")
    parser.add_argument("--report-throughput", action="store_true",
                        help="also print the script's own samples_per_s, from its steps after the first two")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    w = args.width
    model = nn.Sequential(
        nn.Conv2d(1, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * w * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # A fixed synthetic dataset with a learnable rule (the class is the brightest of ten bands), so
    # the loss falls.
    images = torch.rand(args.batch_size, 1, 28, 28, device=device)
    bands = images[:, 0, :, :20].reshape(args.batch_size, 28, 10, 2).mean(dim=(1, 3))
    labels = bands.argmax(dim=1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    times = []
    for step in range(args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        value = loss.item()  # waits for the device, so the line marks the step's real end
        times.append(time.perf_counter() - start)
        print(f"batchwise: step samples={args.batch_size} loss={value:.6g}", flush=True)
    if args.report_throughput and len(times) > 2:
        print(f"batchwise: samples_per_s={args.batch_size * (len(times) - 2) / sum(times[2:]):.6g}", flush=True)
    if device.type == "cuda":
        print(f"batchwise: peak_bytes={torch.cuda.max_memory_reserved(device)}", flush=True)


if __name__ == "__main__":
    main()
