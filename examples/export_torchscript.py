#!/usr/bin/env python3
"""Export a PyTorch model as TorchScript, so batchwise can train it from C++.

    python examples/export_torchscript.py --model resnet18 --num-classes 10 --out resnet18.pt
    batchwise tune --model resnet18.pt --input-shape 3x32x32 --dataset cifar10 --data-dir cifar-10-batches-bin --min 2
    python examples/export_torchscript.py --model mobilenet_v3_small --in-channels 1 --out mobilenet.pt
    batchwise tune --model mobilenet.pt                        # Fashion-MNIST's 1x28x28 images

Any torchvision classification model works by name; for your own model, replace build() below.
torch.jit.script keeps control flow; --trace records one forward pass at --input-shape instead
(for models that do not script). Either way, save with torch.jit.save and keep the model in
training mode with requires_grad on: a frozen (torch.jit.freeze) module has nothing to train.
"""
import argparse
import warnings

import torch


class RepeatChannels(torch.nn.Module):
    """Feeds a 1-channel image (Fashion-MNIST) to a model built for 3 (torchvision's)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.expand(-1, 3, -1, -1)


def build(name: str, num_classes: int, in_channels: int) -> torch.nn.Module:
    import torchvision  # only this example needs it

    model = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    if in_channels == 1:
        model = torch.nn.Sequential(RepeatChannels(), model)
    elif in_channels != 3:
        raise SystemExit(f"--in-channels {in_channels}: torchvision's models take 3 channels; 1 is repeated to 3")
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", help="a torchvision model name")
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--in-channels", type=int, default=3,
                        help="channels of the images it will train on: 3, or 1 (repeated to 3, e.g. Fashion-MNIST)")
    parser.add_argument("--out", required=True, help="where to write the TorchScript file")
    parser.add_argument("--trace", action="store_true", help="torch.jit.trace instead of torch.jit.script")
    parser.add_argument("--input-shape", default="3x32x32", help="one sample's shape, for --trace")
    args = parser.parse_args()

    model = build(args.model, args.num_classes, args.in_channels).train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated in favour of torch.export, but C++ trains only TorchScript
        if args.trace:
            shape = [int(d) for d in args.input_shape.split("x")]
            scripted = torch.jit.trace(model, torch.randn(2, *shape))
        else:
            scripted = torch.jit.script(model)
        torch.jit.save(scripted, args.out)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}: {args.model}, {params:,} parameters, {args.num_classes} classes")


if __name__ == "__main__":
    main()
