"""Registry-wide checks, run on every registered attention entry without per-entry code.

For each entry: its exact setting equals plain softmax attention, its dense mask (pattern-based entries)
reproduces its output, padding and fully masked rows behave, causal variants leak nothing, the same
seed gives the same output, state dicts round-trip, float32 backward is finite, and unknown settings are
refused. Entries without an exact setting or without a dense pattern must be listed below on purpose.
"""

from __future__ import annotations

import pytest
import torch
from attention_testing import TOL64, max_diff, padding_keep, qkv, reference

from hf_xcv.attention import available_attention_types, build_attention, causal_keep_mask, get_attention_class

ENTRIES = available_attention_types()

# Entries with no setting that makes them plain softmax attention (approximations, learned attention, or a
# factorisation such as axial's rows-then-columns on a real 2-D grid): their own tests check them against
# their defining formula (e.g. Performer's error falling with more random features).
NO_EXACT_SETTING = {"performer", "linear", "synthesizer_dense", "synthesizer_random", "isab", "axial"}
# Entries whose output is not softmax attention under one boolean pattern (low-rank, kernel, learned,
# multi-pass or multi-round ones); their exact setting is checked instead.
NOT_PATTERN_BASED = {
    "full",
    "memory_compressed",
    "axial",
    "routing",
    "lsh",
    "sinkhorn",
    "linformer",
    "linear",
    "performer",
    "synthesizer_dense",
    "synthesizer_random",
    "isab",
    "xl",
    "compressive",
    "shifted_window",  # its learned relative bias and the -100 between regions are additive, not a pattern
}


def layout(name: str) -> tuple[int, tuple[int, int] | None, int]:
    """(length, grid, prefix_tokens): a 4x4 grid after one [CLS] for grid entries, 16 tokens otherwise."""
    if get_attention_class(name).capabilities.needs_grid:
        return 17, (4, 4), 1
    return 16, None, 0


def causal_modes(name: str) -> list[bool]:
    caps = get_attention_class(name).capabilities
    modes = [] if caps.requires_causal else [False]
    return modes + ([True] if caps.causal else [])


CASES = [(name, causal) for name in ENTRIES for causal in causal_modes(name)]


def case_id(case) -> str:
    return f"{case[0]}-{'causal' if case[1] else 'bidirectional'}"


def make(name: str, dtype=torch.float64, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    return build_attention(name, 2, 8, **kwargs).to(dtype).eval()


def call(core, q, k, v, name: str, keep=None, causal=False, prefix: int | None = None, bias=None, **extra):
    _, grid, default_prefix = layout(name)
    prefix = default_prefix if prefix is None else prefix
    if causal and grid is not None:
        prefix = 0
        grid = (4, 4)
    return core(
        q, k, v, attention_mask=keep, causal=causal, grid=grid, prefix_tokens=prefix, attention_bias=bias, **extra
    )


def inputs(name: str, causal: bool, dtype=torch.float64, seed=0, batch: int = 2):
    length, grid, _ = layout(name)
    if causal and grid is not None:
        length = 16  # causal grid attention runs on a plain raster-ordered grid
    return qkv(batch=batch, heads=2, q_len=length, dim=8, dtype=dtype, seed=seed)


def real_lengths(length: int, batch: int = 2) -> list[int]:
    """How many leading keys of each batch row are real when it is padded: all, 5 fewer, then 2 fewer."""
    return ([length, length - 5] + [length - 2] * batch)[:batch]


def padding_for(name: str, length: int, batch: int = 2) -> torch.Tensor | None:
    if not get_attention_class(name).capabilities.padding_mask:
        return None
    return padding_keep(batch, length, real_lengths(length, batch))


def combined(keep, causal: bool, length: int):
    tri = causal_keep_mask(length, length) if causal else None
    if keep is None:
        return tri
    return keep if tri is None else keep & tri


def test_the_lists_of_special_entries_name_registered_entries():
    assert NO_EXACT_SETTING <= set(ENTRIES) and NOT_PATTERN_BASED <= set(ENTRIES)
    for name in ENTRIES:
        cls = get_attention_class(name)
        length, grid, _ = layout(name)
        assert (cls.exact_kwargs(length, grid) is None) == (name in NO_EXACT_SETTING), name


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in NO_EXACT_SETTING], ids=case_id)
def test_exact_setting_equals_softmax_attention(case):
    name, causal = case
    q, k, v = inputs(name, causal)
    length = q.shape[2]
    _, grid, _ = layout(name)
    core = make(name, **get_attention_class(name).exact_kwargs(length, grid))
    core.make_exact_()
    keep = padding_for(name, length)
    out = call(core, q, k, v, name, keep, causal).values
    expected = reference(q, k, v, combined(keep, causal, length))
    assert max_diff(out[0], expected[0]) < TOL64
    # the padded row: compare the real query positions
    real = length - 5 if keep is not None else length
    assert max_diff(out[1, :, :real], expected[1, :, :real]) < TOL64


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in NOT_PATTERN_BASED], ids=case_id)
def test_dense_mask_reproduces_the_output(case):
    name, causal = case
    q, k, v = inputs(name, causal)
    length = q.shape[2]
    core = make(name, **get_attention_class(name).small_kwargs)
    _, grid, prefix = layout(name)
    if causal and grid is not None:
        prefix = 0
    pattern = core.dense_mask(q, k, causal=causal, grid=grid, prefix_tokens=prefix)
    assert pattern is not None and pattern.dtype == torch.bool
    assert not pattern.all(), "small_kwargs should give a sparse pattern"
    keep = padding_for(name, length)
    out = call(core, q, k, v, name, keep, causal).values
    full_keep = pattern if keep is None else pattern & keep
    expected = reference(q, k, v, full_keep)
    real = length - 5 if keep is not None else length
    assert max_diff(out[0], expected[0]) < TOL64
    assert max_diff(out[1, :, :real], expected[1, :, :real]) < TOL64
    if causal:
        assert not (pattern & ~causal_keep_mask(length, length)).any(), "a causal pattern sees the future"


@pytest.mark.parametrize("case", [c for c in CASES if get_attention_class(c[0]).capabilities.padding_mask], ids=case_id)
def test_padding_masked_keys_do_not_matter_and_empty_rows_give_zeros(case):
    name, causal = case
    q, k, v = inputs(name, causal)
    length = q.shape[2]
    core = make(name, **get_attention_class(name).small_kwargs)
    keep = padding_for(name, length)
    out = call(core, q, k, v, name, keep, causal).values
    # change the masked keys (and values) of row 1: its real positions must not move
    k2, v2 = k.clone(), v.clone()
    if not get_attention_class(name).content_routed:
        k2[1, :, length - 5 :] += 3.0
    v2[1, :, length - 5 :] += 3.0
    changed = call(core, q, k2, v2, name, keep, causal).values
    assert max_diff(out[1, :, : length - 5], changed[1, :, : length - 5]) < 1e-12
    # a row with no key to attend gives zeros, never NaN
    nothing = keep.clone()
    nothing[1] = False
    empty = call(core, q, k, v, name, nothing, causal).values
    assert torch.isfinite(empty).all()
    assert empty[1].abs().max().item() == 0.0


@pytest.mark.parametrize("case", [c for c in CASES if c[1]], ids=case_id)
def test_causal_output_is_unchanged_by_the_future(case):
    """At every cut, with one row padded where the entry takes padding: changing what follows the cut leaves
    every output up to the cut unchanged."""
    name, causal = case
    q, k, v = inputs(name, causal)
    length = q.shape[2]
    core = make(name, **get_attention_class(name).small_kwargs)
    keep = padding_for(name, length)
    out = call(core, q, k, v, name, keep, causal=True).values
    routed = get_attention_class(name).content_routed
    for cut in range(length - 1):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        future = slice(cut + 1, None)
        if not routed:
            q2[:, :, future] = torch.randn_like(q2[:, :, future])
            k2[:, :, future] = torch.randn_like(k2[:, :, future])
        v2[:, :, future] = torch.randn_like(v2[:, :, future]) * 5
        changed = call(core, q2, k2, v2, name, keep, causal=True).values
        assert max_diff(out[:, :, : cut + 1], changed[:, :, : cut + 1]) < 1e-12, f"leak at cut {cut}"
        if cut == length // 2:
            assert max_diff(out[0, :, cut + 1 :], changed[0, :, cut + 1 :]) > 1e-6  # the future itself did change


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_same_seed_same_output_and_state_dicts_round_trip(case):
    name, causal = case
    q, k, v = inputs(name, causal)
    kwargs = get_attention_class(name).small_kwargs
    first, second = make(name, seed=3, **kwargs).train(), make(name, seed=3, **kwargs).train()
    outputs = []
    for core in (first, second):
        torch.manual_seed(11)  # per-call randomness (dropout-free here) drawn from torch's generator
        outputs.append(call(core, q, k, v, name, causal=causal).values)
    assert torch.equal(outputs[0], outputs[1])
    other = make(name, seed=99, **kwargs)
    other.load_state_dict(first.state_dict())
    first.eval()
    torch.manual_seed(5)
    expected = call(first, q, k, v, name, causal=causal).values
    torch.manual_seed(5)
    assert torch.equal(call(other, q, k, v, name, causal=causal).values, expected)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_float32_forward_backward_is_finite(case):
    name, causal = case
    q, k, v = (t.requires_grad_() for t in inputs(name, causal, dtype=torch.float32))
    core = make(name, dtype=torch.float32, **get_attention_class(name).small_kwargs).train()
    result = call(core, q, k, v, name, causal=causal)
    assert result.values.shape == q.shape
    assert torch.isfinite(result.values).all()
    loss = result.values.square().sum()
    if result.aux_loss is not None:
        loss = loss + result.aux_loss
    loss.backward()
    assert v.grad is not None and torch.isfinite(v.grad).all() and v.grad.abs().sum() > 0
    if not name.startswith("synthesizer_random"):  # random synthesized attention does not read the queries
        assert q.grad is not None and torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ENTRIES)
def test_unknown_settings_are_refused_by_name(name):
    with pytest.raises(ValueError, match="not_a_setting"):
        build_attention(name, 2, 8, not_a_setting=1)


# ---------------------------------------------------------------------------------------------------------
# additive attention bias
# ---------------------------------------------------------------------------------------------------------

BIAS_CASES = [c for c in CASES if get_attention_class(c[0]).capabilities.attention_bias]
# Every shape a bias may have: per batch row and head, shared by the batch, shared by the heads, one per key
# (ALiBi-like), a (heads, q_len, kv_len) table (Swin's relative position bias) and a bare (q_len, kv_len) one.
# The bias tests run 3 batch rows and 2 heads, so that a swapped batch and head index cannot pass.
BIAS_BATCH = 3
BIAS_SHAPES = {
    "BHQK": (BIAS_BATCH, 2, -1, -1),
    "1HQK": (1, 2, -1, -1),
    "B1QK": (BIAS_BATCH, 1, -1, -1),
    "BH1K": (BIAS_BATCH, 2, 1, -1),
    "HQK": (2, -1, -1),
    "QK": (-1, -1),
}


def random_bias(shape: tuple[int, ...], length: int, seed: int = 7) -> torch.Tensor:
    sizes = [length if size == -1 else size for size in shape]
    return torch.randn(*sizes, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2


def bias_settings(name: str, length: int, grid) -> list[tuple[str, dict]]:
    """The settings under which an entry is dense softmax attention: its exact setting and, for pattern-based
    entries, its small (sparse) setting with its dense mask."""
    cls = get_attention_class(name)
    settings = []
    if cls.exact_kwargs(length, grid) is not None:
        settings.append(("exact", cls.exact_kwargs(length, grid)))
    if name not in NOT_PATTERN_BASED:
        settings.append(("pattern", dict(cls.small_kwargs)))
    return settings


def test_every_entry_that_takes_a_bias_can_be_checked_against_dense_attention():
    assert {"full", "local", "local_2d", "sparse_strided", "longformer", "bigbird", "lsh"} <= {c[0] for c in BIAS_CASES}
    for name in {c[0] for c in BIAS_CASES}:
        length, grid, _ = layout(name)
        assert bias_settings(name, length, grid), name


def biased_case(name: str, causal: bool, setting: str, kwargs: dict, shape) -> tuple:
    """(output, expected, real query rows of each batch row) of an entry with a bias against dense attention
    with that bias."""
    q, k, v = inputs(name, causal, batch=BIAS_BATCH)
    length = q.shape[2]
    core = make(name, **kwargs)
    core.make_exact_() if setting == "exact" else None
    keep = padding_for(name, length, BIAS_BATCH)
    bias = random_bias(shape, length)
    _, grid, prefix = layout(name)
    if causal and grid is not None:
        prefix, grid = 0, (4, 4)
    pattern = None if setting == "exact" else core.dense_mask(q, k, causal=causal, grid=grid, prefix_tokens=prefix)
    full_keep = combined(keep, causal, length)
    if pattern is not None:
        full_keep = pattern if full_keep is None else pattern & full_keep
    out = call(core, q, k, v, name, keep, causal, bias=bias).values
    real = real_lengths(length, BIAS_BATCH) if keep is not None else [length] * BIAS_BATCH
    return out, reference(q, k, v, full_keep, bias=bias), real


@pytest.mark.parametrize("shape", list(BIAS_SHAPES), ids=list(BIAS_SHAPES))
@pytest.mark.parametrize("case", BIAS_CASES, ids=case_id)
def test_an_attention_bias_gives_dense_softmax_attention_with_that_bias(case, shape):
    name, causal = case
    length, grid, _ = layout(name)
    for setting, kwargs in bias_settings(name, length, grid):
        out, expected, real = biased_case(name, causal, setting, kwargs, BIAS_SHAPES[shape])
        for row, count in enumerate(real):  # the real query positions of every batch row
            assert max_diff(out[row, :, :count], expected[row, :, :count]) < TOL64, (setting, row)


@pytest.mark.parametrize("case", BIAS_CASES, ids=case_id)
def test_the_bias_gets_the_gradient_of_dense_attention_and_empty_rows_stay_zero(case):
    name, causal = case
    q, k, v = inputs(name, causal, batch=BIAS_BATCH)
    length = q.shape[2]
    _, grid, prefix = layout(name)
    setting, kwargs = bias_settings(name, length, grid)[0]
    core = make(name, **kwargs)
    core.make_exact_() if setting == "exact" else None
    keep = padding_for(name, length, BIAS_BATCH)
    keep[1] = False  # a batch row with nothing to attend
    bias = random_bias(BIAS_SHAPES["BHQK"], length).requires_grad_()
    out = call(core, q, k, v, name, keep, causal, bias=bias).values
    assert torch.isfinite(out).all() and out[1].abs().max().item() == 0.0
    if causal and grid is not None:
        prefix, grid = 0, (4, 4)
    pattern = None if setting == "exact" else core.dense_mask(q, k, causal=causal, grid=grid, prefix_tokens=prefix)
    full_keep = combined(keep, causal, length)
    full_keep = full_keep if pattern is None else pattern & full_keep
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=out.dtype)
    (grad,) = torch.autograd.grad((out * weights).sum(), bias)
    expected = reference(q, k, v, full_keep, bias=bias)
    (expected_grad,) = torch.autograd.grad((expected * weights).sum(), bias)
    assert max_diff(grad, expected_grad) < TOL64
    assert torch.isfinite(grad).all() and grad[1].abs().max().item() == 0.0


@pytest.mark.parametrize("name", [n for n in ENTRIES if not get_attention_class(n).capabilities.attention_bias])
def test_entries_without_bias_support_refuse_a_bias_by_name(name):
    causal = get_attention_class(name).capabilities.requires_causal
    q, k, v = inputs(name, causal)
    bias = torch.zeros(q.shape[2], k.shape[2], dtype=q.dtype)
    core = make(name, **get_attention_class(name).small_kwargs)
    with pytest.raises(ValueError, match=f"attention_type={name!r} cannot be used here: .*additive attention bias"):
        call(core, q, k, v, name, causal=causal, bias=bias)


def test_a_bias_of_the_wrong_shape_or_type_is_refused_with_every_reason():
    q, k, v = inputs("full", False)
    core = make("full")
    with pytest.raises(ValueError, match=r"attention_bias of shape \(1, 3, 16, 16\) does not broadcast"):
        core(q, k, v, attention_bias=torch.zeros(1, 3, 16, 16, dtype=q.dtype))
    with pytest.raises(ValueError, match="attention_bias must be a float tensor"):
        core(q, k, v, attention_bias=torch.zeros(16, 16, dtype=torch.long))


# ---------------------------------------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------------------------------------

# Entries that draw per-call randomness from a torch.Generator (BigBird's random blocks, LSH's rotations):
# Dynamo cannot create one inside a graph, so they run compiled with graph breaks, not with fullgraph=True.
DRAWS_A_GENERATOR = {"bigbird", "lsh"}


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in DRAWS_A_GENERATOR], ids=case_id)
def test_every_entry_compiles_into_one_graph_with_its_masks_and_bias(case):
    """Validation and attention read shapes and flags, never tensor values: torch.compile(fullgraph=True)
    traces the whole call, padding mask and bias included where the entry takes them."""
    import torch._dynamo

    name, causal = case
    caps = get_attention_class(name).capabilities
    q, k, v = inputs(name, causal, dtype=torch.float32)
    length = q.shape[2]
    core = make(name, dtype=torch.float32, **get_attention_class(name).small_kwargs)
    keep = padding_for(name, length)
    bias = torch.randn(2, 2, length, length) if caps.attention_bias else None

    def run(q, k, v, keep, bias):
        return call(core, q, k, v, name, keep, causal, bias=bias).values

    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(run, fullgraph=True, backend="eager")
        torch.testing.assert_close(compiled(q, k, v, keep, bias), run(q, k, v, keep, bias))


@pytest.mark.parametrize(
    "case", [c for c in CASES if get_attention_class(c[0]).capabilities.returns_weights], ids=case_id
)
def test_returned_weights_are_on_the_autograd_graph_and_give_the_values(case):
    """As transformers' eager maps: values = weights @ v, and a gradient reaches the maps (retain_grad,
    attribution), with the same values as without weights."""
    name, causal = case
    q, k, v = (t.requires_grad_() for t in inputs(name, causal))
    core = make(name, **get_attention_class(name).small_kwargs)
    plain = call(core, q, k, v, name, causal=causal).values
    out = call(core, q, k, v, name, causal=causal, output_weights=True)
    assert max_diff(out.values, plain) < TOL64  # full computes the weights eagerly: rounding apart
    upstream = torch.randn(out.values.shape, generator=torch.Generator().manual_seed(4), dtype=out.values.dtype)
    expected = torch.autograd.grad((plain * upstream).sum(), (q, k, v), allow_unused=True)
    out.weights.retain_grad()
    (out.values * upstream).sum().backward()
    assert out.weights.grad is not None
    assert max_diff(out.weights.grad, upstream @ v.detach().transpose(-1, -2)) < TOL64
    for tensor, grad in zip((q, k, v), expected):  # the inputs' gradients are the same as without the maps
        if grad is not None:
            assert max_diff(tensor.grad, grad) < TOL64
