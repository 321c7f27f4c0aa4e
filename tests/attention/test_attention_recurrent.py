"""Transformer-XL (``xl``) and Compressive Transformer (``compressive``) attention: the defining properties.

The oracle is written here from the paper's formula, independently of the core: every (query, key) pair gets
score = scaling * ((q_i + u)^T k_j + (q_i + v)^T W_R R_{i-j}) with R built from its own sinusoid, and
the XL mask over the whole stream: query i of a segment starting at s sees keys s - mem_len <= j <= i.
"""

from __future__ import annotations

import math

import pytest
import torch
from attention_testing import TOL64, build, max_diff, padding_keep, qkv, reference

from hf_xcv.attention import MultiHeadAttention, causal_keep_mask
from hf_xcv.attention._segments import CompressiveMemory, SegmentMemory, relative_shift

HEADS, DIM = 2, 4


def sinusoid(distance: int, dim: int) -> list[float]:
    """R_d = [sin(d w_0), ..., sin(d w_{dim/2-1}), cos(d w_0), ...], w_m = 10000^(-2m/dim)."""
    freqs = [10000 ** (-2 * m / dim) for m in range(0, (dim + 1) // 2)]
    return ([math.sin(distance * w) for w in freqs] + [math.cos(distance * w) for w in freqs])[:dim]


def relative_reference(core, q, keys, values, visible, distances):
    """Softmax over explicit relative scores; ``visible``: bool broadcastable to (B, H, Lq, K), ``distances``:
    (Lq, K) integer distances (only read where visible)."""
    width = HEADS * DIM
    table = torch.tensor([sinusoid(d, width) for d in range(int(distances.max()) + 1)], dtype=q.dtype)
    position_keys = (table @ core.r_net.weight.T)[distances.clamp(min=0)]  # (Lq, K, H*D)
    position_keys = position_keys.view(*distances.shape, HEADS, DIM)  # (Lq, K, H, D)
    u, v = core.r_w_bias[None, :, None, :], core.r_r_bias[None, :, None, :]
    scores = torch.einsum("bhid,bhjd->bhij", q + u, keys) + torch.einsum("bhid,ijhd->bhij", q + v, position_keys)
    scores = (scores * DIM**-0.5).masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows with no visible key give zeros
    return probs @ values


def xl_reference(core, q, k, v, lengths, mem_len, keep=None, clamp_len=None):
    """One pass over the whole stream with the XL mask: j <= i and j >= (start of i's segment) - mem_len."""
    total = q.shape[2]
    firsts = torch.tensor([sum(lengths[:n]) for n in range(len(lengths))])  # first position of every segment
    starts = torch.repeat_interleave(firsts, torch.tensor(lengths))  # (L,) the segment start of every position
    i, j = torch.arange(total)[:, None], torch.arange(total)[None, :]
    visible = (j <= i) & (j >= starts[:, None] - mem_len)  # (L, L)
    if keep is not None:
        visible = visible & keep  # keep: (B, 1, 1, L)
    distances = i - j if clamp_len is None else (i - j).clamp(max=clamp_len)
    return relative_reference(core, q, k, v, visible, distances)


def run_segments(core, q, k, v, lengths, keep=None, state=None):
    """Feed the stream segment by segment, carrying the state; returns the joined values and every output."""
    outputs, start = [], 0
    for n in lengths:
        part = slice(start, start + n)
        mask = None if keep is None else keep[..., part]
        result = core(q[:, :, part], k[:, :, part], v[:, :, part], attention_mask=mask, causal=True, state=state)
        outputs.append(result)
        state, start = result.state, start + n
    return torch.cat([out.values for out in outputs], dim=2), outputs


def randomise_(core, seed=1):
    """Non-trivial learned parts (u, v, W_R and the compressor) so that every term matters."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in core.parameters():
            param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * 0.5)
    return core


# ---------------------------------------------------------------- Transformer-XL


@pytest.mark.parametrize(
    "lengths, mem_len, clamp_len",
    [([6, 6, 6], 4, None), ([5, 3, 7], 9, None), ([4, 4, 4], 0, None), ([6, 6, 6], 4, 3), ([7, 7], 100, None)],
)
def test_xl_segments_with_memory_equal_one_pass_with_the_xl_mask(lengths, mem_len, clamp_len):
    q, k, v = qkv(heads=HEADS, q_len=sum(lengths), dim=DIM)
    core = randomise_(build("xl", HEADS, DIM, mem_len=mem_len, clamp_len=clamp_len))
    out, results = run_segments(core, q, k, v, lengths)
    expected = xl_reference(core, q, k, v, lengths, mem_len, clamp_len=clamp_len)
    assert max_diff(out, expected) < TOL64
    assert all(r.state.keys.shape[2] == min(mem_len, sum(lengths[: n + 1])) for n, r in enumerate(results))
    # the memory is the detached last mem_len keys of the stream so far
    assert torch.equal(results[-1].state.keys, k[:, :, k.shape[2] - results[-1].state.keys.shape[2] :])


def test_xl_differs_from_plain_causal_attention_and_from_no_memory():
    lengths = [6, 6]
    q, k, v = qkv(heads=HEADS, q_len=12, dim=DIM)
    core = randomise_(build("xl", HEADS, DIM, mem_len=4))
    out, _ = run_segments(core, q, k, v, lengths)
    second_alone = core(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], causal=True).values
    assert max_diff(out[:, :, 6:], second_alone) > 1e-3  # the memory is used
    assert max_diff(out, reference(q, k, v, causal_keep_mask(12, 12))) > 1e-3  # positions are used


def test_xl_padding_is_carried_in_the_memory():
    lengths = [5, 5]
    q, k, v = qkv(heads=HEADS, q_len=10, dim=DIM)
    keep = padding_keep(2, 10, [10, 10])
    keep[1, ..., :2] = False  # left padding in row 1: its first two queries see nothing
    keep[0, ..., 3] = False  # a padded key in row 0 that later segments must not see either
    core = randomise_(build("xl", HEADS, DIM, mem_len=5))
    out, results = run_segments(core, q, k, v, lengths, keep)
    assert results[0].state.keep is not None and not results[0].state.keep[0, 3]
    assert max_diff(out, xl_reference(core, q, k, v, lengths, 5, keep=keep)) < TOL64
    assert out[1, :, :2].abs().max().item() == 0.0
    changed_k, changed_v = k.clone(), v.clone()
    changed_k[0, :, 3] += 5.0
    changed_v[0, :, 3] += 5.0
    assert max_diff(out, run_segments(core, q, changed_k, changed_v, lengths, keep)[0]) < 1e-12


@pytest.mark.parametrize("name", ["xl", "compressive"])
def test_exact_setting_over_segments_is_plain_causal_softmax(name):
    lengths = [5, 6, 5]
    q, k, v = qkv(heads=HEADS, q_len=16, dim=DIM)
    core = build(name, HEADS, DIM, **type(build(name, HEADS, DIM)).exact_kwargs(16))
    core.make_exact_()
    out, _ = run_segments(core, q, k, v, lengths)
    assert max_diff(out, reference(q, k, v, causal_keep_mask(16, 16))) < TOL64
    # with a short memory it is plain softmax attention under the XL mask
    short = build(name, HEADS, DIM, mem_len=3, **({"cmem_len": 0} if name == "compressive" else {}))
    short.make_exact_()
    out, _ = run_segments(short, q, k, v, lengths)
    starts = torch.tensor([0] * 5 + [5] * 6 + [11] * 5)[:, None]
    j = torch.arange(16)[None, :]
    assert max_diff(out, reference(q, k, v, causal_keep_mask(16, 16) & (j >= starts - 3))) < TOL64


@pytest.mark.parametrize("name", ["xl", "compressive"])
def test_state_is_detached_no_gradient_reaches_earlier_segments(name):
    q, k, v = (t.requires_grad_() for t in qkv(heads=HEADS, q_len=12, dim=DIM))
    core = build(name, HEADS, DIM, mem_len=6, **({"cmem_len": 2} if name == "compressive" else {}))
    out, results = run_segments(core, q, k, v, [6, 6])
    state = results[0].state
    assert all(not t.requires_grad for t in state if isinstance(t, torch.Tensor))
    out[:, :, 6:].sum().backward()
    for tensor in (q, k, v):
        assert tensor.grad[:, :, :6].abs().max().item() == 0.0
        assert tensor.grad[:, :, 6:].abs().max().item() > 0.0


@pytest.mark.parametrize("name", ["xl", "compressive"])
def test_no_leak_from_the_future_within_a_segment_with_memory(name):
    q, k, v = qkv(heads=HEADS, q_len=14, dim=DIM)
    core = randomise_(build(name, HEADS, DIM, mem_len=4, **({"cmem_len": 2} if name == "compressive" else {})))
    out, _ = run_segments(core, q, k, v, [7, 7])
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    for tensor in (q2, k2, v2):
        tensor[:, :, 10:] = torch.randn_like(tensor[:, :, 10:]) * 3
    changed, _ = run_segments(core, q2, k2, v2, [7, 7])
    assert max_diff(out[:, :, :10], changed[:, :, :10]) < 1e-12
    assert max_diff(out[:, :, 10:], changed[:, :, 10:]) > 1e-3


def test_relative_scores_do_not_move_when_a_memory_shifts_the_absolute_positions():
    """With memory in front, every query sits mem_len positions further along; its scores over the current
    keys must be the same up to the softmax normaliser (positions enter only as i - j)."""
    q, k, v = qkv(heads=HEADS, q_len=14, dim=DIM)
    core = randomise_(build("xl", HEADS, DIM, mem_len=8))
    first = core(q[:, :, :8], k[:, :, :8], v[:, :, :8], causal=True)
    alone = core(q[:, :, 8:], k[:, :, 8:], v[:, :, 8:], causal=True, output_weights=True).weights
    after = core(q[:, :, 8:], k[:, :, 8:], v[:, :, 8:], causal=True, state=first.state, output_weights=True).weights
    assert after.shape == (2, HEADS, 6, 14) and alone.shape == (2, HEADS, 6, 6)
    on_current = after[..., 8:] / after[..., 8:].sum(-1, keepdim=True)
    assert max_diff(on_current, alone) < TOL64
    assert after[..., :8].sum().item() > 0.1  # the memory does take weight


def test_relative_shift_puts_every_distance_at_its_key():
    q_len, k_len = 4, 7
    i = torch.arange(q_len)[:, None]
    t = torch.arange(k_len)[None, :]
    by_distance = (i * 100 + (k_len - 1 - t)).double()  # row i, distance K-1-t
    shifted = relative_shift(by_distance[None, None])[0, 0]
    j = torch.arange(k_len)[None, :]
    position = k_len - q_len + i
    expected = (i * 100 + (position - j)).double()
    valid = j <= position
    assert torch.equal(shifted[valid.expand(q_len, k_len)], expected.expand(q_len, k_len)[valid.expand(q_len, k_len)])


def test_xl_with_a_key_value_cache_aligns_queries_with_the_last_keys():
    """kv_len > q_len (a decoder's cache): the queries are the last positions of the keys."""
    q, k, v = qkv(heads=HEADS, q_len=9, dim=DIM)
    core = randomise_(build("xl", HEADS, DIM, mem_len=4))
    whole = core(q, k, v, causal=True).values
    tail = core(q[:, :, 6:], k, v, causal=True).values
    assert max_diff(whole[:, :, 6:], tail) < TOL64


def test_the_cached_keys_equal_the_papers_reprojection_of_cached_hidden_states():
    """A layer carrying projected keys == the paper: project [SG(h of last mem_len positions); h] with W_k, W_v."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(HEADS * DIM, HEADS, attention_type="xl", attention_kwargs={"mem_len": 5}).double()
    randomise_(layer.core)
    hidden = torch.randn(2, 12, HEADS * DIM, dtype=torch.float64)
    first, _, state = layer(hidden[:, :6], causal=True)
    second, _, _ = layer(hidden[:, 6:], causal=True, state=state)
    stream = hidden[:, 1:]  # the 5 remembered hidden states, then the second segment
    keys, values = layer._split_heads(layer.k_proj(stream)), layer._split_heads(layer.v_proj(stream))
    q = layer._split_heads(layer.q_proj(hidden[:, 6:]))
    attended, _ = layer.core.relative_attention(q, keys, values, None, layer.scaling, 0.0)
    paper = layer.o_proj(attended.transpose(1, 2).reshape(2, 6, HEADS * DIM))
    assert max_diff(second, paper) < TOL64


def test_xl_refuses_what_it_cannot_serve_by_name():
    core = build("xl", HEADS, DIM, mem_len=4)
    q, k, v = qkv(heads=HEADS, q_len=6, dim=DIM)
    with pytest.raises(ValueError, match="only defined for causal"):
        core(q, k, v)
    with pytest.raises(ValueError, match=r"keys \(3\) cannot be fewer than queries \(6\)"):
        core(q, k[:, :, :3], v[:, :, :3], causal=True)
    with pytest.raises(ValueError, match="takes only a key padding mask"):
        core(q, k, v, attention_mask=causal_keep_mask(6, 6)[None, None], causal=True)
    with pytest.raises(ValueError, match="takes a SegmentMemory"):
        core(q, k, v, causal=True, state=(k, v))
    with pytest.raises(ValueError, match="do not fit batch 2"):
        core(q, k, v, causal=True, state=SegmentMemory(k[:1], v[:1]))
    with pytest.raises(ValueError, match="mem_len must be an integer >= 0"):
        build("xl", HEADS, DIM, mem_len=-1)
    with pytest.raises(ValueError, match="clamp_len must be an integer >= 1"):
        build("xl", HEADS, DIM, clamp_len=0)
    assert core.length_problems(6, 3) and not core.length_problems(6, 6)


# ---------------------------------------------------------------- Compressive Transformer


def compressive(mem_len, cmem_len, rate=2, compression="conv", seed=1):
    kwargs = {"mem_len": mem_len, "cmem_len": cmem_len, "compression_rate": rate, "compression": compression}
    return randomise_(build("compressive", HEADS, DIM, **kwargs), seed)


def xl_like(core, mem_len):
    """An ``xl`` core with the same u, v and W_R as ``core``."""
    xl = build("xl", HEADS, DIM, mem_len=mem_len)
    xl.load_state_dict({key: value for key, value in core.state_dict().items() if not key.startswith("compressor")})
    return xl


def test_compressive_without_compressed_memory_is_xl():
    q, k, v = qkv(heads=HEADS, q_len=18, dim=DIM)
    core = compressive(mem_len=4, cmem_len=0)
    out, results = run_segments(core, q, k, v, [6, 6, 6])
    expected, _ = run_segments(xl_like(core, 4), q, k, v, [6, 6, 6])
    assert torch.equal(out, expected)
    assert max_diff(out, xl_reference(core, q, k, v, [6, 6, 6], 4)) < TOL64
    assert all(r.aux_loss is None and r.state.compressed_keys.shape[2] == 0 for r in results)


def test_compressive_with_nothing_evicted_equals_the_xl_mask():
    q, k, v = qkv(heads=HEADS, q_len=15, dim=DIM)
    core = compressive(mem_len=20, cmem_len=6)
    out, results = run_segments(core, q, k, v, [5, 5, 5])
    assert max_diff(out, xl_reference(core, q, k, v, [5, 5, 5], 20)) < TOL64
    assert all(r.aux_loss is None and r.state.compressed_keys.shape[2] == 0 for r in results)


def test_rate_one_identity_compression_equals_xl_with_the_longer_memory():
    """c = 1 with the conv at its mean-pooling (here: identity) initialisation: [cmem; mem] is XL's memory."""
    q, k, v = qkv(heads=HEADS, q_len=18, dim=DIM)
    core = build("compressive", HEADS, DIM, mem_len=3, cmem_len=4, compression_rate=1)
    randomise_(core.r_net)
    out, results = run_segments(core, q, k, v, [5, 6, 7])
    assert max_diff(out, xl_reference(core, q, k, v, [5, 6, 7], 7)) < TOL64
    assert all(r.aux_loss.item() < 1e-25 for r in results)


def test_compression_shapes_fifo_and_only_evicted_memories_matter():
    q, k, v = qkv(heads=HEADS, q_len=18, dim=DIM)
    core = compressive(mem_len=4, cmem_len=3, rate=2)
    _, results = run_segments(core, q, k, v, [6, 6, 6])
    first, second = results[0].state, results[1].state
    # call 1: 6 positions, 4 kept, positions 0-1 evicted -> 1 slot; call 2: positions 2-7 evicted -> 3 slots,
    # the compressed memory keeps the newest 3 of 4 (FIFO).
    assert first.keys.shape == (2, HEADS, 4, DIM) and first.compressed_keys.shape == (2, HEADS, 1, DIM)
    assert second.compressed_keys.shape == (2, HEADS, 3, DIM) and results[2].state.compressed_keys.shape[2] == 3
    compressed_k, compressed_v, _ = core.compressor(k[:, :, 0:2], v[:, :, 0:2], None)
    assert max_diff(first.compressed_keys, compressed_k) < TOL64
    assert max_diff(first.compressed_values, compressed_v) < TOL64
    compressed_k, compressed_v, _ = core.compressor(k[:, :, 2:8], v[:, :, 2:8], None)
    assert max_diff(second.compressed_keys, compressed_k) < TOL64
    assert max_diff(second.compressed_values, compressed_v) < TOL64
    # a function of the evicted memories only: queries and the keys still in memory do not change it
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    for tensor in (q2, k2, v2):
        tensor[:, :, 8:12] += 2.0
    q2[:, :, :8] += 2.0
    assert torch.equal(run_segments(core, q2, k2, v2, [6, 6])[1][1].state.compressed_keys, second.compressed_keys)
    k2[:, :, 3] += 1.0
    assert max_diff(run_segments(core, q2, k2, v2, [6, 6])[1][1].state.compressed_keys, second.compressed_keys) > 1e-3


def test_only_the_newest_whole_groups_that_fit_are_compressed():
    q, k, v = qkv(heads=HEADS, q_len=12, dim=DIM)
    core = compressive(mem_len=2, cmem_len=4, rate=2)
    state = core(q[:, :, :7], k[:, :, :7], v[:, :, :7], causal=True).state
    expected, _, _ = core.compressor(k[:, :, 1:5], v[:, :, 1:5], None)  # 5 evicted: the oldest one is dropped
    assert max_diff(state.compressed_keys, expected) < TOL64
    short = compressive(mem_len=2, cmem_len=2, rate=2)
    state = short(q, k, v, causal=True).state  # 10 evicted = 5 groups; only the newest 2 fit
    expected, _, _ = short.compressor(k[:, :, 6:10], v[:, :, 6:10], None)
    assert max_diff(state.compressed_keys, expected) < TOL64 and state.keys.shape[2] == 2


def test_third_segment_attends_over_compressed_memory_memory_and_segment_with_relative_positions():
    q, k, v = qkv(heads=HEADS, q_len=18, dim=DIM)
    core = compressive(mem_len=4, cmem_len=3, rate=2)
    out, results = run_segments(core, q, k, v, [6, 6, 6])
    state = results[1].state
    keys = torch.cat([state.compressed_keys, state.keys, k[:, :, 12:]], dim=2)  # (B, H, 3 + 4 + 6, D)
    values = torch.cat([state.compressed_values, state.values, v[:, :, 12:]], dim=2)
    i, j = torch.arange(7, 13)[:, None], torch.arange(13)[None, :]
    expected = relative_reference(core, q[:, :, 12:], keys, values, j <= i, i - j)
    assert max_diff(out[:, :, 12:], expected) < TOL64


def test_aux_loss_is_the_reconstruction_error_and_trains_only_the_compressor():
    q, k, v = (t.requires_grad_() for t in qkv(heads=HEADS, q_len=14, dim=DIM))
    core = compressive(mem_len=4, cmem_len=4, rate=2)
    # evicts positions 0-3 -> two slots (over one slot the softmax is 1 whatever the key: no key gradient)
    result = core(q[:, :, :8], k[:, :, :8], v[:, :, :8], causal=True)
    old_k, old_v = k[:, :, :4].detach(), v[:, :, :4].detach()
    new_k, new_v, _ = core.compressor(old_k, old_v, None)
    target = reference(q[:, :, :8].detach(), old_k, old_v)
    attempt = reference(q[:, :, :8].detach(), new_k, new_v)
    assert abs(result.aux_loss.item() - (attempt - target).square().mean().item()) < TOL64
    result.aux_loss.backward()
    compressor = dict(core.compressor.named_parameters())
    assert all(p.grad is not None and p.grad.abs().max() > 0 for p in compressor.values())
    others = [p for n, p in core.named_parameters() if not n.startswith("compressor")]
    assert all(p.grad is None for p in others) and all(t.grad is None for t in (q, k, v))
    # the main path never reaches the compressor, neither now nor through the compressed memory later
    core.zero_grad(set_to_none=True)
    later = core(q[:, :, 8:], k[:, :, 8:], v[:, :, 8:], causal=True, state=result.state)
    (result.values.sum() + later.values.sum()).backward()
    assert all(p.grad is None for p in core.compressor.parameters())


@pytest.mark.parametrize("mode", ["mean", "max"])
def test_pooling_compressors_skip_padded_positions_and_have_no_aux_loss(mode):
    q, k, v = qkv(heads=HEADS, q_len=6, dim=DIM)
    keep = padding_keep(2, 6, [6, 6])
    keep[1, ..., 0] = False
    core = compressive(mem_len=2, cmem_len=4, rate=2, compression=mode)
    result = core(q, k, v, attention_mask=keep, causal=True)
    assert result.aux_loss is None and not list(core.compressor.parameters())
    pool = (lambda x: x.mean(1)) if mode == "mean" else (lambda x: x.amax(1))  # (H, c, D) -> (H, D)
    state = result.state
    assert max_diff(state.compressed_keys[0, :, 0], pool(k[0, :, 0:2])) < TOL64
    assert max_diff(state.compressed_keys[1, :, 0], k[1, :, 1]) < TOL64  # the padded position 0 is skipped
    assert max_diff(state.compressed_values[0, :, 1], pool(v[0, :, 2:4])) < TOL64
    assert state.compressed_keep.all()


def test_a_fully_padded_group_stays_masked_in_the_compressed_memory():
    q, k, v = qkv(heads=HEADS, q_len=12, dim=DIM)
    keep = padding_keep(2, 12, [12, 12])
    keep[1, ..., :2] = False
    core = compressive(mem_len=2, cmem_len=4, rate=2)
    out, results = run_segments(core, q, k, v, [6, 6], keep)
    assert results[0].state.compressed_keep.tolist() == [[True, True], [False, True]]
    changed_k = k.clone()
    changed_k[1, :, :2] += 4.0  # padded keys: their compression is masked, so nothing downstream moves
    assert max_diff(out, run_segments(core, q, changed_k, v, [6, 6], keep)[0]) < 1e-12


def test_compressive_refuses_bad_settings_and_states_by_name():
    for kwargs, message in [
        ({"compression": "avg"}, "compression must be one of"),
        ({"compression_rate": 0}, "compression_rate must be an integer >= 1"),
        ({"cmem_len": -2}, "cmem_len must be an integer >= 0"),
        ({"mem_len": 1.5}, "mem_len must be an integer"),
    ]:
        with pytest.raises(ValueError, match=message):
            build("compressive", HEADS, DIM, **kwargs)
    core = build("compressive", HEADS, DIM)
    q, k, v = qkv(heads=HEADS, q_len=4, dim=DIM)
    with pytest.raises(ValueError, match="takes a CompressiveMemory"):
        core(q, k, v, causal=True, state=SegmentMemory(k, v))
    bad = CompressiveMemory(k, v, None, k[..., :2], v, None)
    with pytest.raises(ValueError, match="compressed keys of shape"):
        core(q, k, v, causal=True, state=bad)


# ---------------------------------------------------------------- both, inside a layer and in low precision


@pytest.mark.parametrize("name", ["xl", "compressive"])
def test_state_and_aux_loss_flow_through_the_attention_layer(name):
    torch.manual_seed(0)
    kwargs = {"mem_len": 3, "cmem_len": 2} if name == "compressive" else {"mem_len": 3}
    layer = MultiHeadAttention(HEADS * DIM, HEADS, attention_type=name, attention_kwargs=kwargs)
    hidden = torch.randn(2, 10, HEADS * DIM)
    _, _, state = layer(hidden[:, :5], causal=True)
    assert state.keys.shape == (2, HEADS, 3, DIM)
    out, weights, state = layer(hidden[:, 5:], causal=True, state=state, output_attentions=True)
    extra = 1 if name == "compressive" else 0  # 2 positions evicted by the first call -> one slot
    assert out.shape == (2, 5, HEADS * DIM) and weights.shape == (2, HEADS, 5, 3 + extra + 5)
    if name == "compressive":
        layer.aux_loss.backward()
        assert layer.core.compressor.key_weight.grad is not None
    else:
        assert layer.aux_loss is None
    with pytest.raises(ValueError, match="only defined for causal"):
        layer(hidden)


@pytest.mark.parametrize("name", ["xl", "compressive"])
def test_bfloat16_segments_run_and_stay_close_to_float32(name):
    q, k, v = qkv(heads=HEADS, q_len=12, dim=DIM, dtype=torch.float32)
    kwargs = {"mem_len": 4, "cmem_len": 2} if name == "compressive" else {"mem_len": 4}
    core = build(name, HEADS, DIM, dtype=torch.float32, **kwargs)
    exact, _ = run_segments(core, q, k, v, [6, 6])
    low, _ = run_segments(core.to(torch.bfloat16), q.bfloat16(), k.bfloat16(), v.bfloat16(), [6, 6])
    assert low.dtype == torch.bfloat16 and torch.isfinite(low).all()
    assert max_diff(low.float(), exact) < 0.1


def test_dropout_on_the_probabilities():
    q, k, v = qkv(heads=HEADS, q_len=8, dim=DIM)
    core = build("xl", HEADS, DIM, mem_len=4).train()  # dropout acts in training mode
    plain = core(q, k, v, causal=True).values
    torch.manual_seed(0)
    dropped = core(q, k, v, causal=True, dropout=0.5).values
    assert max_diff(plain, dropped) > 1e-3
