"""``full``: plain softmax attention, computed by transformers' attention interface.

The backend follows ``config._attn_implementation`` of the owning layer (``sdpa`` by default,
``eager``, ``flash_attention_*``, ``flex_attention`` where installed), so ``attn_implementation=`` and
``model.set_attn_implementation(...)`` keep working. ``eager`` is this module's own implementation and is
also the dense reference the other registry entries are tested against.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .registry import AttentionCore, AttentionOutput, Capabilities, register_attention

# Backends that take a dense (batch, heads, q_len, kv_len) mask.
_DENSE_MASK_BACKENDS = ("eager", "sdpa")


def causal_keep_mask(q_len: int, kv_len: int, device: torch.device | None = None) -> torch.Tensor:
    """(q_len, kv_len) boolean mask, True where query i may see key j; queries align with the *last* keys.

    With kv_len > q_len (keys include earlier context), query i sits at absolute position
    ``kv_len - q_len + i``.
    """
    offset = kv_len - q_len
    rows = torch.arange(q_len, device=device)[:, None] + offset
    return torch.arange(kv_len, device=device)[None, :] <= rows


def check_keep_mask(attention_mask: torch.Tensor | None) -> None:
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        raise ValueError(
            f"attention_mask must be a boolean keep mask (True = attend), got dtype {attention_mask.dtype}"
        )


def merge_masks(
    attention_mask: torch.Tensor | None, causal: bool, q_len: int, kv_len: int, device
) -> torch.Tensor | None:
    """Combine a boolean keep mask with the causal pattern; None when nothing is masked."""
    check_keep_mask(attention_mask)
    if not causal:
        return attention_mask
    tri = causal_keep_mask(q_len, kv_len, device)
    return tri if attention_mask is None else attention_mask & tri


def masked_softmax(scores: torch.Tensor, keep: torch.Tensor | None, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` where ``keep`` is False counts as absent; a row with no kept entry gives zeros.

    Computed in at least float32 (float64 for float64 inputs), returned in the dtype of ``scores``.
    """
    if keep is not None:
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=dim, dtype=torch.promote_types(scores.dtype, torch.float32)).to(scores.dtype)
    if keep is not None:
        probs = probs * keep.any(dim=dim, keepdim=True)
    return probs


def dense_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    keep: torch.Tensor | None = None,
    scaling: float | None = None,
    dropout: float = 0.0,
    training: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scaling + mask) v on (B, H, L, D) tensors; fully masked query rows give zeros.

    Returns the values (B, H, Lq, D) and the probabilities (B, H, Lq, Lk).
    """
    scaling = q.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling  # (B, H, Lq, Lk)
    # At least float32 (half precision overflows); a row with no key to attend gives zeros, not a uniform row.
    probs = masked_softmax(scores, keep)
    probs = nn.functional.dropout(probs, p=dropout, training=training)
    return torch.matmul(probs, v), probs


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' attention-interface signature; output transposed to (B, Lq, H, D) like the others."""
    keep = merge_masks(attention_mask, bool(is_causal), query.shape[2], key.shape[2], query.device)
    values, probs = dense_attention(query, key, value, keep, scaling, dropout, training=module.training)
    return values.transpose(1, 2), probs


@register_attention
class FullAttention(AttentionCore):
    """Exact softmax attention over every key, through transformers' attention interface."""

    name = "full"
    capabilities = Capabilities(padding_mask=True, causal=True, cross_attention=True, returns_weights=True)

    def __init__(self, num_heads: int, head_dim: int):
        super().__init__(num_heads, head_dim)
        self.is_causal = False  # read by transformers' backends when `is_causal` is not passed

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {}

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        causal: bool = False,
        grid: tuple[int, int] | None = None,
        state: Any = None,
        *,
        dropout: float = 0.0,
        scaling: float | None = None,
        output_weights: bool = False,
        module: nn.Module | None = None,
        prefix_tokens: int = 0,
    ) -> AttentionOutput:
        """``module`` is the owning attention layer: its ``config._attn_implementation`` picks the backend."""
        check_keep_mask(attention_mask)
        module = self if module is None else module
        config = getattr(module, "config", None)
        implementation = getattr(config, "_attn_implementation", None) or "sdpa"
        if output_weights:
            implementation = "eager"  # only eager materialises the probabilities
        if attention_mask is not None and implementation not in _DENSE_MASK_BACKENDS:
            raise ValueError(
                f"attn_implementation={implementation!r} takes no dense attention mask here; use 'sdpa' or 'eager'"
            )
        if causal and q.shape[2] == 1:
            causal = False  # one query aligned with the last key sees every key: no mask (the decoding step)
        if implementation == "eager":
            backend = eager_attention_forward
        else:
            backend = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
            if implementation == "sdpa" and causal and (attention_mask is not None or q.shape[2] != k.shape[2]):
                # sdpa's own causal flag aligns queries with the first keys; spell the mask out instead.
                attention_mask = merge_masks(attention_mask, True, q.shape[2], k.shape[2], q.device)
                causal = False
        values, weights = backend(module, q, k, v, attention_mask, scaling=scaling, dropout=dropout, is_causal=causal)
        # Backends return (B, Lq, H, D); the seam's layout is (B, H, Lq, D).
        return AttentionOutput(values.transpose(1, 2), weights if output_weights else None, None)
