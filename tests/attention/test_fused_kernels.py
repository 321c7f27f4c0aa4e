"""The fused paths of the kernel and low-rank entries (``linear``, ``performer``, ``linformer``): their gradients.

``FusedKernelAttention`` keeps only q, k, v (or the Linear Transformer's features, as large) for backward and
recomputes the rest chunk by chunk; ``linformer`` attends over its projected slots with PyTorch's fused kernel.
Each is checked with float64 ``gradcheck`` and against autograd through the plain path (``fused = False``) to
1e-10, with key padding (a row with no real key included), several chunks, and cross-attention lengths.
"""

from __future__ import annotations

import pytest
import torch
from attention_testing import TOL64, build, max_diff, padding_keep, qkv

import hf_xcv.attention._kernels as kernels
from hf_xcv.attention._kernels import FusedKernelAttention

KERNEL_SETTINGS = {"linear": {}, "performer": {"nb_features": 12, "feature_redraw_interval": 0, "seed": 3}}


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few positions, so every pass runs over several of them (and a ragged last one)."""
    monkeypatch.setattr(kernels, "FUSED_CHUNK_ELEMENTS", 2 * 2 * 12 * 5)
    monkeypatch.setattr(kernels, "WHOLE_ELEMENTS", 0)


def paths(core, q, k, v, keep, seed=1):
    """Output and gradients (q, k, v and the core's parameters) of the fused and the plain path, same upstream."""
    found = []
    for fused in (True, False):
        core.fused = fused
        out = core(q, k, v, keep).values
        upstream = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(seed))
        inputs = (q, k, v, *(p for p in core.parameters() if p.requires_grad))
        found.append((out, torch.autograd.grad((out * upstream).sum(), inputs)))
    core.fused = True
    return found


@pytest.mark.parametrize("name", ["linear", "performer", "linformer"])
@pytest.mark.parametrize("case", ["plain", "padding", "cross"])
def test_fused_path_equals_autograd_through_the_plain_path(name, case, small_chunks):
    kv_len = 11 if case == "cross" else 13
    q, k, v = (t.requires_grad_() for t in qkv(q_len=13, kv_len=kv_len, dim=4))
    keep = padding_keep(2, kv_len, [9, 0]) if case == "padding" else None  # row 1: no real key at all
    settings = {"seq_len": 16, "k": 6} if name == "linformer" else KERNEL_SETTINGS[name]
    (out, grads), (ref_out, ref_grads) = paths(build(name, dim=4, **settings), q, k, v, keep)
    assert max_diff(out, ref_out) <= TOL64
    for grad, ref in zip(grads, ref_grads):
        assert max_diff(grad, ref) <= TOL64
    if case == "padding":
        assert out[1].abs().max() == 0 and grads[1][1].abs().max() == 0  # nothing to attend: zeros, no gradient
        assert grads[1][0, :, 9:].abs().max() == 0 and grads[2][0, :, 9:].abs().max() == 0  # padded keys


@pytest.mark.parametrize("kind", ["elu", "favor"])
@pytest.mark.parametrize("padded", [False, True])
def test_fused_kernel_function_passes_gradcheck(kind, padded, small_chunks):
    q, k, v = (t.requires_grad_() for t in qkv(q_len=9, kv_len=7, dim=4, seed=2))
    keep = padding_keep(2, 7, [5, 0])[:, 0, 0] if padded else None  # (B, Lk)
    projection = None
    if kind == "favor":
        projection = build("performer", dim=4, **KERNEL_SETTINGS["performer"]).projection.T * 0.5  # (D, M)
    function = lambda q, k, v: FusedKernelAttention.apply(q, k, v, keep, kind, projection, 0.25)  # noqa: E731
    assert torch.autograd.gradcheck(function, (q, k, v))


def test_performer_key_stabiliser_follows_a_maximum_that_moves_between_chunks(small_chunks):
    """Keys whose norms rise along the sequence move the running maximum in every chunk: the sums rescaled by
    exp(old - new) equal the one-pass form (the plain path), values and gradients."""
    q, k, v = qkv(q_len=13, dim=4, seed=4)
    k = k * torch.linspace(0.2, 4.0, 13, dtype=k.dtype)[:, None]
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    core = build("performer", dim=4, **KERNEL_SETTINGS["performer"])
    (out, grads), (ref_out, ref_grads) = paths(core, q, k, v, None)
    assert max_diff(out, ref_out) <= TOL64
    assert all(max_diff(g, r) <= TOL64 for g, r in zip(grads, ref_grads))


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_short_calls_run_in_one_chunk_and_equal_the_chunked_result(name, monkeypatch):
    q, k, v = (t.requires_grad_() for t in qkv(q_len=13, dim=4, seed=5))
    core = build(name, dim=4, **KERNEL_SETTINGS[name])
    keep = padding_keep(2, 13, [13, 8])
    results = []
    for whole in (2**22, 0):
        monkeypatch.setattr(kernels, "WHOLE_ELEMENTS", whole)
        monkeypatch.setattr(kernels, "FUSED_CHUNK_ELEMENTS", 2 * 2 * 12 * 4)
        out = core(q, k, v, keep).values
        results.append((out, torch.autograd.grad(out.square().sum(), (q, k, v))))
    monkeypatch.setattr(kernels, "WHOLE_ELEMENTS", 2**22)
    assert len(kernels._chunks(13, 48)) == 1 and len(kernels._chunks(1024, 8 * 256)) == 1  # performer at 1K
    assert len(kernels._chunks(2048, 8)) > 1 and len(kernels._chunks(1024, 2**13)) > 1  # long, or wide
    assert max_diff(results[0][0], results[1][0]) <= TOL64
    assert all(max_diff(a, b) <= TOL64 for a, b in zip(results[0][1], results[1][1]))


def test_fused_kernel_output_merges_heads_without_a_copy():
    """The output is laid out (B, L, H, D): the layer's merge of the heads is a view."""
    q, k, v = qkv(q_len=6, dim=4)
    core = build("linear", dim=4)
    core.fused = True  # by default a call this short takes the plain path
    out = core(q, k, v).values
    merged = out.transpose(1, 2).reshape(2, 6, 8)
    assert merged.data_ptr() == out.data_ptr() and merged.is_contiguous()


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_fused_kernel_attention_compiles_into_one_graph_with_its_gradient(name):
    q, k, v = (t.float().requires_grad_() for t in qkv(q_len=8, dim=4))
    core = build(name, dim=4, dtype=torch.float32, **KERNEL_SETTINGS[name])
    core.fused = True  # the fused Function itself (a call this short takes the plain path by default)
    keep = padding_keep(2, 8, [6, 8])
    compiled = torch.compile(lambda q, k, v: core(q, k, v, keep).values, fullgraph=True, backend="aot_eager")
    out = compiled(q, k, v)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    ref = core(q, k, v, keep).values
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    assert max_diff(out, ref) <= 1e-5
    assert all(max_diff(g, r) <= 1e-4 for g, r in zip(grads, ref_grads))
