"""A model's attention layer: its own Q/K/V/O projections around one registry core."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.cache_utils import Cache, EncoderDecoderCache

from ..utils.errors import UsageError
from .registry import build_attention


def with_positions(x: torch.Tensor, positions: torch.Tensor | None, name: str) -> torch.Tensor:
    """``x`` (B, L, C) plus position embeddings broadcastable to it ((B or 1, L, C)); ``x`` itself without."""
    if positions is None:
        return x
    if (
        positions.dim() != 3
        or tuple(positions.shape[1:]) != tuple(x.shape[1:])
        or positions.shape[0] not in (1, x.shape[0])
    ):
        raise ValueError(f"{name} has shape {tuple(positions.shape)}; the input it is added to is {tuple(x.shape)}")
    return x + positions.to(x.dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate ``q_proj``/``k_proj``/``v_proj``/``o_proj`` and a pluggable core.

    Args:
        hidden_size: width of the queries and of the output.
        num_heads: number of heads; ``hidden_size`` must divide evenly.
        qkv_bias: bias on the query, key and value projections.
        out_bias: bias on the output projection (IPT's attention has none, like ``nn.MultiheadAttention(bias=False)``).
        attention_type: registry name of the core (``"full"`` = exact softmax attention).
        attention_kwargs: the core's own settings, validated by the registry.
        dropout: dropout on the attention probabilities (training only).
        kv_size: width of the key/value inputs for cross-attention (defaults to ``hidden_size``).
        value_size: width of the value input when values come from their own input (``value_states``) of
            another width than the keys' (defaults to ``kv_size``).
        config: the owning model's config; its ``_attn_implementation`` picks the backend of ``full``.
        layer_idx: index of the layer in its stack, the slot it uses in a key/value ``cache``.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        qkv_bias: bool = True,
        attention_type: str = "full",
        attention_kwargs: dict[str, Any] | None = None,
        dropout: float = 0.0,
        kv_size: int | None = None,
        config: PretrainedConfig | None = None,
        layer_idx: int | None = None,
        value_size: int | None = None,
        out_bias: bool = True,
    ):
        super().__init__()
        if hidden_size % num_heads:
            raise UsageError(f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = dropout
        self.attention_type = attention_type
        self.config = config
        self.is_causal = False
        self.layer_idx = layer_idx
        self.aux_loss: torch.Tensor | None = None  # the core's auxiliary loss from the last call
        kv_size = hidden_size if kv_size is None else kv_size
        self.core = build_attention(attention_type, num_heads, self.head_dim, **(attention_kwargs or {}))
        reads = self.core.projections  # a core that never reads queries or keys gets no projection for them
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=qkv_bias) if "q" in reads else None
        self.k_proj = nn.Linear(kv_size, hidden_size, bias=qkv_bias) if "k" in reads else None
        self.v_proj = nn.Linear(kv_size if value_size is None else value_size, hidden_size, bias=qkv_bias)
        self.kv_size = kv_size
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=out_bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, L, D)

    def _project(self, projection: nn.Linear | None, x: torch.Tensor) -> torch.Tensor:
        """(B, L, C) -> (B, H, L, D); zeros (a broadcast view, no memory) for a projection the core never reads."""
        if projection is None:
            return x.new_zeros(()).expand(x.shape[0], self.num_heads, x.shape[1], self.head_dim)
        return self._split_heads(projection(x))

    def _keys_values(
        self, key_input: torch.Tensor, value_input: torch.Tensor, cross: bool, cache: Cache | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Project keys and values, or take them from / append them to a transformers ``cache``.

        Self-attention appends this step's keys and values to the cache and attends over all of them;
        cross-attention projects the encoder output once and reuses it on every later step. Positions are
        already in ``key_input``, so the cache holds keys with their positions.
        """
        layers = cache
        if isinstance(cache, EncoderDecoderCache):
            layers = cache.cross_attention_cache if cross else cache.self_attention_cache
            if cross and cache.is_updated.get(self.layer_idx):
                return layers.layers[self.layer_idx].keys, layers.layers[self.layer_idx].values
        k = self._project(self.k_proj, key_input)  # (B, H, Lk, D)
        v = self._project(self.v_proj, value_input)  # (B, H, Lk, D)
        if layers is not None:
            if self.layer_idx is None:
                raise ValueError("a key/value cache needs the attention layer's layer_idx")
            k, v = layers.update(k, v, self.layer_idx)  # (B, H, past + Lk, D)
            if cross and isinstance(cache, EncoderDecoderCache):
                cache.is_updated[self.layer_idx] = True
        return k, v

    def _check_inputs(
        self, hidden_states: torch.Tensor, key_value_states: torch.Tensor | None, value_states: torch.Tensor | None
    ) -> None:
        """Each input's width against its projection, and values as long as keys, refused by name."""
        key_input = hidden_states if key_value_states is None else key_value_states
        expected = [("hidden_states", hidden_states, self.o_proj.out_features)]
        if key_value_states is not None:
            expected.append(("key_value_states", key_value_states, self.kv_size))
        if value_states is not None:
            expected.append(("value_states", value_states, self.v_proj.in_features))
        for name, x, width in expected:
            if x.dim() != 3 or x.shape[-1] != width or x.shape[0] != hidden_states.shape[0]:
                raise ValueError(
                    f"{name} has shape {tuple(x.shape)}; this layer takes (batch={hidden_states.shape[0]}, length, "
                    f"{width})"
                )
        if value_states is not None and value_states.shape[1] != key_input.shape[1]:
            positions = (value_states.shape[1], key_input.shape[1])
            raise ValueError(
                f"value_states hold {positions[0]} positions and the keys {positions[1]}: one value per key"
            )

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        *,
        attention_mask: torch.Tensor | None = None,
        attention_bias: torch.Tensor | None = None,
        causal: bool = False,
        grid: tuple[int, int] | None = None,
        state: Any = None,
        output_attentions: bool = False,
        cache: Cache | None = None,
        prefix_tokens: int = 0,
        query_position_embeddings: torch.Tensor | None = None,
        key_position_embeddings: torch.Tensor | None = None,
        value_states: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, Any]:
        """Attend from ``hidden_states`` (B, Lq, C) to itself or to ``key_value_states`` (B, Lk, C_kv).

        Positions go into the projections only: ``q = W_q(hidden_states + query_position_embeddings)``,
        ``k = W_k(key input + key_position_embeddings)``, ``v = W_v(value input)``; the key input is
        ``key_value_states`` (cross-attention) or ``hidden_states``, the value input ``value_states`` when given
        (values from their own input, one per key) or the key input. Position embeddings are (B or 1, L, C) like
        the input they are added to. With a ``cache`` (an ``EncoderDecoderCache`` in a seq2seq decoder), keys
        (with their positions) and values of earlier steps are reused: ``attention_mask`` then covers all past
        + current keys, and a causal mask aligns the queries with the last keys. ``attention_mask`` (boolean
        keep) and ``attention_bias`` (additive float) broadcast to (B, H, Lq, Lk); ``prefix_tokens`` counts
        leading special tokens ([CLS]). The core refuses, in one error, everything it cannot serve.

        Returns the output (B, Lq, C), the probabilities (B, H, Lq, Lk) when ``output_attentions`` (else None)
        and the core's new state; its auxiliary loss, if any, is left in ``self.aux_loss``.
        """
        cross = key_value_states is not None
        key_input = key_value_states if cross else hidden_states
        value_input = key_input if value_states is None else value_states
        self._check_inputs(hidden_states, key_value_states, value_states)
        queries = with_positions(hidden_states, query_position_embeddings, "query_position_embeddings")
        q = self._project(self.q_proj, queries)  # (B, H, Lq, D)
        keys = with_positions(key_input, key_position_embeddings, "key_position_embeddings")
        k, v = self._keys_values(keys, value_input, cross, cache)  # (B, H, Lk, D) each
        out = self.core(
            q,
            k,
            v,
            attention_mask,
            causal,
            grid,
            state,
            attention_bias,
            cross_attention=cross,
            dropout=self.dropout,
            scaling=self.scaling,
            output_weights=output_attentions,
            module=self,
            prefix_tokens=prefix_tokens,
        )
        self.aux_loss = out.aux_loss
        batch, _, q_len, _ = out.values.shape
        merged = out.values.transpose(1, 2).reshape(batch, q_len, self.num_heads * self.head_dim)  # (B, Lq, C)
        return self.o_proj(merged), out.weights, out.state
