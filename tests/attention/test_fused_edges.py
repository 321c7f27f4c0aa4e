"""Edges of the fused attention paths (kernel, fixed-pattern, blocked, routed): a second derivative through
one of them raises instead of returning wrong numbers (their backward passes are not differentiable); an
additive bias at the dtype's minimum (how a transformers-style extended mask writes "masked") gives the
unfused path's values and gradients, and finite values for a query whose every key it masks; the Sparse
Transformer's fixed pattern keeps no (L x L/l) mask."""

from __future__ import annotations

import pytest
import torch
from attention_testing import TOL64, build, max_diff, qkv, small

from hf_xcv.attention import _kernels as kernels

FUSED = [  # (entry, kwargs, grid): one per fused Function
    ("linear", {}, None),
    ("performer", {}, None),
    ("longformer", {}, None),
    ("sparse_fixed", {}, None),
    ("local", {"block_size": 4}, None),
    ("axial", {}, (4, 4)),
    ("memory_compressed", {"compression": 2, "block_size": 4}, None),
    ("lsh", {}, None),
    ("routing", {}, None),
    ("sinkhorn", {}, None),
]


@pytest.mark.parametrize("name, kwargs, grid", FUSED, ids=[case[0] for case in FUSED])
def test_a_second_derivative_through_a_fused_path_raises(name, kwargs, grid):
    core = build(name, **small(name, **kwargs))
    core.fused = True  # the kernel entries' default keeps short calls on the plain path
    q, k, v = (t.requires_grad_() for t in qkv(q_len=16))
    out = core(q, k, v, grid=grid).values
    grads = torch.autograd.grad(out.square().sum(), (q, k, v), create_graph=True, allow_unused=True)  # lsh: k unused
    with pytest.raises(RuntimeError, match="once_differentiable"):
        sum(g.sum() for g in grads if g is not None and g.requires_grad).backward()


BIASED = [("local", {"block_size": 4}), ("longformer", {}), ("sparse_strided", {}), ("bigbird", {})]


@pytest.mark.parametrize("name, kwargs", BIASED, ids=[case[0] for case in BIASED])
def test_a_bias_at_the_dtype_minimum_matches_the_unfused_path(name, kwargs):
    q, k, v = qkv(q_len=16)
    bias = torch.zeros(1, 1, 16, 16, dtype=torch.float64)
    lowest = torch.finfo(torch.float64).min
    bias[..., 2, 1:] = lowest  # row 2 keeps key 0 only
    bias[..., 9, ::2] = lowest  # row 9 loses every other key
    bias[..., 5, :] = lowest  # row 5 loses every key: finite, pattern-dependent values (mask with attention_mask)
    others = torch.arange(16) != 5
    results = []
    for fused in (True, False):
        core = build(name, **small(name, **kwargs))
        core.fused = fused
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = core(*leaves, attention_bias=bias).values
        assert torch.isfinite(out).all()
        grads = torch.autograd.grad(out[:, :, others].square().sum(), leaves)
        results.append((out[:, :, others], *grads))
    for fused, plain in zip(*results):
        assert torch.isfinite(fused).all()
        assert max_diff(fused, plain) <= TOL64


@pytest.mark.parametrize("causal", [False, True])
def test_the_fixed_pattern_keeps_no_quadratic_mask(causal):
    """Without causality the summary keys' mask is one row per block, not per query: the pattern's masks stay
    O(L) at 8K tokens (the old (L, L * c / l) mask held 16.8M entries); causal masks need every query's row."""
    core = build("sparse_fixed")  # block 128, 32 summary cells: each query sees L/4 summary keys
    length = 8192
    pattern = core.pattern(length, causal=causal, prefix_tokens=0, device=torch.device("cpu"))
    entries = sum(key_set.keep.numel() for key_set in pattern.key_sets)
    if causal:
        assert entries >= length * length // 4
    else:
        assert entries <= 2 * length * core.block_size


def test_the_fused_paths_serve_cpu_tensors_by_default_and_the_plain_paths_others():
    """``fused = None`` (the default): fused on the CPU; on an accelerator (here a meta tensor stands for one)
    the plain path, whose few large kernels are the fast ones there; True and False hold on every device."""
    core = build("local", **small("local"))
    cpu, elsewhere = torch.zeros(1), torch.zeros(1, device="meta")
    assert core.fused is None and core.use_fused(cpu) and not core.use_fused(elsewhere)
    core.fused = True
    assert core.use_fused(cpu) and core.use_fused(elsewhere)
    core.fused = False
    assert not core.use_fused(cpu) and not core.use_fused(elsewhere)
    assert not build("full").use_fused(cpu)  # no fused path to take


@pytest.mark.parametrize("name, kwargs, grid", FUSED, ids=[case[0] for case in FUSED])
def test_the_default_on_cpu_is_the_fused_path(name, kwargs, grid, monkeypatch):
    """On CPU the default computes exactly what ``fused = True`` computes (the same Function); for the kernel
    entries, above ``PLAIN_LENGTH`` keys (lowered here to 8)."""
    monkeypatch.setattr(kernels, "PLAIN_LENGTH", 8)
    q, k, v = qkv(q_len=16)
    outputs = []
    for flag in (None, True):
        core = build(name, **small(name, **kwargs))
        core.fused = flag
        torch.manual_seed(0)  # lsh draws its rotations
        outputs.append(core(q, k, v, grid=grid).values)
    assert torch.equal(outputs[0], outputs[1])


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_kernel_entries_keep_short_calls_on_the_plain_path_by_default(name):
    """Up to PLAIN_LENGTH keys the default (fused = None) is autograd's path, which keeps the features and is the
    faster one there; above it, and with fused = True at any length, the fused Function."""
    core = build(name, **small(name))
    short, long = torch.zeros(1, 2, kernels.PLAIN_LENGTH, 8), torch.zeros(1, 2, kernels.PLAIN_LENGTH + 1, 8)
    assert not core._fused_call(short, short) and core._fused_call(long, long)
    core.fused = True
    assert core._fused_call(short, short)
    q, k, v = (t.requires_grad_() for t in qkv(q_len=16))
    core.fused = None
    out = core(q, k, v).values
    assert out.grad_fn.name() != "FusedKernelAttentionBackward"
