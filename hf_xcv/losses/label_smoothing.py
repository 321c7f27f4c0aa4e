"""Label-smoothed cross-entropy (Szegedy et al. 2016), as the Transformer paper trains with it (Section 5.4)."""

from __future__ import annotations

import torch
from torch import nn


def label_smoothed_loss(
    logits: torch.Tensor, labels: torch.Tensor, smoothing: float, num_items_in_batch: int | torch.Tensor | None = None
) -> torch.Tensor:
    """Cross-entropy with label smoothing over (B, T, V) logits; labels of -100 are ignored.

    With smoothing e the target puts 1 - e on the label and e spread uniformly over the whole vocabulary
    (PyTorch's definition). The sum is divided by ``num_items_in_batch`` when given (the token count across
    gradient-accumulation steps, from Trainer), else by the number of labelled tokens.
    """
    vocab = logits.shape[-1]
    total = nn.functional.cross_entropy(
        logits.reshape(-1, vocab).float(),
        labels.reshape(-1),
        ignore_index=-100,
        label_smoothing=smoothing,
        reduction="sum",
    )
    count = num_items_in_batch if num_items_in_batch is not None else (labels != -100).sum().clamp(min=1)
    return total / count
