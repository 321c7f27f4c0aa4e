"""Registry-driven checks: every model type in hf_xcv.MODEL_TYPES, and every attention entry inside it.

Registering a model type (with a test preset) or an attention entry adds it here without new code.
"""

from __future__ import annotations

import re

import pytest
import torch
from model_testing import (
    HEADS,
    MODEL_CASES,
    SPECS,
    assert_close_at_scale,
    auto_load,
    case_id,
    check_layer_outputs_on_the_graph,
    entry_config,
    main_output,
    make_inputs,
    run_loss,
    serves,
    stack_outputs,
    tiny_config,
)
from transformers import AutoBackbone, AutoConfig, AutoModel

import hf_xcv
from hf_xcv import MODEL_TYPES
from hf_xcv.attention import available_attention_types, get_attention_class
from hf_xcv.auto import AUTO_CLASSES, auto_class_name


@pytest.fixture(params=MODEL_CASES, ids=case_id)
def model_case(request):
    model_type, cls = request.param
    return model_type, cls


def test_every_model_type_has_a_test_preset_and_its_dummy_inputs():
    for model_type, entry in MODEL_TYPES.items():
        spec = SPECS[model_type]  # its family's module in tests/model_specs
        assert spec.test_preset in hf_xcv.PRESETS, model_type
        assert hf_xcv.PRESETS[spec.test_preset].model_type == model_type
        assert callable(spec.dummy_inputs), model_type
        assert set(entry.heads) <= set(AUTO_CLASSES), model_type


def test_forward_backward_every_parameter_gets_a_gradient(model_case):
    model_type, cls = model_case
    model = cls(tiny_config(model_type)).train()
    outputs = model(**make_inputs(model))
    loss = outputs.loss if getattr(outputs, "loss", None) is not None else main_output(outputs).square().mean()
    assert torch.isfinite(loss)
    loss.backward()
    for name, param in model.named_parameters():
        if not param.requires_grad:  # frozen by the recipe (a detector's backbone stem): it must stay so
            assert param.grad is None, f"{name} is frozen but got a gradient"
            continue
        assert param.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(param.grad).all(), f"{name} has a non-finite gradient"
    assert torch.isfinite(main_output(outputs)).all()


def test_save_load_round_trip_is_exact(model_case, tmp_path):
    model_type, cls = model_case
    model = cls(tiny_config(model_type)).eval()
    inputs = make_inputs(model, labels=False)
    model.save_pretrained(tmp_path)
    reloaded = cls.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(main_output(model(**inputs)), main_output(reloaded(**inputs)))
    assert reloaded.config.to_diff_dict() == model.config.to_diff_dict()


def test_auto_classes_round_trip(model_case, tmp_path):
    model_type, cls = model_case
    entry = MODEL_TYPES[model_type]
    model = cls(tiny_config(model_type)).eval()
    model.save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is entry.config
    auto = {"AutoModel": AutoModel, "AutoBackbone": AutoBackbone, **AUTO_CLASSES}[auto_class_name(cls)]
    loaded = auto_load(auto, tmp_path).eval()
    assert type(loaded) is cls
    inputs = make_inputs(model, labels=False)
    with torch.no_grad():
        assert torch.equal(main_output(model(**inputs)), main_output(loaded(**inputs)))
    assert type(AutoModel.from_config(model.config)) is entry.base_model


def test_eager_and_sdpa_agree(model_case):
    model_type, cls = model_case
    model = cls(tiny_config(model_type)).eval()
    inputs = make_inputs(model, labels=False)
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        sdpa = main_output(model(**inputs))
        model.set_attn_implementation("eager")
        eager = main_output(model(**inputs))
    assert_close_at_scale(sdpa, eager)


def test_gradient_checkpointing_gives_the_same_gradients(model_case):
    model_type, cls = model_case
    torch.manual_seed(0)
    plain = cls(tiny_config(model_type)).train()
    checkpointed = cls(tiny_config(model_type)).train()
    checkpointed.load_state_dict(plain.state_dict())
    enable = (
        getattr(checkpointed, "activation_checkpointing_enable", None) or checkpointed.gradient_checkpointing_enable
    )
    enable()
    assert any(getattr(m, "gradient_checkpointing", False) for m in checkpointed.modules())
    inputs = make_inputs(plain)
    for model in (plain, checkpointed):
        torch.manual_seed(0)  # the same stochastic-depth draws in both
        out = model(**inputs)
        (out.loss if getattr(out, "loss", None) is not None else main_output(out).sum()).backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), checkpointed.named_parameters()):
        if a.requires_grad:
            torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_output_hidden_states_attentions_and_tuples(model_case):
    model_type, cls = model_case
    config = tiny_config(model_type)
    model = cls(config).eval()
    inputs = make_inputs(model, labels=False)
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True, output_attentions=True)
        as_tuple = model(**inputs, return_dict=False)
    hidden_states, attentions = stack_outputs(out)
    assert len(hidden_states) == config.num_hidden_layers + 1
    assert len(attentions) == config.num_hidden_layers
    weights = attentions[0]
    heads = config.num_attention_heads  # a list, one per stage, for hierarchical models (Swin)
    heads = heads[0] if isinstance(heads, list) else heads
    # transformers' layouts: (B, heads, Lq, Lk); Swin's windows (B * windows, heads, N, N), its token-order maps in
    # token_attentions; deformable attention (B, Q, heads, levels, points), summing to 1 over levels and points
    if weights.dim() == 5:
        assert weights.shape[0] == 2 and weights.shape[2] == heads
        weights = weights.flatten(-2)
    else:
        assert weights.shape[0] % 2 == 0 and weights.shape[1] == heads
    if out.get("token_attentions") is not None:
        tokens = out.token_attentions[0]
        assert tokens.shape[:2] == (2, heads) and tokens.shape[-1] == tokens.shape[-2]
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    assert isinstance(as_tuple, tuple)
    # the tuple call ran sdpa, the other eager (for the weights): equal up to rounding
    first, expected = (
        value if isinstance(value, torch.Tensor) else torch.cat([t.flatten() for t in value])
        for value in (as_tuple[0], out.to_tuple()[0])
    )
    assert_close_at_scale(first, expected)


def test_hidden_states_and_attention_maps_are_on_the_autograd_graph(model_case):
    model_type, cls = model_case
    model = cls(tiny_config(model_type)).eval()
    check_layer_outputs_on_the_graph(model, make_inputs(model, labels=False), SPECS[model_type].constant_outputs)


def test_config_return_dict_false_gives_tuples(model_case):
    model_type, cls = model_case
    model = cls(tiny_config(model_type, return_dict=False)).eval()
    inputs = make_inputs(model)
    with torch.no_grad():
        out = model(**inputs)
        as_dict = model(**inputs, return_dict=True)
    assert isinstance(out, tuple)
    expected = as_dict.to_tuple()
    assert len(out) == len(expected)
    for a, b in zip(out, expected):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
        else:  # a key/value cache
            assert type(a) is type(b)


def test_no_split_modules_and_gradient_checkpointing_are_declared(model_case):
    model_type, cls = model_case
    model = cls(tiny_config(model_type))
    names = {type(m).__name__ for m in model.modules()}
    assert model._no_split_modules and set(model._no_split_modules) <= names
    assert model.supports_gradient_checkpointing


def test_every_task_model_states_which_attention_entries_it_serves():
    assert all(head.attention_requests is not None for _, _, head in HEADS)
    for name in available_attention_types():
        assert any(serves(head, name) for _, _, head in HEADS), f"no model serves {name!r}"


@pytest.mark.parametrize("attention_type", available_attention_types())
@pytest.mark.parametrize("head_case", HEADS, ids=lambda case: case[2].__name__)
def test_every_attention_entry_trains_saves_and_reloads_in_every_model(head_case, attention_type, tmp_path):
    """Every registry entry runs inside every task model that can serve it (trains: every parameter gets a
    gradient; saves; reloads through the Auto class to the same outputs), and the others refuse it by name."""
    model_type, auto_name, head = head_case
    caps = get_attention_class(attention_type).capabilities
    if not serves(head, attention_type):
        with pytest.raises(ValueError, match=f"attention_type={attention_type!r}"):
            head(entry_config(model_type, attention_type))
        return
    torch.manual_seed(0)
    model = head(entry_config(model_type, attention_type)).train()
    inputs = make_inputs(model, padded=caps.padding_mask)
    loss = run_loss(model, inputs, caps.stateful)
    assert torch.isfinite(loss)
    loss.backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    zero_by_design = [re.compile(pattern) for pattern in SPECS[model_type].structurally_zero_gradients]
    designed = [(n, p) for n, p in trainable if any(z.fullmatch(n) for z in zero_by_design)]
    assert all(p.grad is not None and not p.grad.abs().sum() > 0 for _, p in designed), "a zero-by-design gradient"
    missing = [n for n, p in trainable if (n, p) not in designed and (p.grad is None or not p.grad.abs().sum() > 0)]
    assert not missing, f"no (or an all-zero) gradient for {missing}"
    model.eval().save_pretrained(tmp_path)
    reloaded = auto_load(auto_name, tmp_path).eval()
    assert reloaded.config.attention_type == attention_type
    inputs = make_inputs(model, labels=False, padded=caps.padding_mask)
    with torch.no_grad():
        torch.manual_seed(1)
        expected = main_output(model(**inputs))
        torch.manual_seed(1)
        assert torch.equal(expected, main_output(reloaded(**inputs)))
