"""``full``: plain softmax attention, computed by transformers' attention interface.

The backend follows ``config._attn_implementation`` of the owning layer (``sdpa`` by default,
``eager``, ``flash_attention_*``, ``flex_attention`` where installed), so ``attn_implementation=`` and
``model.set_attn_implementation(...)`` keep working. ``eager`` is this module's own implementation and is
also the dense reference the other registry entries are tested against.

An additive ``attention_bias`` goes to ``eager`` as a term of the logits, to ``sdpa`` inside its float mask
(the boolean mask folded in as -inf, which sdpa turns into zeros for a row with nothing to attend), and to
``flex_attention`` as its position bias (at inference: torch's flex kernel cannot differentiate it, so a bias
that needs a gradient is refused there); the flash kernels take none and refuse it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from ._masks import dense_attention, merge_masks
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention

# Backends that take a dense (batch, heads, q_len, kv_len) mask.
_DENSE_MASK_BACKENDS = ("eager", "sdpa")
# Backends that take an additive bias.
_BIAS_BACKENDS = ("eager", "sdpa", "flex_attention")


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    is_causal: bool | None = None,
    attention_bias: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' attention-interface signature; output transposed to (B, Lq, H, D) like the others."""
    keep = merge_masks(attention_mask, bool(is_causal), query.shape[2], key.shape[2], query.device)
    values, probs = dense_attention(
        query, key, value, keep, scaling, dropout, training=module.training, bias=attention_bias
    )
    return values.transpose(1, 2), probs


def _sdpa_float_mask(keep: torch.Tensor | None, bias: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The bias with masked keys at -inf: the float mask sdpa adds to its logits."""
    bias = bias.to(dtype)
    return bias if keep is None else torch.where(keep, bias, torch.tensor(float("-inf"), dtype=dtype))


@register_attention
class FullAttention(AttentionCore):
    """Exact softmax attention over every key, through transformers' attention interface."""

    name = "full"
    capabilities = Capabilities(
        padding_mask=True,
        arbitrary_mask=True,
        causal=True,
        cross_attention=True,
        returns_weights=True,
        attention_bias=True,
    )

    def __init__(self, num_heads: int, head_dim: int):
        super().__init__(num_heads, head_dim)
        self.is_causal = False  # read by transformers' backends when `is_causal` is not passed

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {}

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """``call.module`` is the owning attention layer: its ``config._attn_implementation`` picks the backend."""
        module, mask, causal, bias = call.module, call.mask, call.causal, call.bias
        implementation = getattr(getattr(module, "config", None), "_attn_implementation", None) or "sdpa"
        if call.output_weights:
            implementation = "eager"  # only eager materialises the probabilities
        if mask is not None and implementation not in _DENSE_MASK_BACKENDS:
            raise ValueError(
                f"attn_implementation={implementation!r} takes no dense attention mask here; use 'sdpa' or 'eager'"
            )
        if bias is not None and implementation not in _BIAS_BACKENDS:
            raise ValueError(
                f"attn_implementation={implementation!r} takes no attention bias; use one of {list(_BIAS_BACKENDS)}"
            )
        if causal and q.shape[2] == 1:
            causal = False  # one query aligned with the last key sees every key: no mask (the decoding step)
        extra = {}
        if implementation == "eager":
            backend = eager_attention_forward
            extra["attention_bias"] = bias
        else:
            backend = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
            if (
                implementation == "sdpa"
                and causal
                and (mask is not None or bias is not None or q.shape[2] != k.shape[2])
            ):
                # sdpa's own causal flag aligns queries with the first keys; spell the mask out instead.
                mask, causal = merge_masks(mask, True, q.shape[2], k.shape[2], q.device), False
            if implementation == "sdpa" and bias is not None:
                mask = _sdpa_float_mask(mask, bias, q.dtype)
            elif bias is not None:  # flex_attention reads its bias at [batch, head, query, key]
                if bias.requires_grad and torch.is_grad_enabled():
                    raise ValueError(
                        "attn_implementation='flex_attention' cannot differentiate an attention bias (torch's flex "
                        "kernel fails on gradients of a captured bias); train with 'sdpa' or 'eager'"
                    )
                extra["position_bias"] = bias.to(q.dtype).expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        values, weights = backend(
            module, q, k, v, mask, scaling=call.scaling, dropout=call.dropout, is_causal=causal, **extra
        )
        # Backends return (B, Lq, H, D); the seam's layout is (B, H, Lq, D).
        return AttentionOutput(values.transpose(1, 2), weights if call.output_weights else None, None)
