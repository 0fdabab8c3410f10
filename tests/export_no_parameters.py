"""Writes a TorchScript module with no parameters (tests: batchwise must refuse it clearly)."""
import sys
import warnings

import torch


class Doubler(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) * 2


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.jit.save(torch.jit.script(Doubler()), sys.argv[1])
