"""Feed-forward blocks."""

from __future__ import annotations

import torch
from torch import nn
from transformers.activations import ACT2FN


class Mlp(nn.Module):
    """Linear -> activation -> dropout -> Linear -> dropout, the transformer feed-forward block.

    ``dropout`` follows the activation; ``out_dropout`` (default: the same) follows the second Linear.
    Models whose residual branch applies its own dropout pass ``out_dropout=0``.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        out_features: int | None = None,
        act: str = "gelu",
        dropout: float = 0.0,
        bias: bool = True,
        out_dropout: float | None = None,
    ):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = ACT2FN[act]
        self.fc2 = nn.Linear(hidden_features, out_features or in_features, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.out_dropout = nn.Dropout(dropout if out_dropout is None else out_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_dropout(self.fc2(self.dropout(self.act(self.fc1(x)))))
