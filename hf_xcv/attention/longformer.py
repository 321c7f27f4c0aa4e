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
:func:`_patterns.sparse_attention`. Lengths are padded to a multiple of w * d internally.

Deviation from the paper: the paper gives global attention its own projections (Q_g, K_g, V_g). A registry
core receives already projected q, k, v, so global rows use the layer's projections; this equals the paper's
model with the global projections tied to the local ones. The paper's per-head dilation (dilated windows on
some heads only) is not offered: ``dilation`` applies to every head.
"""

from __future__ import annotations

from typing import Any

import torch

from ..utils.checks import check_int
from ..utils.errors import UsageError
from ._patterns import SPARSE_CAPABILITIES, SparsePattern, SparsePatternAttention, window_mask, window_pattern
from .registry import register_attention


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
        self.attention_window = check_int("attention_window", attention_window, 2, owner=self.owner)
        if attention_window % 2:
            raise UsageError(
                f"attention_type={self.name!r}: attention_window must be even (the full window, "
                f"attention_window / 2 keys on each side), got {attention_window}"
            )
        self.dilation = check_int("dilation", dilation, 1, owner=self.owner)
        self.num_global_tokens = check_int("num_global_tokens", num_global_tokens, 0, owner=self.owner)

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
