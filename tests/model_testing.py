"""The registry-driven tester's helpers: every registered model type's tiny config and dummy inputs, and what the
shared checks compare."""

from __future__ import annotations

import importlib
import pkgutil
import re

import model_specs
import torch
from model_specs import ModelTestSpec
from transformers import AutoBackbone, AutoConfig

from hf_xcv import MODEL_TYPES, preset_config
from hf_xcv.attention import capability_problems, get_attention_class
from hf_xcv.auto import AUTO_CLASSES

MODEL_CASES = [(model_type, cls) for model_type, entry in MODEL_TYPES.items() for cls in entry.model_classes]


def case_id(case) -> str:
    return f"{case[0]}-{case[1].__name__}"


def _specs() -> dict[str, ModelTestSpec]:
    """Every family's test declarations (the modules of tests/model_specs), by model type."""
    specs: dict[str, ModelTestSpec] = {}
    for module in pkgutil.iter_modules(model_specs.__path__):
        for spec in importlib.import_module(f"model_specs.{module.name}").SPECS:
            if spec.model_type in specs:
                raise ValueError(f"model_specs.{module.name} declares {spec.model_type} again")
            specs[spec.model_type] = spec
    return specs


SPECS = _specs()


def tiny_config(model_type: str, **overrides):
    return preset_config(SPECS[model_type].test_preset, num_labels=3, **overrides)


def make_inputs(model, batch: int = 2, labels: bool = True, padded: bool = True) -> dict:
    """The model type's own dummy inputs, from its test declarations."""
    return SPECS[model.config.model_type].dummy_inputs(model, batch=batch, labels=labels, padded=padded)


def stack_outputs(outputs) -> tuple[tuple, tuple]:
    """(hidden_states, attentions) of an encoder-only output, or of the encoder of a seq2seq output."""
    if hasattr(outputs, "encoder_hidden_states"):
        return outputs.encoder_hidden_states, outputs.encoder_attentions
    return outputs.hidden_states, outputs.attentions


# The output fields that hold one tensor per layer or stage: hidden states and attention maps.
MAP_FIELDS = (
    "hidden_states",
    "reshaped_hidden_states",
    "attentions",
    "encoder_hidden_states",
    "encoder_attentions",
    "decoder_hidden_states",
    "decoder_attentions",
    "cross_attentions",
)


def layer_outputs(outputs) -> dict[str, torch.Tensor]:
    """Every hidden state and attention map of an output, by ``field.index`` (``attentions.0``, ...)."""
    found = {}
    for field in MAP_FIELDS:
        for index, tensor in enumerate(outputs.get(field) or ()):
            if isinstance(tensor, torch.Tensor):
                found[f"{field}.{index}"] = tensor
    return found


def check_layer_outputs_on_the_graph(model, inputs: dict, constant: tuple[str, ...] = ()) -> None:
    """With ``output_attentions`` and ``output_hidden_states``, every hidden state and attention map the model returns
    is on the autograd graph of its outputs, as transformers' ``test_retain_grad_hidden_states_attentions`` checks:
    a gradient retained on it is not None after a backward from the main output (attribution methods read them).
    ``constant``: regexes over ``field.index`` of outputs that are constants by design (an all-zero start, a one-hot
    selection), which must then not require a gradient at all."""
    outputs = model(**inputs, output_attentions=True, output_hidden_states=True)
    tensors = layer_outputs(outputs)
    assert any(name.split(".")[0].endswith("attentions") for name in tensors), "no attention maps returned"
    fixed = {name for name in tensors if any(re.fullmatch(pattern, name) for pattern in constant)}
    for name, tensor in tensors.items():
        if name in fixed:
            assert not tensor.requires_grad, f"{name} is declared constant but requires a gradient"
        else:
            assert tensor.requires_grad, f"{name} is off the autograd graph (detached or computed without grad)"
            tensor.retain_grad()
    main_output(outputs).square().mean().backward()
    off_graph = [name for name in tensors if name not in fixed and tensors[name].grad is None]
    assert not off_graph, f"no gradient reaches {off_graph}: copies beside the computation, not on its graph"


def main_output(outputs) -> torch.Tensor:
    """The first tensor of an output after the loss: logits, last_hidden_state, a reconstruction, ...; for a
    backbone's feature maps (a tuple of tensors), all of them flattened into one. ``logits`` or ``last_hidden_state``
    where the output has them (transformers' Deformable DETR puts ``init_reference_points`` first)."""
    preferred = [outputs[key] for key in ("logits", "last_hidden_state") if outputs.get(key) is not None]
    if preferred:
        return preferred[0]
    value = next(v for key, v in outputs.items() if key != "loss" and isinstance(v, (torch.Tensor, tuple)))
    return value if isinstance(value, torch.Tensor) else torch.cat([v.flatten() for v in value])


def assert_close_at_scale(
    actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5
) -> None:
    """Equal up to float32 rounding relative to the outputs' scale (IPT's values are 0-255, the others' about 1);
    tuples of tensors (a backbone's feature maps) as a whole."""
    tensors = expected if isinstance(expected, (tuple, list)) else [expected]
    scale = max([1.0] + [t.abs().max().item() for t in tensors])
    torch.testing.assert_close(actual, expected, atol=atol * scale, rtol=rtol)


def auto_load(auto, path):
    """``auto.from_pretrained(path)`` (``auto``: an Auto class or its name). transformers 5.24's AutoBackbone asks the
    Hub whether a local folder is a repo (and fails, for its own backbones too): a backbone is then resolved
    through the mapping, as ``AutoBackbone.from_config`` does, and loaded by its class."""
    auto = AUTO_CLASSES[auto] if isinstance(auto, str) else auto
    if auto is AutoBackbone:
        config = AutoConfig.from_pretrained(path)
        return type(AutoBackbone.from_config(config)).from_pretrained(path)
    return auto.from_pretrained(path)


HEADS = [(model_type, auto_name, head) for model_type, e in MODEL_TYPES.items() for auto_name, head in e.heads.items()]


def serves(head: type, attention_type: str) -> bool:
    """Whether a task model serves an entry: its declared attention requests against the entry's capabilities."""
    return not capability_problems(attention_type, **head.attention_requests)


def entry_kwargs(model_type: str, attention_type: str) -> dict:
    """An entry's small settings, less those the model sets itself (Swin's windows)."""
    own = getattr(MODEL_TYPES[model_type].config, "model_set_attention_kwargs", {}).get(attention_type, ())
    return {k: v for k, v in get_attention_class(attention_type).small_kwargs.items() if k not in own}


def entry_config(model_type: str, attention_type: str):
    """The tiny config with an entry's small settings."""
    overrides = {"attention_type": attention_type, "attention_kwargs": entry_kwargs(model_type, attention_type)}
    return tiny_config(model_type, **overrides, **SPECS[model_type].attention_test_overrides)


def run_loss(model, inputs, stateful: bool):
    """The training loss; stateful cores run two segments, the second with the first one's memory."""
    if not stateful:
        return model(**inputs).loss
    first = model(**inputs)
    second = model(**inputs, mems=first.mems)
    return first.loss + second.loss


def assert_same_tuple(theirs: tuple, ours: tuple, values: bool = True, atol: float = 1e-4, path: str = "") -> None:
    """``return_dict=False`` outputs read alike: the same length, and at every position (recursively through tuples,
    lists and dicts) a tensor of the same shape, with the same values when ``values``."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, torch.Tensor), f"{path}: a tensor in transformers', {type(ours).__name__} in ours"
        assert theirs.shape == ours.shape, f"{path}: shape {tuple(theirs.shape)} in transformers', {tuple(ours.shape)}"
        if values:
            torch.testing.assert_close(ours, theirs, atol=atol, rtol=1e-4, msg=lambda m: f"{path}: {m}")
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and sorted(theirs) == sorted(ours), f"{path}: keys {sorted(theirs)}"
        for key in theirs:
            assert_same_tuple(theirs[key], ours[key], values, atol, f"{path}.{key}")
    else:
        assert isinstance(ours, (tuple, list)), f"{path}: a sequence in transformers', {type(ours).__name__} in ours"
        assert len(theirs) == len(ours), f"{path or 'tuple'}: {len(theirs)} entries in transformers', {len(ours)}"
        for index, (a, b) in enumerate(zip(theirs, ours)):
            assert_same_tuple(a, b, values, atol, f"{path}[{index}]")
