"""Masks, masked softmax and the additive bias, shared by the entries: the causal pattern, merging masks,
a softmax that gives zeros for rows with nothing to attend, dense softmax attention (the reference every
entry is tested against) and reading the bias at the (query, key) pairs a blocked entry scores."""

from __future__ import annotations

import torch
from torch import nn


def causal_keep_mask(q_len: int, kv_len: int, device: torch.device | None = None) -> torch.Tensor:
    """(q_len, kv_len) boolean mask, True where query i may see key j; queries align with the *last* keys.

    With kv_len > q_len (keys include earlier context), query i sits at absolute position
    ``kv_len - q_len + i``.
    """
    offset = kv_len - q_len
    rows = torch.arange(q_len, device=device)[:, None] + offset
    return torch.arange(kv_len, device=device)[None, :] <= rows


def merge_masks(
    attention_mask: torch.Tensor | None, causal: bool, q_len: int, kv_len: int, device
) -> torch.Tensor | None:
    """Combine a boolean keep mask with the causal pattern; None when nothing is masked."""
    if not causal:
        return attention_mask
    tri = causal_keep_mask(q_len, kv_len, device)
    return tri if attention_mask is None else attention_mask & tri


def masked_softmax(
    scores: torch.Tensor, keep: torch.Tensor | None, dim: int = -1, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Softmax over ``dim`` of ``scores + bias`` where ``keep`` is False counts as absent; a row with no kept
    entry gives zeros.

    Computed in at least float32 (float64 for float64 inputs), returned in the dtype of ``scores``.
    """
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    if keep is not None:
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=dim, dtype=torch.promote_types(scores.dtype, torch.float32)).to(scores.dtype)
    if keep is not None:
        probs = probs * keep.any(dim=dim, keepdim=True)
    return probs


def lean_masked_softmax(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """:func:`masked_softmax` for a fresh scores tensor it may overwrite: masks in place, and zeroes rows
    with nothing to attend only when there are such rows (each skipped pass saves a scores-sized tensor)."""
    scores = scores.masked_fill_(~keep, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(scores.dtype)
    anything = keep.any(dim=-1, keepdim=True)  # no heads dimension: cheap
    if not torch.compiler.is_compiling() and bool(anything.all()):  # a compiled graph cannot branch on values
        return probs
    return probs.masked_fill(~anything, 0.0)


def dense_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    keep: torch.Tensor | None = None,
    scaling: float | None = None,
    dropout: float = 0.0,
    training: bool = False,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scaling + bias, masked by ``keep``) v on (B, H, L, D) tensors; fully masked query rows
    give zeros.

    Returns the values (B, H, Lq, D) and the probabilities (B, H, Lq, Lk).
    """
    scaling = q.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling  # (B, H, Lq, Lk)
    # At least float32 (half precision overflows); a row with no key to attend gives zeros, not a uniform row.
    probs = masked_softmax(scores, keep, bias=bias)
    probs = nn.functional.dropout(probs, p=dropout, training=training)
    return torch.matmul(probs, v), probs


def key_keep_rows(key_keep: torch.Tensor | None) -> torch.Tensor | None:
    """A (B, Lk) key padding mask as a (B, 1, 1, Lk) keep mask for dense scores, or None."""
    return None if key_keep is None else key_keep[:, None, None, :]


def bias_at(bias: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The bias (B', H', Lq', Lk') at query indices ``rows`` and key indices ``cols`` (broadcast together):
    (B', H', *shape). A size-1 dimension of the bias broadcasts; indices outside it (empty slots, which the
    caller masks) read its edge."""
    rows = rows.clamp(0, bias.shape[2] - 1)
    cols = cols.clamp(0, bias.shape[3] - 1)
    return bias[:, :, rows, cols]


def bias_per_head(bias: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """:func:`bias_at` for indices that differ by batch row and head: ``rows`` and ``cols`` lead with
    (B, H) (and broadcast together after them). Returns (B, H, *rest)."""
    batch, heads = torch.broadcast_shapes(rows.shape[:2], cols.shape[:2])
    extra = max(rows.dim(), cols.dim()) - 2
    bias = bias.expand(batch, heads, *bias.shape[2:])
    b = torch.arange(batch, device=bias.device).view(batch, 1, *([1] * extra))
    h = torch.arange(heads, device=bias.device).view(1, heads, *([1] * extra))
    return bias[b, h, rows.clamp(0, bias.shape[2] - 1), cols.clamp(0, bias.shape[3] - 1)]
