"""``longformer``: sliding-window attention with dilation and global tokens (Beltagy et al. 2020).

With one-sided width w = ``attention_window`` / 2 and dilation d, query i sees key j iff

* window: |i - j| <= w * d and (i - j) mod d = 0 (causal: 0 <= i - j <= w * d, the window to the left), or
* global: i or j is a global token. Global tokens attend to every key, and every token attends to them,
  under one softmax per query; a global key inside a window is counted once (it belongs to the global part).

``attention_window`` follows transformers' ``LongformerConfig.attention_window``: the full window 2w
(even), so w keys on each side; causal, the window is the w keys to the left (and the token itself).

Global tokens are the ``prefix_tokens`` (ViT's [CLS]) followed by the first ``num_global_tokens`` tokens
after them; causal, they still see only earlier keys and are seen only by later queries.

Implementation: the tokens after the prefix are split into d interleaved subsequences (positions with the
same residue mod d), where the dilated window is a plain window of w; each subsequence is cut into blocks
of w queries that see their own block and the neighbouring ones (only the previous one when causal), about
3w scores per query instead of L. Global rows and columns are two thin extra parts; see
:func:`sparse.sparse_attention`. Lengths are padded to a multiple of w * d internally.

Deviation from the paper: the paper gives global attention its own projections (Q_g, K_g, V_g). A registry
core receives already projected q, k, v, so global rows use the layer's projections; this equals the paper's
model with the global projections tied to the local ones. The paper's per-head dilation (dilated windows on
some heads only) is not offered: ``dilation`` applies to every head.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import register_attention
from .sparse import (
    SPARSE_CAPABILITIES,
    KeySet,
    SparsePattern,
    SparsePatternAttention,
    check_int,
    make_pattern,
    neighbour_positions,
    positions_after_prefix,
    shift_body,
)


def window_pattern(
    length: int, prefix_tokens: int, window: int, dilation: int, num_global: int, causal: bool, device
) -> SparsePattern:
    """The pattern of a dilated sliding window of one-sided width ``window`` over the tokens after the prefix,
    with the prefix and the first ``num_global`` tokens after it global (shared with ``etc``)."""
    body = length - prefix_tokens
    block = max(window, 1)  # queries per block; radius 0 still needs one
    sub_blocks = -(-body // (block * dilation))  # blocks per subsequence
    # Subsequence s holds positions s, s + d, s + 2d, ...; t is the index within the subsequence.
    t_query = torch.arange(sub_blocks * block, device=device).view(sub_blocks, block)  # (N, w)
    t_key = neighbour_positions(sub_blocks, block, 1, 0 if causal else 1, device)  # (N, 2w or 3w)
    gap = t_query[:, :, None] - t_key[:, None, :]  # (N, w, W) distance within the subsequence
    keep = (gap <= window) & (gap >= (0 if causal else -window))  # (N, w, W)
    residue = torch.arange(dilation, device=device)[:, None, None]  # (d, 1, 1)
    queries = (residue + dilation * t_query[None]).flatten(0, 1)  # (d*N, w) body positions
    keys = torch.where(t_key[None] >= 0, residue + dilation * t_key[None], -1).flatten(0, 1)  # (d*N, W)
    keep = keep.repeat(dilation, 1, 1)  # (d*N, w, W)
    is_global = torch.arange(length, device=device) < min(length, prefix_tokens + num_global)
    key_set = KeySet(shift_body(keys, body, prefix_tokens), keep)
    return make_pattern(queries + prefix_tokens, [key_set], is_global, causal)


def window_mask(
    length: int, prefix_tokens: int, window: int, dilation: int, num_global: int, causal: bool, device
) -> torch.Tensor:
    """The same pattern as :func:`window_pattern`, written from its definition: (1, 1, L, L) bool."""
    i, j = positions_after_prefix(length, prefix_tokens, device)
    gap = i - j
    keep = (gap.abs() <= window * dilation) & (gap % dilation == 0)
    is_global = torch.arange(length, device=device) < prefix_tokens + num_global
    keep = keep | is_global[:, None] | is_global[None, :]
    if causal:
        keep = keep & (gap >= 0)
    return keep[None, None]


@register_attention
class LongformerAttention(SparsePatternAttention):
    """Longformer: dilated sliding window plus global tokens; see the module docstring.

    Args:
        attention_window: the full window 2w as in transformers' LongformerConfig (even, >= 2; paper: 512).
        dilation: d, the gap between attended keys inside the window (paper: 1; its char-LM dilates 2 heads of
            the upper layers).
        num_global_tokens: tokens after the prefix that are global (the task's [CLS] or question tokens).

    Exact: ``attention_window >= 2 * length`` (every key in the window).
    """

    name = "longformer"
    capabilities = SPARSE_CAPABILITIES
    small_kwargs = {"attention_window": 4, "dilation": 2, "num_global_tokens": 1}

    def __init__(
        self, num_heads: int, head_dim: int, attention_window: int = 512, dilation: int = 1, num_global_tokens: int = 0
    ):
        super().__init__(num_heads, head_dim)
        self.attention_window = check_int(self.name, "attention_window", attention_window, 2)
        if attention_window % 2:
            raise ValueError(
                f"attention_type={self.name!r}: attention_window must be even (the full window, "
                f"attention_window / 2 keys on each side), got {attention_window}"
            )
        self.dilation = check_int(self.name, "dilation", dilation, 1)
        self.num_global_tokens = check_int(self.name, "num_global_tokens", num_global_tokens, 0)

    @property
    def window(self) -> int:
        """w, the one-sided width."""
        return self.attention_window // 2

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {"attention_window": 2 * max(1, length)}

    def pattern(self, length: int, causal: bool, prefix_tokens: int, device) -> SparsePattern:
        return window_pattern(length, prefix_tokens, self.window, self.dilation, self.num_global_tokens, causal, device)

    def dense_mask(self, q, k, causal=False, grid=None, prefix_tokens=0) -> torch.Tensor:
        return window_mask(
            q.shape[2], prefix_tokens, self.window, self.dilation, self.num_global_tokens, causal, q.device
        )
