"""Fixed-pattern entries: ``sparse_strided``, ``sparse_fixed``, ``longformer``, ``etc``, ``bigbird``.

The registry-wide checks (tests/test_attention_entries.py) compare each entry with its own ``dense_mask``.
Here the patterns themselves are checked against the papers' definitions (written again below, with loops),
with their defining properties (2-hop coverage, key counts, global rows and columns, random blocks), and the
outputs against transformers' LongformerSelfAttention and BigBirdBlockSparseAttention.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from attention_testing import TOL64, build, max_diff, padding_keep, qkv, reference, small
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import BigBirdConfig, LongformerConfig
from transformers.models.big_bird.modeling_big_bird import BigBirdBlockSparseAttention, BigBirdModel
from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

from hf_xcv.attention import MultiHeadAttention, build_attention, dense_attention
from hf_xcv.attention._patterns import pattern_counts

ENTRIES = ["sparse_strided", "sparse_fixed", "longformer", "etc", "bigbird"]
CAUSAL = {"sparse_strided", "sparse_fixed", "longformer"}


def loop_mask(length: int, allow) -> torch.Tensor:
    """(L, L) bool from a per-pair rule written in plain Python: the papers' definitions, independently."""
    return torch.tensor([[bool(allow(i, j)) for j in range(length)] for i in range(length)])


def mask_of(name: str, kwargs: dict, length: int, causal: bool, prefix: int = 0) -> torch.Tensor:
    return build(name, **kwargs).dense_mask(torch.zeros(1, 1, length, 1), None, causal=causal, prefix_tokens=prefix)


# ----------------------------------------------------------------------------------------------------------
# the machinery: disjoint pieces, dense equivalence with padding and prefix, weights, dropout, no (L x L)
# ----------------------------------------------------------------------------------------------------------

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


@pytest.mark.parametrize("name,kwargs,causal,prefix", CALLS)
def test_pieces_are_disjoint_and_reproduce_dense_attention(name, kwargs, causal, prefix):
    length, heads = 19, 3  # not a multiple of any block: the internal padding is exercised
    core = build(name, heads=heads, **kwargs)
    q, k, v = qkv(heads=heads, q_len=length)
    pattern = core.dense_mask(q, k, causal=causal, prefix_tokens=prefix)  # (1, 1 or H, L, L)
    counts = pattern_counts(core.pattern(length, causal, prefix, q.device), length, heads)
    assert counts.max().item() == 1, "a (query, key) pair is counted twice"
    assert torch.equal(counts.bool(), pattern[0].expand(heads, -1, -1))
    keep = padding_keep(2, length, [length, length - 4])
    result = core(q, k, v, attention_mask=keep, causal=causal, prefix_tokens=prefix, output_weights=True)
    expected, probs = dense_attention(q, k, v, pattern & keep)
    real = slice(0, length - 4)  # the padded sequence: compare its real queries
    assert max_diff(result.values[0], expected[0]) < TOL64
    assert max_diff(result.values[1, :, real], expected[1, :, real]) < TOL64
    assert max_diff(result.weights[0], probs[0]) < TOL64
    assert max_diff(result.weights[1, :, real], probs[1, :, real]) < TOL64


@pytest.mark.parametrize("name", ENTRIES)
def test_dropout_acts_in_training_only(name):
    core = build(name, dtype=torch.float32, **small(name))
    q, k, v = qkv(q_len=16, dtype=torch.float32)
    plain = core(q, k, v).values
    assert torch.equal(core(q, k, v, dropout=0.5).values, plain), "eval mode must not drop"
    core.train()
    torch.manual_seed(1)
    dropped = core(q, k, v, dropout=0.5).values
    torch.manual_seed(1)
    assert torch.equal(core(q, k, v, dropout=0.5).values, dropped)
    assert max_diff(dropped, plain) > 1e-3


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an operation creates."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


@pytest.mark.parametrize("name", ENTRIES)
def test_no_length_squared_tensor_forward_or_backward(name):
    length = 1024  # (L x L) = 1M elements; the patterns below keep every tensor under L^2 / 8
    kwargs = {
        "sparse_strided": {"stride": 32},
        "sparse_fixed": {"block_size": 32, "summary_cells": 2},
        "longformer": {"attention_window": 32, "num_global_tokens": 2},
        "etc": {"local_radius": 16, "num_global_tokens": 2},
        "bigbird": {"block_size": 16, "num_random_blocks": 2},
    }[name]
    core = build(name, heads=1, dtype=torch.float32, **kwargs)
    q, k, v = (t.requires_grad_() for t in qkv(batch=1, heads=1, q_len=length, dim=4, dtype=torch.float32))
    with LargestTensor() as tracker:
        core(q, k, v, causal=name in CAUSAL, prefix_tokens=1).values.sum().backward()
    assert tracker.largest < length * length / 8, tracker.largest


def test_a_row_with_every_key_padded_gives_zeros_and_finite_gradients():
    core = build("longformer", dtype=torch.float32, attention_window=4, num_global_tokens=1)
    q, k, v = (t.requires_grad_() for t in qkv(q_len=12, dtype=torch.float32))
    keep = padding_keep(2, 12, [12, 0])
    out = core(q, k, v, attention_mask=keep).values
    assert out[1].abs().max().item() == 0.0
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


# ----------------------------------------------------------------------------------------------------------
# Sparse Transformer
# ----------------------------------------------------------------------------------------------------------


def strided_rule(stride: int, causal: bool):
    if causal:
        return lambda i, j: j <= i and (i - j < stride or (i - j) % stride == 0)
    return lambda i, j: abs(i - j) < stride or (i - j) % stride == 0


def fixed_rule(block: int, cells: int, causal: bool):
    def allow(i, j):
        a1 = j // block == i // block
        a2 = j % block >= block - cells
        return (a1 or a2) and (j <= i or not causal)

    return allow


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("stride,length", [(4, 16), (3, 20), (5, 12)])
def test_strided_pattern_is_the_papers(stride, length, causal):
    expected = loop_mask(length, strided_rule(stride, causal))
    assert torch.equal(mask_of("sparse_strided", {"stride": stride}, length, causal)[0, 0], expected)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("block,cells,length", [(4, 1, 16), (4, 2, 18), (8, 3, 24)])
def test_fixed_pattern_is_the_papers(block, cells, length, causal):
    expected = loop_mask(length, fixed_rule(block, cells, causal))
    got = mask_of("sparse_fixed", {"block_size": block, "summary_cells": cells}, length, causal)[0, 0]
    assert torch.equal(got, expected)


def test_strided_key_counts_and_two_hop_coverage():
    length, stride = 64, 8
    a1 = loop_mask(length, lambda i, j: 0 <= i - j < stride)
    a2 = loop_mask(length, lambda i, j: j <= i and (i - j) % stride == 0)
    pattern = mask_of("sparse_strided", {"stride": stride}, length, causal=True)[0, 0]
    assert torch.equal(pattern, a1 | a2)
    assert pattern.sum(-1).max().item() <= stride + math.ceil(length / stride)  # paper: |A1 ∪ A2| <= l + N/l
    assert pattern.sum(-1).max().item() == 15  # measured in the spec sheet for N = 64, l = 8
    two_hops = ((a2.double() @ a1.double()) > 0) | a1 | a2  # A2 then A1 reaches every earlier key
    assert torch.equal(two_hops, torch.ones(length, length, dtype=torch.bool).tril())
    bidirectional = mask_of("sparse_strided", {"stride": stride}, length, causal=False)[0, 0]
    assert ((bidirectional.double() @ bidirectional.double()) > 0).all()


def test_fixed_two_hop_coverage_through_the_summary_cells():
    length, block, cells = 64, 8, 1
    a1 = loop_mask(length, lambda i, j: j <= i and i // block == j // block)
    a2 = loop_mask(length, lambda i, j: j <= i and j % block >= block - cells)
    pattern = mask_of("sparse_fixed", {"block_size": block, "summary_cells": cells}, length, causal=True)[0, 0]
    assert torch.equal(pattern, a1 | a2)
    two_hops = ((a2.double() @ a1.double()) > 0) | a1 | a2  # to a summary cell (A2), then within its block (A1)
    assert torch.equal(two_hops, torch.ones(length, length, dtype=torch.bool).tril())


@pytest.mark.parametrize("name,kwargs", [("sparse_strided", {"stride": 4}), ("sparse_fixed", {"block_size": 4})])
def test_sparse_prefix_token_is_global_and_positions_start_after_it(name, kwargs):
    # ViT layout: [CLS] + a 4x4 grid; with stride 4 = grid width, strided A2 is "the same column".
    kwargs = {**kwargs, "summary_cells": 1} if name == "sparse_fixed" else kwargs
    length = 17
    pattern = mask_of(name, kwargs, length, causal=False, prefix=1)[0, 0]
    assert pattern[0].all() and pattern[:, 0].all()
    body = mask_of(name, kwargs, length - 1, causal=False)[0, 0]
    assert torch.equal(pattern[1:, 1:], body)
    core = build(name, **kwargs)
    q, k, v = qkv(q_len=length)
    out = core(q, k, v, prefix_tokens=1).values
    assert max_diff(out[:, :, :1], reference(q, k, v)[:, :, :1]) < TOL64  # [CLS] sees everything


# ----------------------------------------------------------------------------------------------------------
# Longformer
# ----------------------------------------------------------------------------------------------------------


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, length, width = x.shape
    return x.view(batch, length, heads, width // heads).transpose(1, 2)  # (B, H, L, D)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, heads, length, dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * dim)  # (B, L, C)


@pytest.fixture
def float64_softmax(monkeypatch):
    """transformers' Longformer takes its softmax in float32 even for float64 inputs; keep it in float64."""
    softmax = F.softmax

    def softmax_in_input_precision(x, dim=None, _stacklevel=3, dtype=None):
        return softmax(x, dim=dim, dtype=None if x.dtype == torch.float64 else dtype)

    monkeypatch.setattr(torch.nn.functional, "softmax", softmax_in_input_precision)


def longformer_parity(num_global: int, pad: int) -> float:
    """Max deviation of ``longformer`` from transformers' LongformerSelfAttention on the same weights and input.

    Our core receives projected q, k, v; transformers projects hidden states itself and has separate
    projections for global attention. Its global projections are set equal to the local ones (the tied form our
    core implements), and q, k, v are projected with its own (local) weights.
    """
    heads, dim, window, length = 2, 4, 4, 16
    torch.manual_seed(0)
    config = LongformerConfig(
        hidden_size=heads * dim, num_attention_heads=heads, attention_window=[window], attention_probs_dropout_prob=0
    )
    theirs = LongformerSelfAttention(config, layer_id=0).double().eval()
    for part in ("query", "key", "value"):
        getattr(theirs, f"{part}_global").load_state_dict(getattr(theirs, part).state_dict())
    hidden = torch.randn(2, length, heads * dim, dtype=torch.float64)
    mask = torch.zeros(2, length, dtype=torch.float64)  # transformers: 0 local, > 0 global, < 0 padding
    mask[:, :num_global] = 10000.0
    mask[1, length - pad :] = -10000.0
    ours = build("longformer", heads=heads, dim=dim, attention_window=window, num_global_tokens=num_global)
    with torch.no_grad():
        expected = theirs(
            hidden,
            attention_mask=mask,
            is_index_masked=mask < 0,
            is_index_global_attn=mask > 0,
            is_global_attn=bool((mask > 0).any()),
        )[0]
        q, k, v = (split_heads(getattr(theirs, part)(hidden), heads) for part in ("query", "key", "value"))
        keep = (mask >= 0)[:, None, None, :] if pad else None
        out = merge_heads(ours(q, k, v, attention_mask=keep).values)
    real = mask >= 0  # transformers zeroes padded rows; ours leaves them to the model
    return max_diff(out[real], expected[real])


@pytest.mark.parametrize("num_global,pad", [(0, 0), (2, 0), (2, 5), (0, 5)])
def test_longformer_matches_transformers(num_global, pad):
    assert longformer_parity(num_global, pad) < 1e-6  # transformers' float32 softmax


@pytest.mark.parametrize("num_global,pad", [(0, 0), (2, 5)])
def test_longformer_matches_transformers_in_float64(float64_softmax, num_global, pad):
    assert longformer_parity(num_global, pad) < TOL64


@pytest.mark.parametrize("dilation", [1, 2])
def test_longformer_rows_hold_2w_plus_1_keys_and_the_causal_window_is_left(dilation):
    length, window = 48, 8  # w = 4
    pattern = mask_of("longformer", {"attention_window": window, "dilation": dilation}, length, False)[0, 0]
    interior = slice(4 * dilation, length - 4 * dilation)
    assert (pattern[interior].sum(-1) == 9).all()  # 2w + 1, dilated or not (spec sheet: 9 for w = 4)
    expected = loop_mask(length, lambda i, j: abs(i - j) <= 4 * dilation and (i - j) % dilation == 0)
    assert torch.equal(pattern, expected)
    causal = mask_of("longformer", {"attention_window": window, "dilation": dilation}, length, True)[0, 0]
    assert torch.equal(causal, expected & loop_mask(length, lambda i, j: j <= i))
    assert (causal[interior].sum(-1) == 5).all()  # w keys to the left and the token itself


def test_longformer_global_rows_are_full_attention_and_every_row_sees_the_globals():
    length = 20
    core = build("longformer", attention_window=4, num_global_tokens=2)
    q, k, v = qkv(q_len=length)
    pattern = core.dense_mask(q, k, prefix_tokens=1)[0, 0]  # globals: the prefix token and 2 more
    assert pattern[:3].all() and pattern[:, :3].all() and not pattern[3:, 3:].all()
    out = core(q, k, v, prefix_tokens=1).values
    assert max_diff(out[:, :, :3], reference(q, k, v)[:, :, :3]) < TOL64
    # causal: a global token only sees (and is only seen from) its past
    causal_out = core(q, k, v, causal=True, prefix_tokens=1).values
    tri = torch.ones(length, length, dtype=torch.bool).tril()
    assert max_diff(causal_out[:, :, :3], reference(q, k, v, tri)[:, :, :3]) < TOL64


# ----------------------------------------------------------------------------------------------------------
# ETC
# ----------------------------------------------------------------------------------------------------------


def test_etc_reduces_to_a_transformer_over_global_and_long_inputs():
    # ETC's own reduction: radius covering the long input, shared projections, global tokens concatenated.
    global_in, long_in = qkv(q_len=3, seed=1), qkv(q_len=13, seed=2)
    q, k, v = (torch.cat([g, x], dim=2) for g, x in zip(global_in, long_in))
    core = build("etc", local_radius=13, num_global_tokens=3)
    assert max_diff(core(q, k, v).values, reference(q, k, v)) < TOL64


def test_etc_long_queries_see_globals_and_their_radius_and_global_queries_see_all():
    length, radius, num_global = 18, 2, 3
    core = build("etc", local_radius=radius, num_global_tokens=num_global)
    q, k, v = qkv(q_len=length)
    allow = loop_mask(length, lambda i, j: j < num_global or i < num_global or abs(i - j) <= radius)
    assert torch.equal(core.dense_mask(q, k)[0, 0], allow)
    out = core(q, k, v).values
    assert max_diff(out, reference(q, k, v, allow)) < TOL64
    assert max_diff(out[:, :, :num_global], reference(q, k, v)[:, :, :num_global]) < TOL64  # g2g + g2l


# ----------------------------------------------------------------------------------------------------------
# BigBird
# ----------------------------------------------------------------------------------------------------------


def bigbird_parity(pad: int) -> float:
    """Max deviation of ``bigbird`` from transformers' BigBirdBlockSparseAttention on the same weights and input.

    transformers draws random blocks with numpy in training and puts every random block on block 0 in
    evaluation; it is handed our random blocks instead (its rand-mask helper returns them), so everything
    else (window, global blocks, masks, softmax) is compared. q, k, v are projected with its weights.
    """
    heads, dim, block, random_blocks, blocks = 2, 4, 2, 2, 8
    length = block * blocks
    torch.manual_seed(0)
    config = BigBirdConfig(
        hidden_size=heads * dim,
        num_attention_heads=heads,
        block_size=block,
        num_random_blocks=random_blocks,
        attention_type="block_sparse",
        max_position_embeddings=64,
    )
    theirs = BigBirdBlockSparseAttention(config, seed=0).double().eval()
    ours = build("bigbird", heads=heads, dim=dim, block_size=block, num_random_blocks=random_blocks, seed=5)
    chosen, valid = ours.random_blocks(blocks)  # (H, N, r)
    assert valid[:, 1:-1].all()  # enough blocks: every middle row has its r random blocks
    theirs._bigbird_block_rand_mask_with_head = lambda **_: [
        chosen[h, 1:-1].numpy().astype(np.int32) for h in range(heads)
    ]
    hidden = torch.randn(2, length, heads * dim, dtype=torch.float64)
    attention_mask = torch.ones(2, length, dtype=torch.float64)
    attention_mask[1, length - pad :] = 0
    blocked, band, from_mask, to_mask = BigBirdModel.create_masks_for_block_sparse_attn(attention_mask, block)
    with torch.no_grad():
        masks = {"band_mask": band, "from_mask": from_mask, "to_mask": to_mask}
        expected = theirs(hidden, from_blocked_mask=blocked, to_blocked_mask=blocked, **masks)[0]
        q, k, v = (split_heads(getattr(theirs, part)(hidden), heads) for part in ("query", "key", "value"))
        keep = (attention_mask > 0)[:, None, None, :] if pad else None
        out = merge_heads(ours(q, k, v, attention_mask=keep).values)
    real = attention_mask > 0
    return max_diff(out[real], expected[real])


@pytest.mark.parametrize("pad", [0, 3])
def test_bigbird_matches_transformers_with_the_same_random_blocks(pad):
    assert bigbird_parity(pad) < TOL64


def test_bigbird_random_blocks_avoid_window_and_globals_and_are_distinct():
    core = build("bigbird", heads=4, block_size=2, num_random_blocks=3)
    blocks = 10
    chosen, valid = core.random_blocks(blocks)
    assert chosen.shape == (4, blocks, 3)
    assert not valid[:, 0].any() and not valid[:, -1].any()  # global rows draw nothing
    assert valid[:, 1:-1].all()
    for head, row in ((h, m) for h in range(4) for m in range(1, blocks - 1)):
        picks = chosen[head, row].tolist()
        assert len(set(picks)) == 3
        assert all(abs(p - row) > 1 and p not in (0, blocks - 1) for p in picks)
    assert not torch.equal(chosen[0], chosen[1])  # heads draw independently
    # too few blocks left: only what is allowed, the rest marked invalid
    few, few_valid = core.random_blocks(6)  # middle rows have at most 6 - 4 allowed blocks
    assert (few_valid.sum(-1) <= 2).all() and few_valid[:, 2].sum().item() == 4 * 1


def test_bigbird_middle_rows_have_the_expected_density():
    blocks, block, random_blocks = 12, 2, 2
    core = build("bigbird", heads=2, block_size=block, num_random_blocks=random_blocks)
    pattern = mask_of_core(core, blocks * block)
    middle = pattern[:, 3 * block : (blocks - 3) * block]  # rows whose window avoids the global blocks
    assert (middle.sum(-1) == (3 + 2 + random_blocks) * block).all()
    assert pattern[:, :block].all() and pattern[:, -block:].all()  # global rows
    assert pattern[:, :, :block].all() and pattern[:, :, -block:].all()  # global columns


def mask_of_core(core, length: int) -> torch.Tensor:
    return core.dense_mask(torch.zeros(1, 1, length, 1), None)[0]


def test_bigbird_randomness_is_seeded_and_saved():
    q, k, v = qkv(q_len=24)
    kwargs = {"block_size": 2, "num_random_blocks": 2}
    # seed=None: each instance draws its seed from torch's generator at construction (build seeds torch)
    first, second = build("bigbird", seed=0, **kwargs), build("bigbird", seed=1, **kwargs)
    assert first.random_seed.item() != second.random_seed.item()
    assert not torch.equal(first.random_blocks(12)[0], second.random_blocks(12)[0])
    assert max_diff(first(q, k, v).values, second(q, k, v).values) > 1e-6
    assert "random_seed" in first.state_dict()  # a persistent buffer: saved with the model
    second.load_state_dict(first.state_dict())
    assert torch.equal(second(q, k, v).values, first(q, k, v).values)
    first.train()
    assert torch.equal(first(q, k, v).values, second(q, k, v).values)  # the same pattern in training and eval
    # an explicit seed gives the same pattern whatever torch's generator holds
    seeded = []
    for torch_seed in (0, 1):
        torch.manual_seed(torch_seed)
        seeded.append(build_attention("bigbird", 2, 8, seed=7, **kwargs).double())
    assert torch.equal(seeded[0](q, k, v).values, seeded[1](q, k, v).values)


# ----------------------------------------------------------------------------------------------------------
# errors
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,kwargs,word",
    [
        ("sparse_strided", {"stride": 0}, "stride"),
        ("sparse_strided", {"stride": True}, "stride"),
        ("sparse_fixed", {"block_size": 4, "summary_cells": 5}, "summary_cells"),
        ("sparse_fixed", {"summary_cells": 0}, "summary_cells"),
        ("longformer", {"attention_window": 5}, "attention_window"),
        ("longformer", {"dilation": 0}, "dilation"),
        ("longformer", {"num_global_tokens": -1}, "num_global_tokens"),
        ("etc", {"local_radius": -1}, "local_radius"),
        ("bigbird", {"block_size": 0}, "block_size"),
        ("bigbird", {"num_random_blocks": 1.5}, "num_random_blocks"),
        ("bigbird", {"seed": -2}, "seed"),
    ],
)
def test_bad_settings_are_refused_by_name(name, kwargs, word):
    with pytest.raises(ValueError, match=word):
        build_attention(name, 2, 8, **kwargs)


@pytest.mark.parametrize("name", ENTRIES)
def test_unsupported_calls_are_refused(name):
    core = build(name, **small(name))
    q, k, v = qkv(q_len=8, kv_len=12)
    with pytest.raises(ValueError, match="kv_len"):
        core(q, k, v)
    q, k, v = qkv(q_len=8)
    with pytest.raises(ValueError, match="key padding mask"):
        core(q, k, v, attention_mask=torch.ones(2, 1, 8, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="state"):
        core(q, k, v, state=torch.zeros(1))
    if name not in CAUSAL:
        with pytest.raises(ValueError, match="causal"):
            core(q, k, v, causal=True)
        layer = MultiHeadAttention(16, 2, attention_type=name, attention_kwargs=small(name))
        with pytest.raises(ValueError, match="causal"):
            layer(torch.randn(1, 8, 16), causal=True)
