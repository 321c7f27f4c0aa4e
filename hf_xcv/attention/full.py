"""``full``: plain softmax attention, computed by transformers' attention interface.

The backend follows ``config._attn_implementation`` of the owning layer (``sdpa`` by default,
``eager``, ``flash_attention_*``, ``flex_attention`` where installed), so ``attn_implementation=`` and
``model.set_attn_implementation(...)`` keep working. ``eager`` is this module's own implementation and is
also the dense reference the other registry entries are tested against.

Masks and an additive ``attention_bias`` go to ``eager`` as they are, to ``sdpa`` as one float mask (masked
keys at -inf, which sdpa turns into zeros for a row with nothing to attend) and to ``flex_attention`` as its
position bias (the same float mask; causal attention too, which transformers' flex path would otherwise
drop). The flash kernels take neither a dense mask nor a bias, and such calls are refused with the other
problems of the call.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from ._masks import dense_attention, merge_masks
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention

# Backends that take a dense (batch, heads, q_len, kv_len) mask and an additive bias.
_DENSE_BACKENDS = ("eager", "sdpa", "flex_attention")


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


def float_mask(keep: torch.Tensor | None, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """The bias (zeros without one) with masked keys at -inf: the float mask sdpa and flex add to their logits."""
    bias = torch.zeros((), dtype=dtype, device=keep.device) if bias is None else bias.to(dtype)
    return bias if keep is None else torch.where(keep, bias, torch.tensor(float("-inf"), dtype=dtype))


def backend_name(module: nn.Module | None, output_weights: bool) -> str:
    """The attention backend of a call: the owning layer's ``config._attn_implementation`` (sdpa by default),
    eager when the weights are asked for (only eager materialises them)."""
    implementation = getattr(getattr(module, "config", None), "_attn_implementation", None) or "sdpa"
    return "eager" if output_weights else implementation


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

    def call_problems(self, q, k, v, attention_mask, attention_bias, **request) -> list[str]:
        problems = super().call_problems(q, k, v, attention_mask, attention_bias, **request)
        implementation = backend_name(request.get("module"), request["output_weights"])
        if implementation not in _DENSE_BACKENDS:
            use = f"use one of {list(_DENSE_BACKENDS)}"
            if attention_mask is not None:
                problems.append(f"attn_implementation={implementation!r} takes no dense attention mask here; {use}")
            if attention_bias is not None:
                problems.append(f"attn_implementation={implementation!r} takes no attention bias; {use}")
        return problems

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """``call.module`` is the owning attention layer: its ``config._attn_implementation`` picks the backend."""
        module, mask, causal, bias = call.module, call.mask, call.causal, call.bias
        implementation = backend_name(module, call.output_weights)
        q_len, kv_len = q.shape[2], k.shape[2]
        if causal and q_len == 1:
            causal = False  # one query aligned with the last key sees every key: no mask (the decoding step)
        extra = {}
        if implementation == "eager":
            backend = eager_attention_forward
            extra["attention_bias"] = bias
        else:
            backend = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        if implementation == "sdpa" and causal and (mask is not None or bias is not None or q_len != kv_len):
            # sdpa's own causal flag aligns queries with the first keys; spell the mask out instead.
            mask, causal = merge_masks(mask, True, q_len, kv_len, q.device), False
        if implementation == "sdpa" and bias is not None:
            mask = float_mask(mask, bias, q.dtype)
        elif implementation == "flex_attention" and (mask is not None or bias is not None or causal):
            # flex reads its position bias at [batch, head, query, key]; masks and causality go in as -inf
            keep = merge_masks(mask, causal, q_len, kv_len, q.device)
            extra["position_bias"] = float_mask(keep, bias, q.dtype).expand(q.shape[0], q.shape[1], q_len, kv_len)
            mask, causal = None, False
        values, weights = backend(
            module, q, k, v, mask, scaling=call.scaling, dropout=call.dropout, is_causal=causal, **extra
        )
        # Backends return (B, Lq, H, D); the seam's layout is (B, H, Lq, D).
        return AttentionOutput(values.transpose(1, 2), weights if call.output_weights else None, None)
