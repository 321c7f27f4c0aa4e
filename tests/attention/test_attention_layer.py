"""MultiHeadAttention's inputs: positions on queries and keys only (DETR, IPT), separate value inputs (TTSR),
an additive bias, and the key/value cache with positions, against hand-written projections."""

from __future__ import annotations

import pytest
import torch
from attention_testing import TOL64, max_diff
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from hf_xcv.attention import MultiHeadAttention, available_attention_types, get_attention_class

CROSS_ENTRIES = [n for n in available_attention_types() if get_attention_class(n).capabilities.cross_attention]


def layer_for(name: str = "full", hidden: int = 16, kv_size: int | None = None) -> MultiHeadAttention:
    torch.manual_seed(0)
    kwargs = get_attention_class(name).small_kwargs
    return MultiHeadAttention(hidden, 2, attention_type=name, attention_kwargs=kwargs, kv_size=kv_size).double().eval()


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def by_hand(layer: MultiHeadAttention, queries, keys, values, **call) -> torch.Tensor:
    """o_proj(core(W_q queries, W_k keys, W_v values)): the layer's own core on hand-made projections."""

    def heads(projection, x):
        if projection is None:  # a core that never reads this input
            return torch.zeros(x.shape[0], layer.num_heads, x.shape[1], layer.head_dim, dtype=x.dtype)
        return projection(x).view(x.shape[0], x.shape[1], layer.num_heads, layer.head_dim).transpose(1, 2)

    q, k, v = heads(layer.q_proj, queries), heads(layer.k_proj, keys), heads(layer.v_proj, values)
    out = layer.core(q, k, v, scaling=layer.scaling, module=layer, **call).values
    return layer.o_proj(out.transpose(1, 2).reshape(queries.shape[0], queries.shape[1], -1))


def test_self_attention_adds_positions_to_queries_and_keys_but_not_values():
    layer = layer_for()
    x, pos = randn(2, 6, 16, seed=1), randn(2, 6, 16, seed=2)
    out, _, _ = layer(x, query_position_embeddings=pos, key_position_embeddings=pos)
    assert max_diff(out, by_hand(layer, x + pos, x + pos, x)) < TOL64
    assert max_diff(layer(x)[0], by_hand(layer, x, x, x)) < TOL64  # without positions: plain attention
    assert max_diff(out, layer(x + pos)[0]) > 1e-3  # positions on the values would change the output


@pytest.mark.parametrize("name", CROSS_ENTRIES)
def test_cross_attention_positions_with_every_core_that_serves_it(name):
    layer = layer_for(name, kv_size=12)
    x, query_pos = randn(2, 5, 16, seed=1), randn(1, 5, 16, seed=2)  # object queries shared by the batch
    memory, memory_pos = randn(2, 9, 12, seed=3), randn(2, 9, 12, seed=4)
    out, _, _ = layer(x, memory, query_position_embeddings=query_pos, key_position_embeddings=memory_pos)
    expected = by_hand(layer, x + query_pos, memory + memory_pos, memory, cross_attention=True)
    assert max_diff(out, expected) < TOL64


@pytest.mark.parametrize("name", CROSS_ENTRIES)
def test_values_may_come_from_their_own_input(name):
    """TTSR's texture transfer: keys from the degraded reference, values from the reference itself."""
    layer = layer_for(name, kv_size=12)
    x, keys, values = randn(2, 5, 16, seed=1), randn(2, 9, 12, seed=2), randn(2, 9, 12, seed=3)
    out, _, _ = layer(x, keys, value_states=values)
    assert max_diff(out, by_hand(layer, x, keys, values, cross_attention=True)) < TOL64


def test_the_bias_and_mask_reach_the_core():
    layer = layer_for()
    x, bias = randn(2, 6, 16, seed=1), randn(2, 6, 6, seed=2)
    keep = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    keep[1, ..., 3:] = False
    out, _, _ = layer(x, attention_mask=keep, attention_bias=bias, causal=True)
    expected = by_hand(layer, x, x, x, attention_mask=keep, attention_bias=bias, causal=True)
    assert max_diff(out, expected) < TOL64


def test_self_attention_cache_holds_keys_with_their_positions():
    """Step-by-step decoding with positions equals one causal pass over the whole sequence."""
    layer = layer_for()
    layer.layer_idx = 0
    x, pos = randn(1, 7, 16, seed=1), randn(1, 7, 16, seed=2)
    whole, _, _ = layer(x, causal=True, query_position_embeddings=pos, key_position_embeddings=pos)
    cache = DynamicCache()
    steps = [
        layer(
            x[:, i : i + 1],
            causal=True,
            cache=cache,
            query_position_embeddings=pos[:, i : i + 1],
            key_position_embeddings=pos[:, i : i + 1],
        )[0]
        for i in range(7)
    ]
    assert max_diff(torch.cat(steps, dim=1), whole) < TOL64


def test_cross_attention_cache_projects_the_positioned_memory_once():
    layer = layer_for(kv_size=12)
    layer.layer_idx = 0
    memory, memory_pos = randn(1, 9, 12, seed=3), randn(1, 9, 12, seed=4)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    first = randn(1, 1, 16, seed=1)
    layer(first, memory, cache=cache, key_position_embeddings=memory_pos)
    later = randn(1, 1, 16, seed=5)
    # the cached keys already hold the positions: a later step needs neither the memory's positions nor values
    out, _, _ = layer(later, torch.zeros_like(memory), cache=cache)
    assert max_diff(out, by_hand(layer, later, memory + memory_pos, memory, cross_attention=True)) < TOL64


def test_positions_of_the_wrong_shape_are_refused_by_name():
    layer = layer_for()
    x = randn(2, 6, 16, seed=1)
    with pytest.raises(ValueError, match=r"query_position_embeddings has shape \(2, 5, 16\)"):
        layer(x, query_position_embeddings=randn(2, 5, 16, seed=2))
    with pytest.raises(ValueError, match=r"key_position_embeddings has shape \(3, 6, 16\)"):
        layer(x, key_position_embeddings=randn(3, 6, 16, seed=2))
    with pytest.raises(ValueError, match="value_states hold 5 positions and the keys 4"):
        layer(x, randn(2, 4, 16, seed=3), value_states=randn(2, 5, 16, seed=4))
    with pytest.raises(
        ValueError, match=r"value_states has shape \(2, 4, 12\); this layer takes \(batch=2, length, 16\)"
    ):
        layer(x, randn(2, 4, 16, seed=3), value_states=randn(2, 4, 12, seed=4))
    with pytest.raises(ValueError, match=r"key_value_states has shape \(2, 4, 8\)"):
        layer(x, randn(2, 4, 8, seed=3))


def test_values_may_have_their_own_width():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 2, kv_size=12, value_size=20).double().eval()
    x, keys, values = randn(2, 5, 16, seed=1), randn(2, 9, 12, seed=2), randn(2, 9, 20, seed=3)
    assert (
        max_diff(layer(x, keys, value_states=values)[0], by_hand(layer, x, keys, values, cross_attention=True)) < TOL64
    )
