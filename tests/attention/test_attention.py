"""The attention registry: the `full` entry against a float64 reference, masks, capabilities, errors."""

from __future__ import annotations

import math

import pytest
import torch

from hf_xcv.attention import (
    AttentionCore,
    AttentionOutput,
    Capabilities,
    MultiHeadAttention,
    attention_kwarg_defaults,
    available_attention_types,
    build_attention,
    capability_problems,
    capability_table,
    check_capabilities,
    register_attention,
    validate_attention_kwargs,
)
from hf_xcv.attention import registry as registry_module


def reference_attention(q, k, v, keep=None):
    """Plain softmax attention written out with loops over nothing clever: the float64 oracle."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)  # a fully masked row attends to nothing
    return probs @ v, probs


class _Owner(torch.nn.Module):
    """Stands in for a model's attention layer: carries the config that picks the backend."""

    def __init__(self, implementation: str):
        super().__init__()
        self.config = type("Cfg", (), {"_attn_implementation": implementation})()
        self.is_causal = False


def qkv(batch=2, heads=3, q_len=5, kv_len=5, dim=8, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(batch, heads, n, dim, generator=g, dtype=dtype) for n in (q_len, kv_len, kv_len))


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("case", ["plain", "padding", "causal", "causal+padding", "cross"])
def test_full_matches_the_float64_reference(implementation, case):
    q_len, kv_len = (4, 7) if case == "cross" else (6, 6)
    q, k, v = qkv(q_len=q_len, kv_len=kv_len)
    keep = None
    if "padding" in case:
        keep = torch.ones(2, 1, 1, kv_len, dtype=torch.bool)
        keep[0, ..., -2:] = False
    causal = "causal" in case
    core = build_attention("full", num_heads=3, head_dim=8)
    out = core(q, k, v, attention_mask=keep, causal=causal, module=_Owner(implementation))
    full_keep = keep
    if causal:
        tri = torch.ones(q_len, kv_len, dtype=torch.bool).tril()
        full_keep = tri if keep is None else keep & tri
    expected, _ = reference_attention(q, k, v, full_keep)
    assert out.values.shape == q.shape[:3] + (8,)
    torch.testing.assert_close(out.values, expected, atol=1e-10, rtol=1e-10)


def test_full_returns_weights_that_match_the_reference():
    q, k, v = qkv()
    out = build_attention("full", num_heads=3, head_dim=8)(q, k, v, output_weights=True, module=_Owner("sdpa"))
    _, probs = reference_attention(q, k, v)
    torch.testing.assert_close(out.weights, probs, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_a_fully_masked_query_row_gives_zeros_not_nan(implementation):
    q, k, v = qkv(batch=1, q_len=3, kv_len=4)
    keep = torch.ones(1, 1, 3, 4, dtype=torch.bool)
    keep[..., 1, :] = False
    out = build_attention("full", num_heads=3, head_dim=8)(q, k, v, attention_mask=keep, module=_Owner(implementation))
    assert torch.isfinite(out.values).all()
    assert torch.equal(out.values[:, :, 1], torch.zeros_like(out.values[:, :, 1]))


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_causal_attention_leaks_nothing_from_the_future(implementation):
    q, k, v = qkv(batch=1, q_len=6, kv_len=6)
    core = build_attention("full", num_heads=3, head_dim=8)
    before = core(q, k, v, causal=True, module=_Owner(implementation)).values
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4:] += 5.0
    v2[:, :, 4:] -= 3.0
    after = core(q, k2, v2, causal=True, module=_Owner(implementation)).values
    torch.testing.assert_close(before[:, :, :4], after[:, :, :4], atol=0, rtol=0)
    assert not torch.allclose(before[:, :, 4:], after[:, :, 4:])


def test_causal_with_more_keys_than_queries_aligns_queries_with_the_last_keys():
    q, k, v = qkv(batch=1, q_len=2, kv_len=5)
    out = build_attention("full", num_heads=3, head_dim=8)(q, k, v, causal=True, module=_Owner("sdpa"))
    keep = torch.tensor([[True, True, True, True, False], [True] * 5])
    expected, _ = reference_attention(q, k, v, keep)
    torch.testing.assert_close(out.values, expected, atol=1e-10, rtol=1e-10)


def test_a_float_mask_is_rejected_with_a_clear_error():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="boolean keep mask"):
        build_attention("full", num_heads=3, head_dim=8)(q, k, v, attention_mask=torch.zeros(1, 1, 5, 5))


def test_unknown_attention_type_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"attention_type='nope'.*allowed values: \[") as info:
        build_attention("nope", num_heads=2, head_dim=4)
    for name in ("full", "linformer", "performer", "xl"):
        assert repr(name) in str(info.value)


def test_unknown_attention_kwargs_are_rejected_not_dropped():
    with pytest.raises(ValueError, match=r"\['window'\].*accepted keys: none"):
        build_attention("full", num_heads=2, head_dim=4, window=3)
    with pytest.raises(ValueError, match="window"):
        validate_attention_kwargs("full", {"window": 3})


@pytest.fixture
def limited_entry():
    """A registry entry that can do nothing special, registered only for the test."""

    @register_attention
    class Limited(AttentionCore):
        name = "limited-for-test"
        capabilities = Capabilities(needs_grid=True)

        def __init__(self, num_heads: int, head_dim: int, block: int = 4):
            super().__init__(num_heads, head_dim)
            self.block = block

        def attend(self, q, k, v, call):
            return AttentionOutput(v)

    yield Limited
    del registry_module._REGISTRY["limited-for-test"]


def test_capability_mismatch_lists_every_reason(limited_entry):
    with pytest.raises(ValueError) as info:
        check_capabilities(
            "limited-for-test", padding_mask=True, causal=True, cross_attention=True, returns_weights=True
        )
    message = str(info.value)
    for reason in ("padding mask", "causal", "cross-attention", "returning attention weights", "2-D token grid"):
        assert reason in message


def test_a_layer_refuses_what_its_core_cannot_serve(limited_entry):
    layer = MultiHeadAttention(8, 2, attention_type="limited-for-test")
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="causal"):
        layer(x, causal=True, grid=(2, 2))
    with pytest.raises(ValueError, match="memory carried from a previous call"):
        layer(x, grid=(2, 2), state=torch.zeros(1))
    assert layer(x, grid=(2, 2))[0].shape == x.shape


def test_entry_kwargs_are_discovered_from_the_constructor(limited_entry):
    assert attention_kwarg_defaults("limited-for-test") == {"block": 4}
    assert build_attention("limited-for-test", num_heads=2, head_dim=4, block=8).block == 8
    assert "limited-for-test" in available_attention_types()
    row = next(r for r in capability_table() if r["name"] == "limited-for-test")
    assert row["needs_grid"] and not row["causal"]


def test_registering_a_second_class_under_a_taken_name_fails():
    with pytest.raises(ValueError, match="already registered"):

        @register_attention
        class Impostor(AttentionCore):
            name = "full"


def test_multi_head_attention_layer_cross_attention_shapes():
    layer = MultiHeadAttention(16, 4, kv_size=12)
    out, weights, _ = layer(torch.randn(2, 3, 16), key_value_states=torch.randn(2, 7, 12), output_attentions=True)
    assert out.shape == (2, 3, 16)
    assert weights.shape == (2, 4, 3, 7)
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(10, 4)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("case", ["plain", "padding+causal", "cross", "empty row"])
def test_full_adds_the_bias_with_the_masks_on_every_dense_backend(implementation, case):
    q_len, kv_len = (4, 7) if case == "cross" else (6, 6)
    q, k, v = qkv(q_len=q_len, kv_len=kv_len)
    bias = torch.randn(1, 3, q_len, kv_len, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    bias.requires_grad_()
    keep = None
    if case != "plain" and case != "cross":
        keep = torch.ones(2, 1, 1, kv_len, dtype=torch.bool)
        keep[0, ..., -2:] = False
        if case == "empty row":
            keep[1] = False
    causal = "causal" in case
    out = build_attention("full", num_heads=3, head_dim=8)(
        q, k, v, attention_mask=keep, causal=causal, attention_bias=bias, module=_Owner(implementation)
    ).values
    full_keep = keep
    if causal:
        full_keep = keep & torch.ones(q_len, kv_len, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-1, -2) / math.sqrt(8) + bias).masked_fill(
        ~full_keep if full_keep is not None else torch.zeros((), dtype=torch.bool), float("-inf")
    )
    expected = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0) @ v
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)
    (grad,) = torch.autograd.grad(out.sum(), bias)
    (expected_grad,) = torch.autograd.grad(expected.sum(), bias)
    torch.testing.assert_close(grad, expected_grad, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("case", ["causal", "padding+bias", "bias", "cross+causal"])
def test_flex_attention_takes_masks_causality_and_a_bias(case):
    """Folded into flex's position bias: transformers' flex path would drop a causal flag silently."""
    q_len, kv_len = (3, 5) if "cross" in case else (5, 5)
    q, k, v = (t.float() for t in qkv(q_len=q_len, kv_len=kv_len))
    bias = torch.randn(1, 3, q_len, kv_len) if "bias" in case else None
    keep = None
    if "padding" in case:
        keep = torch.ones(2, 1, 1, kv_len, dtype=torch.bool)
        keep[1, ..., 3:] = False
    core = build_attention("full", num_heads=3, head_dim=8)
    call = {"attention_mask": keep, "attention_bias": bias, "causal": "causal" in case}
    with torch.no_grad():
        out = core(q, k, v, module=_Owner("flex_attention"), **call).values
        expected = core(q, k, v, module=_Owner("eager"), **call).values
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_flash_attention_refuses_a_bias_by_name():
    q, k, v = qkv()
    core = build_attention("full", num_heads=3, head_dim=8)
    with pytest.raises(ValueError, match="attn_implementation='flash_attention_2' takes no attention bias") as err:
        core(
            q,
            k,
            v,
            torch.ones(2, 1, 1, 5, dtype=torch.bool),
            attention_bias=torch.zeros(5, 5, dtype=q.dtype),
            module=_Owner("flash_attention_2"),
        )
    assert "takes no dense attention mask" in str(err.value)  # with the call's other problems, in one error


def test_every_problem_of_a_call_is_listed_in_one_error(limited_entry):
    core = build_attention("limited-for-test", num_heads=2, head_dim=4)
    q = torch.randn(1, 2, 4, 4)
    with pytest.raises(ValueError) as info:
        core(
            q,
            q,
            q,
            torch.ones(1, 1, 1, 4, dtype=torch.bool),
            True,
            None,
            torch.zeros(1),
            torch.zeros(4, 4),
            cross_attention=True,
            output_weights=True,
            prefix_tokens=-1,
        )
    message = str(info.value)
    for reason in (
        "causal",
        "cross-attention",
        "returning attention weights",
        "memory carried",
        "2-D token grid",
        "prefix_tokens must be >= 0",
        "padding mask",
        "additive attention bias",
    ):
        assert reason in message, reason
    with pytest.raises(ValueError, match="do not fit together"):
        core(q, q[:, :1], q, grid=(2, 2))


def test_validation_traces_into_one_graph_under_torch_compile_and_export():
    """The base class's checks read shapes and flags only: no graph break, no data-dependent guard."""
    layer = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 6, 16)
    keep = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    keep[1, ..., 4:] = False
    bias = torch.randn(2, 6, 6)
    kwargs = {"attention_mask": keep, "attention_bias": bias, "causal": True}
    with torch.no_grad():
        expected = layer(x, **kwargs)[0]
        compiled = torch.compile(
            lambda *a: layer(a[0], attention_mask=a[1], attention_bias=a[2], causal=True)[0],
            fullgraph=True,
            backend="eager",
        )
        torch.testing.assert_close(compiled(x, keep, bias), expected)
    exported = torch.export.export(layer, (x,), kwargs=kwargs)
    torch.testing.assert_close(exported.module()(x, **kwargs)[0], expected)


def test_a_model_can_ask_for_masks_other_than_padding():
    assert not capability_problems("full", arbitrary_mask=True, attention_bias=True)
    problems = capability_problems("local", arbitrary_mask=True, attention_bias=True)
    assert len(problems) == 1 and "mask other than key padding" in problems[0]


def test_masks_and_biases_of_fewer_dimensions_broadcast_like_torch():
    q, k, v = qkv(q_len=5, kv_len=5)
    keep = torch.rand(5, 5, generator=torch.Generator().manual_seed(0)) > 0.3
    keep[:, 0] = True
    bias = torch.randn(3, 5, 5, dtype=torch.float64)  # (heads, q_len, kv_len)
    core = build_attention("full", num_heads=3, head_dim=8)
    out = core(q, k, v, attention_mask=keep, attention_bias=bias, module=_Owner("eager")).values
    expected = core(q, k, v, attention_mask=keep[None, None], attention_bias=bias[None], module=_Owner("eager")).values
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"attention_bias of shape \(2, 5, 5\) does not broadcast"):
        core(q, k, v, attention_bias=torch.zeros(2, 5, 5, dtype=torch.float64))
