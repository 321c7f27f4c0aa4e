"""Optimiser parameter groups of the original recipes (ViT/DeiT and Swin), for the scripts and for ``Trainer``."""

from __future__ import annotations

from typing import Any

from torch import nn

# Parameters the original recipes exempt from weight decay besides biases and norms (every 1-D tensor): DeiT's
# ``no_weight_decay`` (cls_token, pos_embed) and Swin's (absolute_pos_embed, relative_position_bias_table).
NO_WEIGHT_DECAY = ("cls_token", "position_embeddings", "relative_position_bias_table")


def decays(name: str, param: nn.Parameter, no_weight_decay: tuple[str, ...] = NO_WEIGHT_DECAY) -> bool:
    """Whether the recipes decay this parameter: not biases, norms (1-D), nor a name ending in one of
    ``no_weight_decay`` (tokens, positions, bias tables)."""
    return param.ndim > 1 and not name.endswith(tuple(no_weight_decay))


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two AdamW groups of the trainable parameters: with ``weight_decay`` and without (see :func:`decays`).

    With transformers' Trainer: ``Trainer(..., optimizers=(torch.optim.AdamW(parameter_groups(model, 0.05),
    lr=...), None))``. With layer-wise learning-rate decay as well: :func:`~.layer_decay.layer_decay_parameter_groups`.
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [
        {"params": [p for n, p in named if decays(n, p)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0},
    ]
