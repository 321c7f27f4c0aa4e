"""Building blocks of DETR-style detectors (DETR, Deformable DETR, and any detector after them): the post-norm
transformer block, the MLP box head, box references in logit space, padding masks on feature maps, and the
backbone stages a detector freezes or dilates."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers.modeling_layers import GradientCheckpointingLayer

from .mlp import Mlp


class DetectionBlock(GradientCheckpointingLayer):
    """What a detector's encoder and decoder layers share: post-norm residual branches (``norm(x + dropout(f(x)))``)
    and the feed-forward block (Linear -> activation -> dropout -> Linear), as the original DETR's."""

    def __init__(self, d_model: int, ffn_dim: int, activation: str, dropout: float, activation_dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        # Linear -> activation -> dropout -> Linear; the branch's own dropout follows (self.dropout).
        self.mlp = Mlp(d_model, ffn_dim, act=activation, dropout=activation_dropout, out_dropout=0.0)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def residual(self, x: torch.Tensor, branch: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        return norm(x + self.dropout(branch))

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.residual(x, self.mlp(x), self.final_layer_norm)


class MLPPredictionHead(nn.Module):
    """The box head: ``num_layers`` Linear layers with ReLU between them (the original DETR's ``MLP``)."""

    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, num_layers: int):
        super().__init__()
        dims = [input_dim] + [hidden_dim] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:] + [output_dim]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            x = layer(x) if index == len(self.layers) - 1 else F.relu(layer(x))
        return x


def inverse_sigmoid(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """log(x / (1 - x)) with x clamped to [eps, 1 - eps] (Deformable DETR's)."""
    x = x.clamp(0, 1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


def resample_mask(valid: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The (B, H, W) valid mask of the pixels on a (h, w) feature map, by nearest neighbour (the original's)."""
    return F.interpolate(valid[:, None].float(), size=tuple(size)).to(torch.bool)[:, 0]


def backbone_stages(backbone: nn.Module) -> list[nn.Module]:
    """The stem and then each stage of a backbone, in order (its ``stage_names``): what a detector's
    ``frozen_backbone_stages`` counts. A backbone declares them with a ``stage_modules()`` method (hf_xcv's Swin
    does); transformers' ResNet, which has none, is read by its own layout."""
    if hasattr(backbone, "stage_modules"):
        return list(backbone.stage_modules())
    from transformers import ResNetBackbone

    if isinstance(backbone, ResNetBackbone):
        return [backbone.embedder, *backbone.encoder.stages]
    raise ValueError(
        f"{type(backbone).__name__} declares no stages (a stage_modules() method returning the stem and each stage): "
        "a detector cannot freeze its first stages"
    )


def dilate_last_stage(backbone: nn.Module) -> None:
    """DC5: the last ResNet stage keeps the stride of the one before, its later 3x3 convolutions dilated by 2
    (torchvision's ``replace_stride_with_dilation=[False, False, True]``, which the original DETR-DC5 uses).
    The weights are unchanged: a ResNet checkpoint loads as it is."""
    stage = backbone.encoder.stages[-1]
    for index, layer in enumerate(stage.layers):
        for conv in (m for m in layer.modules() if isinstance(m, nn.Conv2d)):
            if index == 0:
                conv.stride = (1, 1)  # the first block's strided conv and its strided shortcut
            elif conv.kernel_size == (3, 3):
                conv.dilation, conv.padding = (2, 2), (2, 2)
