"""The content-routed entries: Reformer LSH (``lsh``), Routing Transformer (``routing``), Sparse Sinkhorn
(``sinkhorn``). Their defining properties, parity of ``lsh`` with transformers' ``LSHSelfAttention``, and
error messages. The registry-wide checks (exact settings, padding, causal values, seeds) live in
test_attention_entries.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from attention_testing import TOL64, max_diff, padding_keep, qkv, reference
from transformers import ReformerConfig
from transformers.models.reformer.modeling_reformer import LSHSelfAttention

from hf_xcv.attention import build_attention, causal_keep_mask, dense_attention, get_attention_class
from hf_xcv.attention.lsh import LSHAttention
from hf_xcv.attention.routing import RoutingAttention
from hf_xcv.attention.sinkhorn import sinkhorn

HEADS, DIM = 2, 8


def build(name: str, heads: int = HEADS, dim: int = DIM, dtype=torch.float64, init_seed: int = 0, **kwargs):
    """An entry in eval mode, its parameters drawn under ``init_seed``; ``kwargs`` (``seed`` included) are its own."""
    torch.manual_seed(init_seed)
    return build_attention(name, heads, dim, **kwargs).to(dtype).eval()


def unit_keys(q: torch.Tensor) -> torch.Tensor:
    """Reformer's shared keys, written from transformers' formula: q * rsqrt(mean(q^2) + 1e-6) / sqrt(D)."""
    return q / torch.sqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) / math.sqrt(q.shape[-1])


def saved_numels(fn) -> list[int]:
    """Sizes of every tensor autograd saves for backward while ``fn`` runs."""
    sizes: list[int] = []

    def pack(tensor):
        sizes.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return sizes


# ---------------------------------------------------------------------------------------------- lsh


def hf_lsh_case(length, chunk, buckets, hashes, causal, pad, dtype, after=0, seed=7):
    """transformers' LSHSelfAttention and this core on the same weights, inputs and hash seed."""
    config = ReformerConfig(
        hidden_size=HEADS * DIM,
        num_attention_heads=HEADS,
        attention_head_size=DIM,
        lsh_attn_chunk_length=chunk,
        num_buckets=buckets,
        num_hashes=hashes,
        hash_seed=seed,
        is_decoder=causal,
        lsh_num_chunks_before=1,
        lsh_num_chunks_after=after,
        lsh_attention_probs_dropout_prob=0.0,
        max_position_embeddings=length,
        attn_layers=["lsh"],
    )
    torch.manual_seed(0)
    hf = LSHSelfAttention(config).to(dtype).eval()
    hidden = torch.randn(2, length, HEADS * DIM, dtype=dtype)
    mask = None
    if pad is not None:
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, pad:] = 0
    expected = hf(hidden, attention_mask=mask).hidden_states  # (B, L, H*D)
    qk = hf.query_key(hidden).view(2, length, HEADS, DIM).transpose(1, 2)  # the shared projection
    v = hf.value(hidden).view(2, length, HEADS, DIM).transpose(1, 2)
    core = LSHAttention(
        HEADS, DIM, chunk_length=chunk, num_buckets=buckets, n_hashes=hashes, chunks_after=after, seed=seed
    ).eval()
    keep = None if mask is None else mask.bool()[:, None, None, :]
    # k is ignored under shared query-key: pass noise to show it
    out = core(qk, torch.randn_like(qk), v, attention_mask=keep, causal=causal).values
    out = out.transpose(1, 2).reshape(2, length, HEADS * DIM)
    real = length if pad is None else pad
    return max(max_diff(out[0], expected[0]), max_diff(out[1, :real], expected[1, :real]))


@pytest.mark.parametrize(
    "length,chunk,buckets,hashes,causal,pad,after",
    [
        (16, 4, 4, 1, False, None, 0),
        (16, 4, 4, 3, False, None, 0),
        (16, 4, 4, 2, True, None, 0),
        (32, 8, 8, 4, True, None, 0),
        (16, 4, 4, 2, False, 11, 0),
        (16, 4, 4, 2, True, 11, 0),
        (24, 4, 6, 2, False, None, 1),  # a chunk after as well
        (8, 8, 2, 2, False, None, 0),  # one chunk: transformers falls back to full attention
    ],
)
def test_lsh_equals_transformers_reformer_lsh_self_attention(length, chunk, buckets, hashes, causal, pad, after):
    # transformers' -1e5 self logit costs it ~1e-11 on rows that can only see themselves
    assert hf_lsh_case(length, chunk, buckets, hashes, causal, pad, torch.float64, after) < 1e-10


def test_lsh_equals_transformers_in_float32():
    # bidirectional: causal rows that see only themselves carry transformers' float32 rounding of -1e5 (~4e-3)
    assert hf_lsh_case(16, 4, 4, 2, False, 11, torch.float32) < 1e-5


def test_lsh_one_round_two_chunks_is_full_shared_qk_attention_without_self():
    """n_hashes=1, 2 buckets, chunk = L/2: every window holds every key. Keys are the unit queries, logits are
    not scaled, and a token sees itself only when nothing else is visible (the first token, causally)."""
    length = 16
    q, k, v = qkv(q_len=length)
    core = build("lsh", chunk_length=length // 2, num_buckets=2, n_hashes=1)
    eye = torch.eye(length, dtype=torch.bool)
    for causal in (False, True):
        visible = causal_keep_mask(length, length) if causal else torch.ones(length, length, dtype=torch.bool)
        others = visible & ~eye
        keep = others | (eye & ~others.any(-1, keepdim=True))
        expected, _ = dense_attention(q, unit_keys(q), v, keep, scaling=1.0)
        assert max_diff(core(q, k, v, causal=causal).values, expected) < TOL64


def test_lsh_shared_qk_ignores_k_and_scale_logits_applies_the_scaling():
    q, k, v = qkv(q_len=16)
    core = build("lsh", chunk_length=8, num_buckets=2)
    assert torch.equal(core(q, k, v).values, core(q, torch.randn_like(k), v).values)
    scaled = build("lsh", chunk_length=8, num_buckets=2, scale_logits=True)
    eye = torch.eye(16, dtype=torch.bool)
    expected, _ = dense_attention(q, unit_keys(q), v, ~eye, scaling=0.25)
    assert max_diff(scaled(q, k, v, scaling=0.25).values, expected) < TOL64


def test_lsh_identical_rounds_combine_to_one_round():
    """n rounds with the same rotation: the log-sum-exp weights must reproduce the single round."""
    q, k, v = qkv(q_len=24)
    one = build("lsh", chunk_length=4, num_buckets=4, n_hashes=1)
    three = build("lsh", chunk_length=4, num_buckets=4, n_hashes=3)
    single = one._rotations(DIM, 4, torch.float64, q.device)  # (H, D, 1, buckets/2)
    three._rotations = lambda *args: single.expand(-1, -1, 3, -1)
    for causal in (False, True):
        assert max_diff(three(q, k, v, causal=causal).values, one(q, k, v, causal=causal).values) < TOL64


def test_lsh_more_hashes_approximate_full_attention_better():
    """The paper's claim: the error against full shared-QK attention falls as rounds are added."""
    length, dim = 128, 16
    errors = {}
    for hashes in (1, 8):
        total = 0.0
        for seed in range(2):
            q, _, v = qkv(batch=1, q_len=length, dim=dim, seed=seed)
            q = q * 2  # peaky logits, where bucketing matters
            core = build("lsh", dim=dim, chunk_length=8, num_buckets=16, n_hashes=hashes, seed=seed)
            exact, _ = dense_attention(q, unit_keys(q), v, ~torch.eye(length, dtype=torch.bool), scaling=1.0)
            total += ((core(q, q, v).values - exact).norm() / exact.norm()).item()
        errors[hashes] = total / 2
    assert errors[8] < 0.6 * errors[1]


def test_lsh_weights_are_a_distribution_reproducing_the_output_and_avoiding_self():
    q, k, v = qkv(q_len=24)
    core = build("lsh", chunk_length=4, num_buckets=4, n_hashes=3)
    for causal in (False, True):
        out = core(q, k, v, causal=causal, output_weights=True)
        assert max_diff(out.weights @ v, out.values) < TOL64
        assert max_diff(out.weights.sum(-1), torch.ones(2, HEADS, 24, dtype=q.dtype)) < TOL64
        # a token attends to itself only when nothing else is visible to it in any round: weight 0 or 1
        diagonal = out.weights.diagonal(dim1=-2, dim2=-1)  # (B, H, L)
        alone = (diagonal - 1).abs() < TOL64
        assert torch.all(alone | (diagonal.abs() < 1e-30))
        assert alone[..., 0].all() == causal  # causally, the first token has only itself
        sparse = (out.weights > 0).float().mean().item()
        assert sparse < 0.9


def test_lsh_padding_never_regroups_the_real_tokens():
    """Padded tokens go to an extra bucket: their (shared) query-keys cannot change the real tokens' chunks."""
    q, k, v = qkv(q_len=16)
    keep = padding_keep(2, 16, [16, 10])
    core = build("lsh", chunk_length=4, num_buckets=4, n_hashes=2)
    out = core(q, k, v, attention_mask=keep).values
    q2 = q.clone()
    q2[1, :, 10:] = torch.randn_like(q2[1, :, 10:]) * 10
    assert max_diff(core(q2, k, v, attention_mask=keep).values[1, :, :10], out[1, :, :10]) == 0.0


def test_lsh_separate_keys_follow_their_dense_mask():
    """shared_qk=False with one round: softmax attention under a content-dependent pattern."""
    for length in (16, 13):
        q, k, v = qkv(q_len=length)
        core = build("lsh", chunk_length=4, num_buckets=4, n_hashes=1, shared_qk=False)
        for causal in (False, True):
            pattern = core.dense_mask(q, k, causal=causal)
            assert not pattern.all() and (causal or pattern.any(-1).all())
            assert max_diff(core(q, k, v, causal=causal).values, reference(q, k, v, pattern)) < TOL64
    assert build("lsh").dense_mask(q, k) is None  # shared keys: not plain attention on k
    assert build("lsh", shared_qk=False, n_hashes=2).dense_mask(q, k) is None


def test_lsh_rotations_follow_the_seed_or_the_global_generator():
    q, k, v = qkv(q_len=16)
    kwargs = {"chunk_length": 4, "num_buckets": 4, "n_hashes": 2}
    seeded = build("lsh", seed=1, **kwargs)
    assert torch.equal(seeded(q, k, v).values, seeded(q, k, v).values)
    assert max_diff(build("lsh", seed=2, **kwargs)(q, k, v).values, seeded(q, k, v).values) > 1e-3
    unseeded = build("lsh", seed=None, **kwargs)
    torch.manual_seed(1)
    assert torch.equal(unseeded(q, k, v).values, seeded(q, k, v).values)  # the global generator seeded alike
    assert max_diff(unseeded(q, k, v).values, seeded(q, k, v).values) > 1e-3  # ... then moved on
    with pytest.raises(ValueError, match="seed"):
        build("lsh", seed=None, shared_qk=False, n_hashes=1).dense_mask(q, k)


def test_lsh_refuses_bad_settings_and_calls_by_name():
    for kwargs, word in [
        ({"num_buckets": 3}, "num_buckets"),
        ({"chunk_length": 0}, "chunk_length"),
        ({"n_hashes": 0}, "n_hashes"),
        ({"chunks_before": -1}, "chunks_before"),
        ({"seed": 1.5}, "seed"),
    ]:
        with pytest.raises(ValueError, match=word):
            build("lsh", **kwargs)
    q, k, v = qkv(q_len=8, kv_len=12)
    core = build("lsh")
    assert core.length_problems(8, 12)
    with pytest.raises(ValueError, match="8 queries and 12 keys"):
        core(q, k, v)
    q, k, v = qkv(q_len=8)
    with pytest.raises(ValueError, match="state"):
        core(q, k, v, state=object())
    with pytest.raises(ValueError, match="key padding mask"):
        core(q, k, v, attention_mask=torch.ones(2, 1, 8, 8, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------- routing


def test_routing_one_cluster_is_full_attention_also_for_cross_attention():
    q, k, v = qkv(q_len=6, kv_len=10)
    core = build("routing", **RoutingAttention.exact_kwargs(10))
    keep = padding_keep(2, 10, [10, 7])
    for causal in (False, True):
        tri = causal_keep_mask(6, 10) if causal else torch.ones(6, 10, dtype=torch.bool)
        out = core(q, k, v, attention_mask=keep, causal=causal).values
        assert max_diff(out, reference(q, k, v, keep & tri)) < TOL64


def two_groups(length: int = 16):
    """Tokens of the first half point along e0, of the second half along e1 (plus small noise)."""
    q, k, v = qkv(q_len=length)
    direction = torch.zeros(length, DIM, dtype=q.dtype)
    direction[: length // 2, 0] = 4.0
    direction[length // 2 :, 1] = 4.0
    return q * 0.1 + direction, k * 0.1 + direction, v


def set_axis_centroids(core: RoutingAttention) -> None:
    core.means.zero_()
    core.means[:, 0, 0] = 1.0
    core.means[:, 1, 1] = 1.0


def test_routing_clusters_are_isolated_and_balanced():
    q, k, v = two_groups()
    core = build("routing", num_clusters=2)
    set_axis_centroids(core)
    out = core(q, k, v, output_weights=True)
    # each cluster took exactly its own half: group A's rows put no weight on group B's keys
    assert out.weights[..., :8, 8:].abs().max().item() == 0.0
    assert out.weights[..., 8:, :8].abs().max().item() == 0.0
    v2 = v.clone()
    v2[:, :, 8:] += 5.0
    assert max_diff(core(q, k, v2).values[:, :, :8], out.values[:, :, :8]) == 0.0
    # within its half, a row is plain attention over that half
    block = torch.zeros(16, 16, dtype=torch.bool)
    block[:8, :8] = block[8:, 8:] = True
    assert max_diff(out.values, reference(q, k, v, block)) < TOL64


def test_routing_top_k_averages_multiply_picked_queries_and_zeroes_unpicked_ones():
    q, k, v = qkv(q_len=16)
    core = build("routing", num_clusters=4, window_size=3)  # 12 picks for 16 queries: some unpicked
    out = core(q, k, v, output_weights=True)
    assert max_diff(out.weights @ v, out.values) < TOL64
    rows = out.weights.sum(-1)  # 1 for picked queries, 0 for the others
    assert torch.all(((rows - 1).abs() < 1e-12) | (rows == 0)) and (rows == 0).any()
    assert max_diff(out.values[rows == 0], torch.zeros(1, dtype=q.dtype)) == 0.0
    assert ((out.weights > 0).sum(-1) <= 3 * 4).all()  # at most window_size keys per picking cluster


def test_routing_centroids_move_by_ema_in_training_only_and_are_saved():
    q, k, v = two_groups()
    core = build("routing", num_clusters=2, ema_decay=0.0)
    set_axis_centroids(core)
    before = core.means.clone()
    core(q, k, v)
    assert torch.equal(core.means, before)  # eval: frozen
    core.train()(q, k, v)
    # decay 0: each centroid becomes the normalised mean of its nearest (unit) queries and keys
    units = torch.cat([q, k], dim=2) / torch.cat([q, k], dim=2).norm(dim=-1, keepdim=True)  # (B, H, 2L, D)
    first = torch.cat([units[:, :, :8], units[:, :, 16:24]], dim=2).mean((0, 2))  # (H, D)
    assert max_diff(core.means[:, 0], first / first.norm(dim=-1, keepdim=True)) < 1e-12
    assert max_diff(core.means.norm(dim=-1), torch.ones(HEADS, 2, dtype=q.dtype)) < 1e-12
    assert "means" in core.state_dict()
    other = build("routing", init_seed=5, num_clusters=2)
    other.load_state_dict(core.state_dict())
    core.eval()
    assert torch.equal(other(q, k, v).values, core(q, k, v).values)


def test_routing_commitment_loss_pulls_queries_and_keys_to_their_centroids():
    q, k, v = two_groups()
    core = build("routing", num_clusters=2, commitment=1.0)
    set_axis_centroids(core)
    on_centroids = torch.zeros_like(q)
    on_centroids[..., :8, 0] = 3.0
    on_centroids[..., 8:, 1] = 3.0
    assert core(on_centroids, on_centroids, v).aux_loss.item() < 1e-24
    q = q.clone().requires_grad_()
    loss = core(q, k, v).aux_loss
    units = torch.cat([q, k], dim=2) / torch.cat([q, k], dim=2).norm(dim=-1, keepdim=True)
    nearest = torch.zeros_like(units)
    nearest[..., [*range(8), *range(16, 24)], 0] = 1.0
    nearest[..., [*range(8, 16), *range(24, 32)], 1] = 1.0
    assert abs(loss.item() - (units - nearest).pow(2).mean().item()) < 1e-12
    loss.backward()
    assert q.grad.abs().sum() > 0 and not core.means.requires_grad


def test_routing_refuses_bad_settings_by_name():
    for kwargs, word in [
        ({"num_clusters": 0}, "num_clusters"),
        ({"window_size": 0}, "window_size"),
        ({"ema_decay": 1.0}, "ema_decay"),
        ({"commitment": -1.0}, "commitment"),
    ]:
        with pytest.raises(ValueError, match=word):
            build("routing", **kwargs)
    q, k, v = qkv(q_len=8)
    with pytest.raises(ValueError, match="state"):
        build("routing")(q, k, v, state=object())


# ---------------------------------------------------------------------------------------------- sinkhorn


def test_sinkhorn_balancing_is_doubly_stochastic_and_causal_balancing_is_lower_triangular():
    logits = torch.randn(3, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    everything = torch.ones(5, 5, dtype=torch.bool)
    p = sinkhorn(logits, everything, 50, causal=False)
    assert max_diff(p.sum(-1), torch.ones(3, 5, dtype=p.dtype)) < 1e-8
    assert max_diff(p.sum(-2), torch.ones(3, 5, dtype=p.dtype)) < 1e-12
    past = everything.tril(-1)
    causal = sinkhorn(logits, past, 8, causal=True)
    assert causal.triu().abs().max().item() == 0.0  # slot i takes only blocks j < i
    # row i never depends on later rows: changing rows 3, 4 leaves rows 0..2 alone
    changed = logits.clone()
    changed[:, 3:] = torch.randn(3, 2, 5, dtype=torch.float64)
    assert max_diff(sinkhorn(changed, past, 8, causal=True)[:, :3], causal[:, :3]) == 0.0


def block_mask(length: int, block: int, order: list[int]) -> torch.Tensor:
    """Query block i sees its own block and block order[i]."""
    blocks = torch.arange(length) // block
    chosen = torch.tensor(order)[blocks]
    return (blocks[None, :] == blocks[:, None]) | (blocks[None, :] == chosen[:, None])


def test_sinkhorn_hard_permutation_is_own_block_plus_the_sorted_block():
    q, k, v = qkv(q_len=16)
    core = build("sinkhorn", block_size=4, max_blocks=4)
    for order in ([2, 0, 3, 1], [0, 1, 2, 3]):  # the identity duplicates the own block: no change
        hard = torch.eye(4, dtype=q.dtype)[order]  # row i picks block order[i]
        core.permutation = lambda *args, hard=hard: hard.expand(2, HEADS, 4, 4)
        out = core(q, k, v, output_weights=True)
        assert max_diff(out.values, reference(q, k, v, block_mask(16, 4, order))) < TOL64
        assert max_diff(out.weights @ v, out.values) < TOL64


def test_sinkhorn_causal_output_ignores_future_queries_keys_and_values():
    q, k, v = qkv(q_len=16)
    core = build("sinkhorn", block_size=4, max_blocks=4)
    out = core(q, k, v, causal=True)
    for cut in (5, 8, 11):
        q2, k2, v2 = (t.clone() for t in (q, k, v))
        for t in (q2, k2, v2):
            t[:, :, cut + 1 :] = torch.randn_like(t[:, :, cut + 1 :]) * 3
        changed = core(q2, k2, v2, causal=True).values
        assert max_diff(changed[:, :, : cut + 1], out.values[:, :, : cut + 1]) == 0.0
    weights = core(q, k, v, causal=True, output_weights=True).weights
    assert (weights * ~causal_keep_mask(16, 16)).abs().max().item() == 0.0


def test_sinkhorn_sorts_softly_and_learns_its_sorting_network():
    q, k, v = qkv(q_len=16, dtype=torch.float32)
    core = build("sinkhorn", dtype=torch.float32, block_size=4, max_blocks=8)
    keep = padding_keep(2, 16, [16, 10])
    out = core(q, k, v, attention_mask=keep, output_weights=True)
    local = block_mask(16, 4, [0, 1, 2, 3]) & keep
    assert max_diff(out.values, reference(q, k, v, local)) > 1e-3  # the sorted slot adds other blocks
    assert max_diff(out.weights @ v, out.values) < 1e-5
    out.values.square().sum().backward()
    for name in ("sort_w1", "sort_b1", "sort_w2", "sort_b2"):
        assert getattr(core, name).grad.abs().sum() > 0, name


def test_sinkhorn_gumbel_noise_only_in_training_and_from_the_seed():
    q, k, v = qkv(q_len=16)
    kwargs = {"block_size": 4, "max_blocks": 4, "seed": 3}
    core = build("sinkhorn", **kwargs)
    evaluated = core(q, k, v).values
    core.train()
    noisy = core(q, k, v).values
    assert max_diff(noisy, evaluated) > 1e-6
    assert torch.equal(core(q, k, v).values, noisy)  # the seed redraws the same noise
    other = build("sinkhorn", **{**kwargs, "seed": 4}).train()
    assert max_diff(other(q, k, v).values, noisy) > 1e-6


def test_sinkhorn_refuses_bad_settings_and_lengths_by_name():
    for kwargs, word in [
        ({"block_size": 0}, "block_size"),
        ({"max_blocks": 0}, "max_blocks"),
        ({"temperature": 0.0}, "temperature"),
        ({"sinkhorn_iters": -1}, "sinkhorn_iters"),
    ]:
        with pytest.raises(ValueError, match=word):
            build("sinkhorn", **kwargs)
    core = build("sinkhorn", block_size=4, max_blocks=3)
    assert core.length_problems(12, 12) == []
    q, k, v = qkv(q_len=13)
    with pytest.raises(ValueError, match="max_blocks=3"):
        core(q, k, v)
    q, k, v = qkv(q_len=8, kv_len=12)
    with pytest.raises(ValueError, match="8 queries, 12 keys"):
        core(q, k, v)


# ---------------------------------------------------------------------------------------------- all three


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("lsh", {"chunk_length": 16, "n_hashes": 2}),
        ("routing", {"num_clusters": 16}),
        ("sinkhorn", {"block_size": 32, "max_blocks": 64}),
    ],
)
def test_no_length_by_length_tensor_is_kept_for_backward(name, kwargs):
    length = 1024
    q, k, v = (t.requires_grad_() for t in qkv(batch=1, heads=1, q_len=length, dim=4, dtype=torch.float32))
    core = build(name, heads=1, dim=4, dtype=torch.float32, **kwargs)
    sizes = saved_numels(lambda: core(q, k, v, causal=True).values.sum().backward())
    assert sizes and max(sizes) < length * length // 8


@pytest.mark.parametrize("name", ["lsh", "routing", "sinkhorn"])
def test_bfloat16_runs(name):
    q, k, v = qkv(q_len=16, dtype=torch.bfloat16)
    core = build(name, dtype=torch.bfloat16, **get_attention_class(name).small_kwargs)
    out = core.train()(q, k, v, causal=True, attention_mask=padding_keep(2, 16, [16, 9])).values
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


@pytest.mark.parametrize(
    "name, setting",
    [
        ("lsh", {"shared_qk": "no"}),
        ("lsh", {"chunk_length": 2.5}),
        ("lsh", {"n_hashes": 2.0}),
        ("lsh", {"scale_logits": 1}),
        ("routing", {"window_size": 3.5}),
        ("routing", {"ema_decay": "0.9"}),
        ("sinkhorn", {"block_size": 4.5}),
        ("sinkhorn", {"temperature": 0}),
    ],
)
def test_settings_of_the_wrong_type_are_refused_when_built(name, setting):
    from hf_xcv.attention import build_attention

    with pytest.raises(ValueError, match=f"attention_type={name!r}: {next(iter(setting))}"):
        build_attention(name, 2, 8, **setting)
