"""The fused attention Functions of the content-routed entries (hf_xcv/attention/_fused_routed.py): float64
gradcheck of each Function, and equality (values and every gradient, to 1e-10) of the fused path of ``lsh``,
``routing`` and ``sinkhorn`` with their plain autograd path (``core.fused = False``), with padding, causality and
a bias that requires grad where the entry takes them, for one and for many chunks, on the (B, L, H, D) layout a
layer hands over. Peak memory is the benchmark's business (benchmarks/bench_attention.py)."""

from __future__ import annotations

import pytest
import torch

from hf_xcv.attention import _fused_routed, build_attention, get_attention_class
from hf_xcv.attention._fused_routed import gathered_attention, sorted_block_attention, unit_distance
from hf_xcv.attention.registry import AttentionCall

HEADS, DIM, LENGTH = 2, 8, 23
TOL = 1e-10


def layer_layout(*shape_bhld: int, seed: int) -> torch.Tensor:
    """A (B, H, L, D) float64 leaf seen through a (B, L, H, D) tensor, as a layer's projections hand it over."""
    batch, heads, length, dim = shape_bhld
    generator = torch.Generator().manual_seed(seed)
    data = torch.randn(batch, length, heads, dim, generator=generator, dtype=torch.float64)
    return data.transpose(1, 2).requires_grad_()


def grads_of(core, q, k, v, bias, keep, causal, fused):
    """Values and the gradients of q, k, v, the bias and the core's parameters under a fixed upstream."""
    core.fused = fused
    state = {name: tensor.clone() for name, tensor in core.state_dict().items()}  # routing moves its centroids
    extra = {} if bias is None else {"attention_bias": bias}
    result = core(q, k, v, attention_mask=keep, causal=causal, **extra)
    upstream = torch.randn(result.values.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    loss = (result.values * upstream).sum() + (0.0 if result.aux_loss is None else 10.0 * result.aux_loss)
    inputs = [q, k, v] + ([bias] if bias is not None else []) + [p for p in core.parameters()]
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    core.load_state_dict(state)
    return result.values.detach(), grads


ENTRY_CASES = [
    ("lsh", {"chunk_length": 4, "num_buckets": 4, "n_hashes": 2}),
    ("lsh", {"chunk_length": 4, "num_buckets": 4, "n_hashes": 1}),
    ("lsh", {"chunk_length": 4, "num_buckets": 4, "n_hashes": 2, "shared_qk": False, "chunks_after": 1}),
    ("routing", {"num_clusters": 4}),
    ("routing", {"num_clusters": 3, "window_size": 9}),
    ("sinkhorn", {"block_size": 4, "max_blocks": 16, "seed": 5}),
]


@pytest.mark.parametrize("chunk_elements", [1, 1 << 20], ids=["many_chunks", "one_chunk"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["no_padding", "padding"])
@pytest.mark.parametrize("case", ENTRY_CASES, ids=lambda case: f"{case[0]}-{'-'.join(map(str, case[1].values()))}")
def test_fused_path_equals_the_plain_autograd_path(case, padded, causal, chunk_elements, monkeypatch):
    name, kwargs = case
    monkeypatch.setattr(_fused_routed, "CHUNK_ELEMENTS", chunk_elements)
    monkeypatch.setattr(_fused_routed, "SLAB_ELEMENTS", chunk_elements)  # Sinkhorn: several slabs, or one
    torch.manual_seed(0)
    core = build_attention(name, HEADS, DIM, **kwargs).double().train()  # training: Gumbel noise, centroid EMA
    q, k, v = (layer_layout(2, HEADS, LENGTH, DIM, seed=seed) for seed in (0, 1, 2))
    keep = None
    if padded:
        keep = torch.ones(2, 1, 1, LENGTH, dtype=torch.bool)
        keep[1, ..., -6:] = False
    bias = None
    if core.capabilities.attention_bias:
        bias = torch.randn(1, HEADS, LENGTH, LENGTH, dtype=torch.float64, requires_grad=True)
    plain_values, plain_grads = grads_of(core, q, k, v, bias, keep, causal, fused=False)
    fused_values, fused_grads = grads_of(core, q, k, v, bias, keep, causal, fused=True)
    assert (fused_values - plain_values).abs().max().item() < TOL
    for plain, fused in zip(plain_grads, fused_grads):
        assert (plain is None) == (fused is None)
        if plain is not None:
            assert (plain - fused).abs().max().item() < TOL


@pytest.mark.parametrize("name", ["lsh", "routing", "sinkhorn"])
def test_fused_path_serves_plain_calls_only(name):
    """Returned weights, attention dropout and torch.compile tracing keep the plain autograd path."""
    core = build_attention(name, HEADS, DIM, **get_attention_class(name).small_kwargs)
    call = AttentionCall(None, None, False, False, None, 0, None, 0.0, 1.0, False, None, core)
    q = torch.zeros(1, HEADS, 4, DIM)
    assert core._use_fused(call, q)
    assert not core._use_fused(call._replace(output_weights=True), q)
    assert not core._use_fused(call._replace(dropout=0.1), q)
    assert not core._use_fused(call, q.to("meta"))  # off the CPU: the plain path unless fused = True
    core.fused = False
    assert not core._use_fused(call, q)


# ------------------------------------------------------------------------------------------ gradcheck


def index_groups(batch, heads, groups, width, length, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, length, (batch, heads, groups, width), generator=generator)


@pytest.mark.parametrize("self_logit", [None, -1e5], ids=["no_self", "self_logit"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_gathered_attention_gradcheck(causal, self_logit):
    """out and lse (the LSH rounds mix by it) against q, k, v and a broadcast bias, padded keys, two chunks."""
    batch, length = 2, 7
    q, k, v = (layer_layout(batch, HEADS, length, 3, seed=seed) for seed in (0, 1, 2))
    bias = torch.randn(1, HEADS, length, length, dtype=torch.float64, requires_grad=True)
    q_idx, k_idx = index_groups(batch, HEADS, 3, 2, length, 4), index_groups(batch, HEADS, 3, 4, length, 5)
    key_ok = torch.ones(batch, length, dtype=torch.bool)
    key_ok[1, -3:] = False

    def run(q, k, v, bias):
        out, lse, served = gathered_attention(
            q,
            k,
            v,
            q_idx,
            k_idx,
            key_ok=key_ok,
            causal_offset=0 if causal else None,
            self_logit=self_logit,
            scaling=0.7,
            bias=bias,
            chunk_elements=HEADS * batch * 2 * 4 * 2,  # two groups a chunk
        )
        return out, lse.masked_fill(~served, 0.0)

    assert torch.autograd.gradcheck(run, (q, k, v, bias))


@pytest.mark.parametrize("chunk_elements", [1, 1 << 20], ids=["recomputed", "kept"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_sorted_block_attention_gradcheck(causal, chunk_elements):
    """Against q, k, v and the soft permutation, with a padded key: one block a chunk (recomputed in backward),
    or all in one chunk (kept for backward)."""
    batch, blocks, block = 1, 3, 2
    shape = (batch, HEADS, blocks, block, 3)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=generator, dtype=torch.float64).requires_grad_() for _ in range(3))
    perm = torch.rand(batch, HEADS, blocks, blocks, generator=generator, dtype=torch.float64)
    if causal:
        perm = perm.tril(-1)
    perm.requires_grad_()
    valid = torch.ones(batch, 1, blocks, block, dtype=torch.bool)
    valid[..., -1, -1] = False
    keep_sorted = (torch.einsum("bhij,bjt->bhit", perm.detach(), valid[:, 0].double()) > 0).expand(
        batch, HEADS, blocks, block
    )
    keep_local = valid.unsqueeze(-2)
    if causal:
        keep_local = keep_local & torch.ones(block, block, dtype=torch.bool).tril()

    def run(q, k, v, perm):
        return sorted_block_attention(q, k, v, perm, keep_sorted, keep_local, 0.8, chunk_elements=chunk_elements)

    assert torch.autograd.gradcheck(run, (q, k, v, perm))


def test_unit_distance_gradcheck_and_value():
    """The routing commitment's per-point distance, chunked (one position a chunk) and not."""
    x = layer_layout(2, HEADS, 5, 4, seed=0)
    centroids = torch.nn.functional.normalize(torch.randn(HEADS, 3, 4, dtype=torch.float64), dim=-1)
    nearest = torch.randint(0, 3, (2, HEADS, 5), generator=torch.Generator().manual_seed(1))
    heads = torch.arange(HEADS).view(1, -1, 1)
    zero = x.detach().clone()
    zero[0, 0, 1] = 0.0  # a zero vector: normalize's floor, as F.normalize
    for points in (x, zero):
        expected = (torch.nn.functional.normalize(points, dim=-1) - centroids[heads, nearest]).pow(2).mean(-1)
        assert (unit_distance(points, centroids, nearest) - expected).abs().max().item() < 1e-15
    assert torch.autograd.gradcheck(lambda x: unit_distance(x, centroids, nearest), (x,))
    _fused_routed.CHUNK_ELEMENTS, saved = 1, _fused_routed.CHUNK_ELEMENTS
    try:
        assert torch.autograd.gradcheck(lambda x: unit_distance(x, centroids, nearest), (x,))
    finally:
        _fused_routed.CHUNK_ELEMENTS = saved
