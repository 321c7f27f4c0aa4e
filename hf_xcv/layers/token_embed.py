"""Token embeddings, and the value checks of token inputs that stay out of compiled and exported graphs."""

from __future__ import annotations

import torch
from torch import nn


class ScaledEmbedding(nn.Embedding):
    """``nn.Embedding`` whose output is multiplied by ``embed_scale`` (sqrt(d_model) in the Transformer).

    The scale lives in the module, so ``get_input_embeddings()(ids)`` gives what the model adds positions to,
    and ``inputs_embeds=get_input_embeddings()(ids)`` equals ``input_ids=ids`` (as transformers' Bart and Marian
    do). ``resize_token_embeddings`` keeps the class; the state-dict key stays ``weight``.
    """

    def __init__(
        self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, embed_scale: float = 1.0
    ):
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx)
        self.embed_scale = embed_scale

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeddings = super().forward(input_ids)
        return embeddings if self.embed_scale == 1.0 else embeddings * self.embed_scale


def is_tracing() -> bool:
    """Inside torch.compile or torch.export, where a Python branch on tensor values is a data-dependent guard."""
    return torch.compiler.is_compiling()


def check_range(values: torch.Tensor, low: int, high: int, what: str, meaning: str) -> None:
    """ValueError ``"{what} must lie in [low, high) ({meaning}), got values from a to b"`` when some value lies
    outside [low, high).

    On the CPU that is a plain check. On an accelerator it is a device-side assertion (``torch._assert_async``),
    so that no decoding step waits for the device to report the values (its message cannot show them). While
    compiling or exporting it is left out: a traced graph cannot branch on values, and the eager call checks.
    """
    if values.numel() == 0 or is_tracing():
        return
    if values.device.type != "cpu":
        inside = ((values >= low) & (values < high)).all()
        torch._assert_async(inside, f"{what} must lie in [{low}, {high}) ({meaning})")
        return
    smallest, largest = values.min().item(), values.max().item()
    if smallest < low or largest >= high:
        raise ValueError(f"{what} must lie in [{low}, {high}) ({meaning}), got values from {smallest} to {largest}")
