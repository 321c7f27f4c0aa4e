"""``etc``: ETC's global-local attention (Ainslie et al. 2020, Extended Transformer Construction).

ETC takes two inputs, a small *global* input and a *long* input, and attends in four pieces: global-to-global
(g2g), global-to-long (g2l), long-to-global (l2g), all full, and long-to-long (l2l) restricted to a
``local_radius`` r. As in ETC's fused implementation, a long query's l2g and l2l scores share one softmax,
and so do a global query's g2g and g2l scores.

Mapping onto one token sequence (a registry core sees a single sequence): the global input is the first
``prefix_tokens + num_global_tokens`` tokens (ViT's [CLS] and, in sequence models, the first tokens, e.g.
a [CLS] or one summary token per segment placed in front), the long input is the rest. So

* global query: every key (g2g + g2l);
* long query i: every global key (l2g) and the long keys j with |i - j| <= r (l2l).

With no global token at all (prefix 0 and ``num_global_tokens`` 0) ETC is plain local attention of
radius r. The block-wise computation is the one of ``longformer`` (``_patterns.window_pattern``: a window of
one-sided width r, no dilation): O(G L + L r) scores, no (L x L) tensor.

Not implemented: relative position labels (the layer's model keeps its absolute positions), masks that
restrict g2l / l2g to a segment ("structured inputs") and the CPC pre-training objective. ETC is not
causal (its global tokens summarise the whole input), so ``causal=True`` is refused, as in the paper.
"""

from __future__ import annotations

from typing import Any

import torch

from ..utils.checks import check_int
from ._patterns import SparsePattern, SparsePatternAttention, window_mask, window_pattern
from .registry import Capabilities, register_attention


@register_attention
class ETCAttention(SparsePatternAttention):
    """ETC global-local attention; see the module docstring.

    Args:
        local_radius: r, how many long tokens on each side a long token sees (ETC's default config: 84).
        num_global_tokens: tokens after the prefix that form the global input with the prefix.

    Exact: ``local_radius >= length`` (l2l then covers the whole long input, ETC's own reduction to a
    standard Transformer).
    """

    name = "etc"
    capabilities = Capabilities(
        padding_mask=True,
        returns_weights=True,
        attention_bias=True,
        length_constraint="self-attention (kv_len == q_len); any length (the global input is the first "
        "prefix_tokens + num_global_tokens tokens)",
    )
    small_kwargs = {"local_radius": 2, "num_global_tokens": 2}

    def __init__(self, num_heads: int, head_dim: int, local_radius: int = 84, num_global_tokens: int = 0):
        super().__init__(num_heads, head_dim)
        self.local_radius = check_int("local_radius", local_radius, 0, owner=self.owner)
        self.num_global_tokens = check_int("num_global_tokens", num_global_tokens, 0, owner=self.owner)

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {"local_radius": max(0, length)}

    def pattern(self, length: int, causal: bool, prefix_tokens: int, device) -> SparsePattern:
        return window_pattern(length, prefix_tokens, self.local_radius, 1, self.num_global_tokens, False, device)

    def dense_mask(self, q, k, causal=False, grid=None, prefix_tokens=0) -> torch.Tensor:
        if causal:
            raise ValueError(f"attention_type={self.name!r} does not support causal (autoregressive) masking")
        return window_mask(q.shape[2], prefix_tokens, self.local_radius, 1, self.num_global_tokens, False, q.device)
