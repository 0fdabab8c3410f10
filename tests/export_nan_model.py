"""Writes a TorchScript classifier whose outputs are NaN (tests: a loss that is not a number trains
nothing, and batchwise must say so rather than measure it)."""
import sys
import warnings

import torch


class NanNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1)) * float("nan")


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.jit.save(torch.jit.script(NanNet()), sys.argv[1])
