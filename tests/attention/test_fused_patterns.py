"""The fused path of the fixed-pattern entries (``_fused_patterns``): gradients checked by ``gradcheck`` in float64
and equal to the old autograd path (``fused = False``) with padding, a bias that requires grad, causality and
prefix tokens; the chunk size changes nothing; calls the fused path cannot serve take the old one."""

from __future__ import annotations

import pytest
import torch
from attention_testing import build, padding_keep, qkv

from hf_xcv.attention import MultiHeadAttention
from hf_xcv.attention._fused_patterns import fused_sparse_attention

CAUSAL = {"sparse_strided", "sparse_fixed", "longformer"}
SETTINGS = [
    ("sparse_strided", {"stride": 3}),
    ("sparse_fixed", {"block_size": 4, "summary_cells": 2}),
    ("longformer", {"attention_window": 4, "dilation": 2, "num_global_tokens": 2}),
    ("longformer", {"attention_window": 6, "dilation": 1, "num_global_tokens": 0}),
    ("etc", {"local_radius": 1, "num_global_tokens": 2}),
    ("etc", {"local_radius": 0, "num_global_tokens": 0}),
    ("bigbird", {"block_size": 2, "num_random_blocks": 2}),
    ("bigbird", {"block_size": 3, "num_random_blocks": 1}),
]
CALLS = [(n, kw, c, p) for n, kw in SETTINGS for c in ([False, True] if n in CAUSAL else [False]) for p in (0, 2)]
BIAS_SHAPES = [(2, 2, 19, 19), (1, 2, 19, 19), (2, 1, 1, 19), (1, 1, 19, 1)]


def inputs(length: int = 19, heads: int = 2, bias_shape=(2, 2, 19, 19), seed: int = 0):
    """q, k, v (2, heads, L, 8) float64 requiring grad, a padding mask (the second row keeps L - 5 keys) and a
    bias requiring grad."""
    q, k, v = (t.requires_grad_() for t in qkv(heads=heads, q_len=length, seed=seed))
    keep = padding_keep(2, length, [length, length - 5])
    bias = torch.randn(*bias_shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 1))
    return q, k, v, keep, bias.requires_grad_()


def step(core, q, k, v, keep, bias, causal, prefix):
    """Values and the gradients of q, k, v and the bias for a fixed random output gradient."""
    out = core(q, k, v, attention_mask=keep, attention_bias=bias, causal=causal, prefix_tokens=prefix).values
    d_out = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(5))
    grads = torch.autograd.grad(out, (q, k, v, bias), d_out)
    return out, grads


@pytest.mark.parametrize("name,kwargs,causal,prefix", CALLS)
def test_fused_values_and_gradients_equal_the_unfused_path(name, kwargs, causal, prefix):
    core = build(name, **kwargs)
    q, k, v, keep, bias = inputs()
    fused = step(core, q, k, v, keep, bias, causal, prefix)
    core.fused = False
    plain = step(core, q, k, v, keep, bias, causal, prefix)
    assert (fused[0] - plain[0]).abs().max().item() <= 1e-10
    for got, want, label in zip(fused[1], plain[1], "qkvb"):
        assert (got - want).abs().max().item() <= 1e-10, label


@pytest.mark.parametrize("bias_shape", BIAS_SHAPES)
@pytest.mark.parametrize("name,kwargs", [SETTINGS[0], SETTINGS[2], SETTINGS[6]])
def test_fused_bias_gradient_sums_over_its_broadcast_dimensions(name, kwargs, bias_shape):
    core = build(name, **kwargs)
    q, k, v, keep, bias = inputs(bias_shape=bias_shape)
    fused = step(core, q, k, v, keep, bias, False, 1)
    core.fused = False
    plain = step(core, q, k, v, keep, bias, False, 1)
    for got, want in zip(fused[1], plain[1]):
        assert (got - want).abs().max().item() <= 1e-10


@pytest.mark.parametrize("name,kwargs", SETTINGS)
def test_fused_function_passes_gradcheck(name, kwargs):
    length = 11
    core = build(name, **kwargs)
    causal = name in CAUSAL
    pattern = core.pattern(length, causal, 1, torch.device("cpu"))
    q, k, v, keep, bias = inputs(length=length, bias_shape=(1, 2, length, length))
    key_keep = keep[:, 0, 0, :]

    def attend(q, k, v, bias):
        return fused_sparse_attention(q, k, v, pattern, key_keep, bias, 0.4, chunk_scores=50)

    # fast mode (a random projection of the Jacobian, both ways): the full Jacobian of ~1,300 inputs takes seconds per
    # case, and equality with the autograd path below covers every gradient element
    assert torch.autograd.gradcheck(attend, (q, k, v, bias), fast_mode=True)


@pytest.mark.parametrize("chunk_scores", [1, 64, 1 << 30])
@pytest.mark.parametrize("name,kwargs", [SETTINGS[0], SETTINGS[1], SETTINGS[2], SETTINGS[7]])
def test_chunk_size_is_not_a_result_change(name, kwargs, chunk_scores):
    core = build(name, **kwargs)
    causal = name in CAUSAL
    pattern = core.pattern(19, causal, 2, torch.device("cpu"))
    q, k, v, keep, bias = inputs()
    key_keep = keep[:, 0, 0, :]
    results = []
    for chunk in (chunk_scores, 1 << 21):
        out = fused_sparse_attention(q, k, v, pattern, key_keep, bias, 0.3, chunk_scores=chunk)
        results.append((out, *torch.autograd.grad(out.square().sum(), (q, k, v, bias))))
    for got, want in zip(*results):
        assert (got - want).abs().max().item() <= 1e-12


def test_a_query_with_no_key_gets_zeros_and_zero_gradient_on_the_fused_path():
    core = build("longformer", attention_window=4, num_global_tokens=1)
    q, k, v, _, _ = inputs(length=12)
    keep = padding_keep(2, 12, [12, 0])
    out = core(q, k, v, attention_mask=keep).values
    assert out[1].abs().max().item() == 0.0
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(g[1].abs().max().item() == 0.0 for g in grads)


def test_weights_and_dropout_take_the_unfused_path():
    core = build("sparse_strided", stride=3).train()
    q, k, v, _, _ = inputs()
    torch.manual_seed(0)
    dropped = core(q, k, v, dropout=0.5).values
    core.fused = False
    torch.manual_seed(0)
    assert torch.equal(dropped, core(q, k, v, dropout=0.5).values), "dropout must take the old path"
    core.eval()
    assert core(q, k, v, output_weights=True).weights is not None


def test_fused_path_in_float32_keeps_the_input_dtype():
    core = build("bigbird", dtype=torch.float32, block_size=4, num_random_blocks=1)
    q, k, v = (t.float().requires_grad_() for t in qkv(q_len=32))
    out = core(q, k, v).values
    out.sum().backward()
    assert out.dtype == torch.float32 and all(t.grad.dtype == torch.float32 for t in (q, k, v))
    core.fused = False
    assert (core(q, k, v).values - out).abs().max().item() < 1e-5


@pytest.mark.parametrize("name,kwargs", SETTINGS)
def test_fused_path_in_a_layer_equals_the_unfused_path(name, kwargs):
    """One sequence through MultiHeadAttention: q, k, v are (1, L, H, D) storage seen as (1, H, L, D), the layout
    whose gathers, outputs and gradients take the fast paths; a padding mask, a bias and a prefix token."""
    length, hidden = 21, 16
    torch.manual_seed(0)
    layer = MultiHeadAttention(hidden, 2, attention_type=name, attention_kwargs=kwargs).double()
    x = torch.randn(1, length, hidden, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(1, 2, length, length, dtype=torch.float64, requires_grad=True)
    keep = padding_keep(1, length, [length - 3])
    causal = name in CAUSAL
    results = []
    for fused in (True, False):
        layer.core.fused = fused
        out, _, _ = layer(x, attention_mask=keep, attention_bias=bias, causal=causal, prefix_tokens=1)
        grads = torch.autograd.grad(out.square().sum(), (x, bias, *layer.parameters()))
        results.append((out, *grads))
    for got, want in zip(*results):
        assert (got - want).abs().max().item() <= 1e-10


@pytest.mark.parametrize("name,kwargs", SETTINGS)
def test_fused_path_saves_only_q_k_v_the_output_and_row_statistics(name, kwargs):
    """What autograd keeps for backward: q, k, v and the output (4 B H L D) plus (B, H, L) log-sum-exp tensors,
    never a blocked score or probability tensor."""
    batch, heads, length, dim = 1, 2, 256, 8
    core = build(name, heads=heads, dim=dim, **kwargs)
    q, k, v = (t.requires_grad_() for t in qkv(batch=batch, heads=heads, q_len=length, dim=dim))
    saved = []

    def pack(tensor):
        saved.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        core(q, k, v, causal=name in CAUSAL, prefix_tokens=1).values.sum().backward()
    assert sum(saved) <= 4 * batch * heads * length * dim + 4 * batch * heads * (length + 1), saved
