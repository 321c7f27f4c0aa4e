"""The fused gathered-block attention (``_flash``) and the blocked entries that run on it: gradcheck of the autograd
Function, and equality (values and every gradient, float64, <= 1e-10) with the unfused path on autograd's graph
(``core.fused = False``) under padding, a bias that requires grad, causality, prefix tokens and decoding."""

from __future__ import annotations

import pytest
import torch
from attention_testing import TOL64, build, max_diff, padding_keep, qkv

from hf_xcv.attention._flash import gathered_block_attention


def random_blocks(q_len=7, kv_len=9, blocks=3, queries=3, width=4, seed=0):
    """Block indices with empty slots (index == length), a random keep mask with a fully masked query row."""
    g = torch.Generator().manual_seed(seed)
    q_index = torch.randperm(q_len + 2, generator=g)[: blocks * queries].view(blocks, queries).clamp(max=q_len)
    k_index = torch.randint(0, kv_len + 1, (blocks, width), generator=g)
    keep = torch.rand(2, 1, blocks, queries, width, generator=g) < 0.7  # (B, 1, N, Q, W)
    keep[0, 0, 1, 2] = False  # a query with nothing to attend
    return q_index, k_index, keep


def dense_blocks(q, k, v, q_index, k_index, keep, scaling, bias=None, shared=None):
    """Reference: the blocks one by one on autograd's graph, with plain masked softmax."""
    out = torch.zeros_like(q)
    kp = torch.cat([k, k[:, :, :1]], dim=2)  # index Lk: a dummy row, always masked
    vp = torch.cat([v, v[:, :, :1]], dim=2)
    keep = keep & (k_index < k.shape[2])[:, None, :]
    for n in range(q_index.shape[0]):
        kn, vn, keep_n = kp[:, :, k_index[n]], vp[:, :, k_index[n]], keep[:, :, n]  # (B, H, W, D), (B, 1, Q, W)
        if shared is not None:
            kn, vn = torch.cat([kn, shared[0]], dim=2), torch.cat([vn, shared[1]], dim=2)
            keep_n = torch.cat([keep_n.expand(-1, -1, q_index.shape[1], -1), shared[2][:, :, n]], dim=-1)
        rows = q_index[n][q_index[n] < q.shape[2]]
        qn = q[:, :, rows]
        scores = qn @ kn.transpose(-1, -2) * scaling
        keep_n = keep_n[:, :, q_index[n] < q.shape[2]]
        if bias is not None:
            scores = scores + bias[:, :, n][:, :, q_index[n] < q.shape[2]]
        scores = scores.masked_fill(~keep_n, float("-inf"))
        probs = torch.softmax(scores, -1).nan_to_num(0.0)
        out = out.index_put(
            (torch.arange(q.shape[0])[:, None, None], torch.arange(q.shape[1])[:, None], rows), probs @ vn
        )
    return out


def inputs(seed=0, shared_keys=0, q_len=7, kv_len=9):
    q, k, v = qkv(batch=2, heads=2, q_len=q_len, kv_len=kv_len, dim=3, seed=seed)
    q_index, k_index, keep = random_blocks(q_len, kv_len, seed=seed)
    shared = None
    if shared_keys:
        g = torch.Generator().manual_seed(seed + 1)
        sk, sv = (torch.randn(2, 2, shared_keys, 3, generator=g, dtype=torch.float64) for _ in range(2))
        shared = (sk, sv, torch.rand(2, 1, 3, 3, shared_keys, generator=g) < 0.8)
    bias = torch.randn(2, 1, 3, 3, 4 + shared_keys, dtype=torch.float64)
    return q, k, v, q_index, k_index, keep, bias, shared


@pytest.mark.parametrize("shared_keys", [0, 2])
@pytest.mark.parametrize("chunk_blocks", [None, 1, 2])
def test_gathered_block_attention_equals_blocks_one_by_one(shared_keys, chunk_blocks):
    q, k, v, q_index, k_index, keep, bias, shared = inputs(shared_keys=shared_keys)
    out = gathered_block_attention(q, k, v, q_index, k_index, keep, 0.7, bias, shared, chunk_blocks=chunk_blocks)
    want = dense_blocks(q, k, v, q_index, k_index, keep, 0.7, bias, shared)
    assert max_diff(out, want) < TOL64


@pytest.mark.parametrize("shared_keys", [0, 2])
def test_gathered_block_attention_gradcheck(shared_keys):
    q, k, v, q_index, k_index, keep, bias, shared = inputs(shared_keys=shared_keys)
    tensors = [q, k, v, bias] + ([shared[0], shared[1]] if shared else [])
    for t in tensors:
        t.requires_grad_(True)

    def run(q, k, v, bias, *shared_kv):
        pair = (shared_kv[0], shared_kv[1], shared[2]) if shared else None
        return gathered_block_attention(q, k, v, q_index, k_index, keep, 0.7, bias, pair, chunk_blocks=2)

    assert torch.autograd.gradcheck(run, tensors)


def test_gathered_block_attention_per_head_indices_and_low_precision():
    q, k, v, q_index, k_index, keep, _, _ = inputs()
    # (B, H, N, Q) / (B, H, N, W) indices equal to the shared ones give the same result.
    per_head = gathered_block_attention(
        q, k, v, q_index.expand(2, 2, -1, -1), k_index.expand(2, 2, -1, -1), keep, 0.7, chunk_blocks=1
    )
    assert max_diff(per_head, gathered_block_attention(q, k, v, q_index, k_index, keep, 0.7)) < TOL64
    half = gathered_block_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), q_index, k_index, keep, 0.7)
    assert half.dtype == torch.bfloat16 and max_diff(half.double(), per_head) < 0.05


def entry_grads(core, q, k, v, bias, **call):
    """Values and the gradients of q, k, v and the bias of one call with a fixed upstream gradient."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, bias) if t is not None]
    out = core(*leaves[:3], attention_bias=bias if bias is None else leaves[3], **call).values
    upstream = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    params = [p for p in core.parameters() if p.requires_grad]  # memory_compressed's convolutions
    grads = torch.autograd.grad(out, leaves + params, upstream)
    return [out, *grads]


CASES = [  # (entry, kwargs, grid, prefix tokens, bias)
    ("local", {"block_size": 4, "memory_flange": 2}, None, 0, True),
    ("local", {"block_size": 5, "memory_flange": 3}, None, 2, True),
    ("local", {"block_size": 4}, None, 1, True),
    ("local_2d", {"query_shape": (2, 3), "memory_flange": (1, 1)}, (4, 5), 1, True),
    ("axial", {}, (4, 5), 1, False),
    ("axial", {}, (4, 5), 0, False),  # both passes in one fused Function
    ("axial", {"passes": "column"}, (4, 5), 0, False),
    ("memory_compressed", {"compression": 2, "block_size": 4}, None, 1, False),
    ("memory_compressed", {"compression": 3, "block_size": 0}, None, 0, False),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name, kwargs, grid, prefix, with_bias", CASES)
def test_fused_entry_equals_the_unfused_path_with_gradients(name, kwargs, grid, prefix, with_bias, causal):
    length = prefix + (grid[0] * grid[1] if grid else 21)
    q, k, v = qkv(q_len=length)
    bias = torch.randn(2, 1, length, length, dtype=torch.float64) if with_bias else None
    keep = padding_keep(2, length, [length, length - 6])
    call = {"attention_mask": keep, "causal": causal, "grid": grid, "prefix_tokens": prefix}
    core = build(name, **kwargs)
    fused = entry_grads(core, q, k, v, bias, **call)
    core.fused = False
    unfused = entry_grads(core, q, k, v, bias, **call)
    assert len(fused) == len(unfused)
    for a, b in zip(fused, unfused):
        assert max_diff(a, b) < TOL64


@pytest.mark.parametrize("name", ["local", "memory_compressed"])
def test_fused_entry_decoding_with_fewer_queries_equals_the_unfused_path(name):
    q, k, v = qkv(q_len=19)
    kwargs = {"block_size": 4} if name == "local" else {"compression": 2, "block_size": 4}
    core = build(name, **kwargs)
    fused = entry_grads(core, q[:, :, -6:], k, v, None, causal=True)
    core.fused = False
    unfused = entry_grads(core, q[:, :, -6:], k, v, None, causal=True)
    assert len(fused) == len(unfused)
    for a, b in zip(fused, unfused):
        assert max_diff(a, b) < TOL64


def test_fused_local_gradcheck_with_padding_bias_and_prefix():
    q, k, v = qkv(q_len=11, dim=3)
    bias = torch.randn(2, 1, 11, 11, dtype=torch.float64)
    leaves = [t.requires_grad_(True) for t in (q, k, v, bias)]
    core = build("local", block_size=3, memory_flange=2)
    keep = padding_keep(2, 11, [11, 6])

    def run(q, k, v, bias):
        return core(q, k, v, attention_mask=keep, causal=True, prefix_tokens=1, attention_bias=bias).values

    assert torch.autograd.gradcheck(run, leaves)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_axial_row_column_gradcheck_with_padding(causal):
    q, k, v = qkv(q_len=12, dim=3)
    leaves = [t.requires_grad_(True) for t in (q, k, v)]
    core = build("axial")
    keep = padding_keep(2, 12, [12, 7])

    def run(q, k, v):
        return core(q, k, v, attention_mask=keep, causal=causal, grid=(3, 4)).values

    assert torch.autograd.gradcheck(run, leaves)
