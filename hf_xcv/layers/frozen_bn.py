"""Frozen batch normalisation: the affine map of a trained BatchNorm with its statistics as buffers."""

from __future__ import annotations

import torch
from torch import nn


class FrozenBatchNorm2d(nn.Module):
    """BatchNorm2d with fixed statistics and affine parameters, all buffers (no gradient, no running update).

    The detectors of this family fine-tune ImageNet backbones at batch sizes of 2-4 per device, where batch
    statistics are useless; the original DETR freezes every BatchNorm so. The state-dict keys are BatchNorm's
    (``weight``, ``bias``, ``running_mean``, ``running_var``), so BatchNorm checkpoints load unchanged.
    """

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # eps inside the rsqrt, as torchvision's FrozenBatchNorm2d, and the affine folded into one scale/shift.
        scale = self.weight * (self.running_var + self.eps).rsqrt()  # (C,)
        shift = self.bias - self.running_mean * scale
        return x * scale.to(x.dtype)[None, :, None, None] + shift.to(x.dtype)[None, :, None, None]

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"


def freeze_batch_norms(module: nn.Module) -> nn.Module:
    """Replace every ``nn.BatchNorm2d`` below ``module`` (in place) by a :class:`FrozenBatchNorm2d` holding its
    current statistics and affine parameters; returns ``module``."""
    for name, child in list(module.named_children()):
        if isinstance(child, nn.BatchNorm2d):
            frozen = FrozenBatchNorm2d(child.num_features, child.eps)
            with torch.no_grad():
                if child.affine:
                    frozen.weight.copy_(child.weight)
                    frozen.bias.copy_(child.bias)
                if child.track_running_stats and child.running_mean is not None:
                    frozen.running_mean.copy_(child.running_mean)
                    frozen.running_var.copy_(child.running_var)
            frozen.to(device=child.running_mean.device if child.running_mean is not None else None)
            setattr(module, name, frozen)
        else:
            freeze_batch_norms(child)
    return module
