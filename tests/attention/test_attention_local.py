"""Entry-specific tests of the blocked entries: ``local``, ``local_2d``, ``axial`` and ``memory_compressed``.

The registry-wide checks (exact setting, dense mask, padding, causal leaks, seeds, state dicts) live in
test_attention_entries.py; here are the defining properties from the spec sheet, each against a reference
written from the paper's definition, plus the errors.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from attention_testing import TOL64, build, max_diff, padding_keep, qkv, reference

from hf_xcv.attention import MultiHeadAttention, causal_keep_mask, dense_attention

# ----------------------------------------------------------------------------------------------------------
# local (1-D)
# ----------------------------------------------------------------------------------------------------------


def t2t_local_mask(length: int, block: int, flange: int | None, causal: bool) -> torch.Tensor:
    """The spec sheet's rules. Causal (``masked_local_attention_1d``): i sees j iff j <= i and
    block(j) >= block(i) - 1, or with a flange of f tokens, j >= start(i) - f. Non-causal
    (``local_attention_1d``): start(i) - f <= j < end(i) + f, with f = block // 2 by default."""
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    start = i // block * block
    if causal:
        if flange is None:
            return (j <= i) & (j // block >= i // block - 1)
        return (j <= i) & (j >= start - flange)
    flange = block // 2 if flange is None else flange
    return (j >= start - flange) & (j < start + block + flange)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block, flange", [(4, None), (3, 0), (5, 2), (4, 9)])
def test_local_equals_softmax_under_the_t2t_band_mask(causal, block, flange):
    q, k, v = qkv(q_len=19)  # not a block multiple: the last block is padded internally
    core = build("local", block_size=block, memory_flange=flange)
    keep = padding_keep(2, 19, [19, 13])
    mask = t2t_local_mask(19, block, flange, causal)
    assert torch.equal(core.dense_mask(q, k, causal=causal)[0, 0], mask)
    out = core(q, k, v, attention_mask=keep, causal=causal).values
    assert max_diff(out, reference(q, k, v, mask & keep)) < TOL64


def test_local_block_covering_the_sequence_is_causal_full_attention():
    q, k, v = qkv(q_len=21)
    out = build("local", block_size=32)(q, k, v, causal=True).values
    assert max_diff(out, reference(q, k, v, causal_keep_mask(21, 21))) < TOL64


def test_local_decoding_with_fewer_queries_gives_the_last_rows():
    # With a key/value cache the queries are the last tokens; the result must match the full-length call.
    q, k, v = qkv(q_len=22)
    core = build("local", block_size=4)
    full = core(q, k, v, causal=True).values
    for n in (1, 3, 9):
        part = core(q[:, :, -n:], k, v, causal=True).values
        assert max_diff(part, full[:, :, -n:]) < TOL64


def test_local_prefix_tokens_are_global_and_weights_match_the_dense_probabilities():
    q, k, v = qkv(q_len=18)
    core = build("local", block_size=4)
    result = core(q, k, v, prefix_tokens=1, output_weights=True)
    mask = core.dense_mask(q, k, prefix_tokens=1)[0, 0]
    assert mask[0].all() and mask[:, 0].all()  # [CLS] sees every token and every token sees [CLS]
    assert not mask[1:, 1:].all()
    values, probs = dense_attention(q, k, v, mask)
    assert max_diff(result.values, values) < TOL64 and max_diff(result.weights, probs) < TOL64
    assert max_diff(result.weights.sum(-1), torch.ones(2, 2, 18, dtype=torch.float64)) < TOL64


# ----------------------------------------------------------------------------------------------------------
# local_2d
# ----------------------------------------------------------------------------------------------------------


def t2t_block_raster_mask(query_shape, memory_flange) -> torch.Tensor:
    """tensor2tensor's ``make_2d_block_raster_mask`` (True = visible), rebuilt from its definition: memory =
    ``fh`` flange rows above (all visible), then per query row [left flange visible | query block, causal in
    raster order within the block | right flange masked]. (Q, (qh + fh) * (qw + 2 fw))."""
    (qh, qw), (fh, fw) = query_shape, memory_flange
    rows = []
    for a in range(qh):
        for b in range(qw):
            row = []
            for r in range(qh + fh):
                for c in range(qw + 2 * fw):
                    if r < fh or c < fw:
                        row.append(True)
                    elif c < fw + qw:
                        row.append((r - fh) * qw + (c - fw) <= a * qw + b)
                    else:
                        row.append(False)
            rows.append(row)
    return torch.tensor(rows)


def test_local_2d_causal_pattern_is_t2t_block_raster_mask_within_the_raster_past():
    grid, query_shape, flange = (6, 8), (2, 3), (1, 2)
    q, k, _ = qkv(q_len=48)
    mask = build("local_2d", query_shape=query_shape, memory_flange=flange).dense_mask(q, k, True, grid)[0, 0]
    t2t = t2t_block_raster_mask(query_shape, flange)
    top, left = 2, 3  # an interior query block: rows 2-3, columns 3-5; memory rows 1-3, columns 1-7
    queries = [r * 8 + c for r in range(top, top + 2) for c in range(left, left + 3)]
    memory = [r * 8 + c for r in range(top - 1, top + 2) for c in range(left - 2, left + 5)]
    window = mask[queries][:, memory]
    raster = torch.tensor(memory)[None, :] <= torch.tensor(queries)[:, None]
    assert torch.equal(window, t2t & raster)
    outside = mask[queries].clone()
    outside[:, memory] = False
    assert not outside.any()  # nothing outside the memory window


def test_local_2d_non_causal_memory_is_the_block_plus_flange_on_every_side():
    grid = (7, 9)
    q, k, _ = qkv(q_len=63)
    mask = build("local_2d", query_shape=(3, 3), memory_flange=(1, 2)).dense_mask(q, k, False, grid)[0, 0]
    for token in range(63):
        r, c = divmod(token, 9)
        top, left = r // 3 * 3, c // 3 * 3
        expected = torch.zeros(7, 9, dtype=torch.bool)
        expected[max(0, top - 1) : top + 4, max(0, left - 2) : left + 5] = True
        assert torch.equal(mask[token].view(7, 9), expected), token


@pytest.mark.parametrize("causal", [False, True])
def test_local_2d_on_a_grid_that_is_no_block_multiple(causal):
    grid, prefix = (5, 7), 0 if causal else 1
    length = prefix + 35
    q, k, v = qkv(q_len=length)
    core = build("local_2d", query_shape=(2, 3), memory_flange=(1, 1))
    keep = padding_keep(2, length, [length, 20])
    result = core(q, k, v, attention_mask=keep, causal=causal, grid=grid, prefix_tokens=prefix, output_weights=True)
    values, probs = dense_attention(q, k, v, core.dense_mask(q, k, causal, grid, prefix) & keep)
    assert max_diff(result.values, values) < TOL64 and max_diff(result.weights, probs) < TOL64


# ----------------------------------------------------------------------------------------------------------
# axial
# ----------------------------------------------------------------------------------------------------------


def spec_axis_mask(grid, axis: str, prefix: int, causal: bool) -> torch.Tensor:
    """Spec sheet: rows i // w == j // w, columns i % w == j % w, on grid tokens; the prefix is global."""
    length = prefix + grid[0] * grid[1]
    i, j = torch.arange(length)[:, None] - prefix, torch.arange(length)[None, :] - prefix
    same = (i // grid[1] == j // grid[1]) if axis == "row" else (i % grid[1] == j % grid[1])
    mask = same | (i < 0) | (j < 0)
    return mask & (j <= i) if causal else mask


@pytest.mark.parametrize("causal", [False, True])
def test_axial_each_pass_is_softmax_under_its_axis_mask(causal):
    grid, prefix = (3, 5), 1
    q, k, v = qkv(q_len=16)
    keep = padding_keep(2, 16, [16, 11])
    for axis in ("row", "column"):
        core = build("axial", passes=axis)
        mask = spec_axis_mask(grid, axis, prefix, causal)
        assert torch.equal(core.dense_mask(q, k, causal, grid, prefix)[0, 0], mask)
        out = core(q, k, v, attention_mask=keep, causal=causal, grid=grid, prefix_tokens=prefix).values
        assert max_diff(out, reference(q, k, v, mask & keep)) < TOL64


@pytest.mark.parametrize("causal", [False, True])
def test_axial_column_pass_attends_over_the_row_outputs(causal):
    grid, prefix = (4, 3), 1
    q, k, v = qkv(q_len=13)
    keep = padding_keep(2, 13, [13, 9])
    core = build("axial")
    assert core.dense_mask(q, k, causal, grid, prefix) is None  # two passes: no single pattern
    result = core(q, k, v, attention_mask=keep, causal=causal, grid=grid, prefix_tokens=prefix, output_weights=True)
    rows, row_probs = dense_attention(q, k, v, spec_axis_mask(grid, "row", prefix, causal) & keep)
    out, col_probs = dense_attention(q, k, rows, spec_axis_mask(grid, "column", prefix, causal) & keep)
    assert max_diff(result.values, out) < TOL64
    assert max_diff(result.weights, col_probs @ row_probs) < TOL64
    assert max_diff(result.weights[0].sum(-1), torch.ones(2, 13, dtype=torch.float64)) < TOL64


@pytest.mark.parametrize("causal", [False, True])
def test_axial_receptive_field_is_the_grid_or_the_upper_left_quadrant(causal):
    grid = (4, 5)
    q, k, v = qkv(batch=1, heads=1, q_len=20)
    v.requires_grad_()
    out = build("axial", heads=1)(q, k, v, causal=causal, grid=grid).values
    r, c = 2, 3
    (grad,) = torch.autograd.grad(out[0, 0, r * 5 + c].sum(), v)
    reached = grad[0, 0].abs().sum(-1).view(4, 5) > 0
    if causal:
        expected = torch.zeros(4, 5, dtype=torch.bool)
        expected[: r + 1, : c + 1] = True  # rows above and columns left of (r, c), itself included
    else:
        expected = torch.ones(4, 5, dtype=torch.bool)  # the column pass reads every row pass output
    assert torch.equal(reached, expected)


def test_axial_on_a_single_row_is_full_attention():
    q, k, v = qkv(q_len=7)
    kwargs = build("axial").exact_kwargs(7, (1, 6))
    out = build("axial", **kwargs)(q, k, v, grid=(1, 6), prefix_tokens=1).values
    assert kwargs == {"passes": "row"} and max_diff(out, reference(q, k, v)) < TOL64


# ----------------------------------------------------------------------------------------------------------
# memory_compressed
# ----------------------------------------------------------------------------------------------------------


def test_memory_compressed_mean_pooling_init_is_attention_over_pooled_keys_and_values():
    q, k, v = qkv(q_len=18)
    core = build("memory_compressed", compression=3, block_size=0)
    mean = torch.eye(8, dtype=torch.float64).expand(2, 3, 8, 8) / 3
    assert max_diff(core.key_conv_weight, mean) < 1e-7  # initialised to mean pooling (in float32)
    with torch.no_grad():  # the float64 mean, for an exact comparison
        core.key_conv_weight.copy_(mean)
        core.value_conv_weight.copy_(mean)
    out = core(q, k, v).values
    pooled_k, pooled_v = (F.avg_pool1d(x.flatten(0, 1).transpose(1, 2), 3).transpose(1, 2) for x in (k, v))
    expected = reference(q, pooled_k.view(2, 2, 6, 8), pooled_v.view(2, 2, 6, 8))
    assert max_diff(out, expected) < TOL64


def pooled_reference(q, k, v, block: int, ratio: int, causal: bool) -> torch.Tensor:
    """Queries see their own block's tokens (causal: not after them) and the slot means of the other
    blocks (causal: earlier blocks), slots made within each block (a short last slot: sum / ratio)."""
    length = k.shape[2]
    keys, values, slot_block = [k], [v], []
    for start in range(0, length, block):
        for s in range(start, min(start + block, length), ratio):
            stop = min(s + ratio, start + block, length)
            keys.append(k[:, :, s:stop].sum(2, keepdim=True) / ratio)
            values.append(v[:, :, s:stop].sum(2, keepdim=True) / ratio)
            slot_block.append(start // block)
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    own = j // block == i // block
    if causal:
        own = own & (j <= i)
    other = torch.tensor(slot_block)[None, :]
    memory = other < i // block if causal else other != i // block
    return reference(q, torch.cat(keys, 2), torch.cat(values, 2), torch.cat([own, memory], 1))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block, ratio", [(4, 2), (5, 2)])
def test_memory_compressed_local_blocks_plus_compressed_other_blocks(causal, block, ratio):
    q, k, v = qkv(q_len=17)
    core = build("memory_compressed", compression=ratio, block_size=block)
    out = core(q, k, v, causal=causal).values
    assert max_diff(out, pooled_reference(q, k, v, block, ratio, causal)) < TOL64


@pytest.mark.parametrize("block", [0, 4])
def test_memory_compressed_compression_one_is_exact_with_prefix_and_decoding(block):
    q, k, v = qkv(q_len=15)
    core = build("memory_compressed", compression=1, block_size=block)
    core.make_exact_()
    keep = padding_keep(2, 15, [15, 9])
    for causal in (False, True):
        out = core(q, k, v, attention_mask=keep, causal=causal, prefix_tokens=1).values
        expected = reference(q, k, v, keep & causal_keep_mask(15, 15) if causal else keep)
        assert max_diff(out, expected) < TOL64
    last = core(q[:, :, -2:], k, v, causal=True).values  # queries = the last tokens (cache decoding)
    assert max_diff(last, reference(q[:, :, -2:], k, v, causal_keep_mask(2, 15))) < TOL64


def test_memory_compressed_pure_memory_causal_first_queries_see_nothing_yet():
    q, k, v = qkv(q_len=9)
    out = build("memory_compressed", compression=3, block_size=0)(q, k, v, causal=True).values
    assert out[:, :, :2].abs().max().item() == 0.0  # no slot is complete before token 2
    assert out[:, :, 2:].norm(dim=-1).gt(0).all()


def test_memory_compressed_convolutions_are_learned_per_head():
    q, k, v = qkv(q_len=16)
    core = build("memory_compressed", compression=2, block_size=4)
    shapes = {name: tuple(p.shape) for name, p in core.named_parameters()}
    assert shapes == {
        "key_conv_weight": (2, 2, 8, 8),
        "value_conv_weight": (2, 2, 8, 8),
        "key_conv_bias": (2, 8),
        "value_conv_bias": (2, 8),
    }
    before = core(q, k, v).values
    with torch.no_grad():
        core.value_conv_weight[1] += 0.5
    after = core(q, k, v).values
    assert max_diff(before[:, 0], after[:, 0]) == 0.0 and max_diff(before[:, 1], after[:, 1]) > 1e-3


# ----------------------------------------------------------------------------------------------------------
# all four: cost, dropout, bfloat16, errors
# ----------------------------------------------------------------------------------------------------------

GRID_CALL = {"grid": (32, 32), "prefix_tokens": 1}
CORES = [
    ("local", {"block_size": 32}, {}),
    ("local_2d", {"query_shape": (4, 8), "memory_flange": (4, 8)}, GRID_CALL),
    ("axial", {}, GRID_CALL),
    ("memory_compressed", {"compression": 4, "block_size": 32}, {}),
]


class LargestTensor(torch.overrides.TorchFunctionMode):
    """Records the largest number of elements of any tensor a torch function returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for item in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(item, torch.Tensor):
                self.largest = max(self.largest, item.numel())
        return result


@pytest.mark.parametrize("name, kwargs, call", CORES, ids=[c[0] for c in CORES])
@pytest.mark.parametrize("causal", [False, True])
def test_no_length_squared_tensor_is_built(name, kwargs, call, causal):
    length = 1025 if call else 1024
    q, k, v = qkv(batch=1, heads=1, q_len=length, dim=4, dtype=torch.float32)
    core = build(name, heads=1, dim=4, dtype=torch.float32, **kwargs)
    with LargestTensor() as probe:
        core(q, k, v, causal=causal, **call)
    # memory_compressed holds L * L / compression scores; the others O(L * memory) with memory << L
    assert probe.largest <= length * length // 3


@pytest.mark.parametrize("name, kwargs, call", CORES, ids=[c[0] for c in CORES])
def test_dropout_applies_to_the_probabilities_and_bfloat16_runs(name, kwargs, call):
    length = 1025 if call else 1024
    q, k, v = qkv(batch=1, heads=1, q_len=length, dim=4, dtype=torch.float32)
    core = build(name, heads=1, dim=4, dtype=torch.float32, **kwargs).train()  # dropout acts in training mode
    assert core(q, k, v, dropout=1.0, **call).values.abs().max().item() == 0.0  # every probability dropped
    assert core(q, k, v, dropout=0.0, **call).values.abs().max().item() > 0.0
    low = core.to(torch.bfloat16)(*(t.to(torch.bfloat16) for t in (q, k, v)), causal=True, **call)
    assert low.values.dtype == torch.bfloat16 and torch.isfinite(low.values).all()


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        ("local", {"block_size": 0}, "block_size must be an integer >= 1"),
        ("local", {"memory_flange": -1}, "memory_flange must be an integer >= 0"),
        ("local", {"block_size": 2.5}, "block_size"),
        ("local_2d", {"query_shape": 8}, "query_shape must be a .rows, columns. pair"),
        ("local_2d", {"memory_flange": (1, -1)}, r"memory_flange\[1\] must be an integer >= 0"),
        ("axial", {"passes": "diagonal"}, "passes must be one of"),
        ("memory_compressed", {"compression": 0}, "compression must be an integer >= 1"),
        ("memory_compressed", {"block_size": True}, "block_size"),
    ],
)
def test_bad_settings_are_refused_by_name(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build(name, **kwargs)


def test_unsupported_direct_calls_raise():
    q, k, v = qkv(q_len=16)
    with pytest.raises(ValueError, match="needs the .height, width. grid"):
        build("local_2d")(q, k, v)
    with pytest.raises(ValueError, match="kv_len .12. must equal q_len .16."):
        build("axial")(q, k[:, :, :12], v[:, :, :12], grid=(4, 4))
    with pytest.raises(ValueError, match="not 1 prefix token.s. plus a 4x4 grid"):
        build("axial")(q, k, v, grid=(4, 4), prefix_tokens=1)
    with pytest.raises(ValueError, match="more queries .16. than keys .8."):
        build("local")(q, k[:, :, :8], v[:, :, :8])
    with pytest.raises(ValueError, match="cannot return attention weights"):
        build("memory_compressed")(q, k, v, output_weights=True)
    with pytest.raises(ValueError, match="exact only with compression=1"):
        build("memory_compressed").make_exact_()
    with pytest.raises(ValueError, match="takes only a key padding mask"):
        build("local")(q, k, v, attention_mask=torch.ones(1, 1, 16, 16, dtype=torch.bool))


def test_the_layer_lists_every_unsupported_request():
    layer = MultiHeadAttention(16, 2, attention_type="memory_compressed")
    x, memory = torch.randn(1, 6, 16), torch.randn(1, 4, 16)
    with pytest.raises(ValueError, match="cross-attention.*returning attention weights"):
        layer(x, key_value_states=memory, output_attentions=True)
    grid_layer = MultiHeadAttention(16, 2, attention_type="axial")
    with pytest.raises(ValueError, match="needs a 2-D token grid"):
        grid_layer(x)
