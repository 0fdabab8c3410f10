"""Writes a TorchScript model that the probe of a --model file must refuse, by its cause (tests): `detached`
returns an output that needs no gradient; `two-outputs` a [N, 2] output of 4 features, which mse would broadcast
against [N] or [N, 1] targets; `float64` parameters of another type than the data's; `two-inputs` a forward of two
tensors; `raises-above-40` a model that raises on a batch of more than 40 samples, which the probe's two pass.
Usage: export_probe_models.py KIND OUT."""
import sys
import warnings

import torch


class Detached(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1)).detach()


class TwoOutputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(28 * 28, 10)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1)) + y


class RaisesAbove40(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.size(0) > 40:
            raise RuntimeError("batch too large for this model")
        return self.fc(x.flatten(1))


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


kinds = {"detached": Detached, "two-outputs": TwoOutputs, "two-inputs": TwoInputs,
         "float64": lambda: Linear().double(), "raises-above-40": RaisesAbove40}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.jit.save(torch.jit.script(kinds[sys.argv[1]]()), sys.argv[2])
