"""Stochastic depth (Huang et al. 2016), per sample, as used by DeiT and Swin."""

from __future__ import annotations

import torch
from torch import nn


def drop_path(x: torch.Tensor, drop_prob: float, training: bool) -> torch.Tensor:
    """Zero whole samples of a residual branch with probability ``drop_prob``, rescale the survivors."""
    if drop_prob == 0.0 or not training:
        return x
    keep = 1.0 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # one draw per sample
    mask = x.new_empty(shape).bernoulli_(keep)
    return x * mask / keep


class DropPath(nn.Module):
    def __init__(self, drop_prob: float = 0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return drop_path(x, self.drop_prob, self.training)

    def extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob}"
