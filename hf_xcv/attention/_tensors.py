"""Tensor plumbing the entries share: padding to a block multiple."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pad_to_multiple(x: torch.Tensor, multiple: int, dim: int = 2, value: float = 0.0) -> tuple[torch.Tensor, int]:
    """Pad ``x`` at the end of ``dim`` so its size is a multiple of ``multiple``; returns (x, amount added)."""
    extra = -x.shape[dim] % multiple
    if extra == 0:
        return x, 0
    pad = [0, 0] * (x.dim() - 1 - dim % x.dim()) + [0, extra]
    return F.pad(x, pad, value=value), extra
