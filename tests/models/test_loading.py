"""from_pretrained: switching the attention of a checkpoint, strictness where it protects, errors and reports that
name the user's path, transformers' exception types, and loading from a state dict."""

from __future__ import annotations

import logging

import pytest
import safetensors.torch
import torch
import transformers
from model_testing import HEADS, entry_kwargs, main_output, make_inputs, serves, tiny_config

import hf_xcv
from hf_xcv.attention import AttentionCore, available_attention_types, get_attention_class
from hf_xcv.auto import AUTO_CLASSES
from hf_xcv.checkpoint_conversion import convert_checkpoint
from hf_xcv.conversion import CheckpointMismatchError

SWITCHES = [
    (case, name) for case in HEADS for name in available_attention_types() if name != "full" and serves(case[2], name)
]


class Records(logging.Handler):
    """Collects what a logger emits (transformers' loggers do not propagate to pytest's capture)."""

    def __init__(self, *names: str):
        super().__init__()
        self.messages: list[str] = []
        self.loggers = [logging.getLogger(name) for name in names]

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self):
        for target in self.loggers:
            target.addHandler(self)
        return self

    def __exit__(self, *exc):
        for target in self.loggers:
            target.removeHandler(self)


@pytest.fixture(scope="module")
def full_checkpoints(tmp_path_factory):
    """One checkpoint with full attention per task model."""
    folders = {}
    for model_type, _, head in HEADS:
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(head.__name__)
        head(tiny_config(model_type, attention_type="full", attention_kwargs={})).save_pretrained(folder)
        folders[head] = folder
    return folders


@pytest.mark.parametrize("case, attention_type", SWITCHES, ids=[f"{c[2].__name__}-{n}" for c, n in SWITCHES])
def test_a_checkpoint_loads_with_another_attention_and_reports_what_it_adds(case, attention_type, full_checkpoints):
    model_type, auto_name, head = case
    kwargs = entry_kwargs(model_type, attention_type)
    with Records("hf_xcv.modeling_utils") as records:
        model = (
            AUTO_CLASSES[auto_name]
            .from_pretrained(full_checkpoints[head], attention_type=attention_type, attention_kwargs=kwargs)
            .eval()
        )
    assert model.config.attention_type == attention_type
    core = next(m for m in model.modules() if isinstance(m, AttentionCore))
    own = dict(core._own_tensors())
    if own:  # the new core's tensors are reported and start as a freshly built core's
        report = next(message for message in records.messages if "newly initialised tensors" in message)
        parameters = {name for name, _ in core.named_parameters()}
        for name in own:  # each under its kind: a buffer (random features) is not something to train
            kind = "parameters" if name in parameters else "buffers"
            shown = report.split(f"{kind} ", 1)[1].split(";")[0]
            assert name in shown or "more" in shown, (name, report)
        fresh = dict(type(core)(core.num_heads, core.head_dim, **core.attention_kwargs)._own_tensors())
        for name, tensor in own.items():
            assert torch.isfinite(tensor.float()).all(), name
            if tensor.is_floating_point() and tensor.numel() > 1:  # same distribution as a fresh draw
                torch.testing.assert_close(tensor.float().std(), fresh[name].float().std(), rtol=0.5, atol=1e-6)
    inputs = make_inputs(model, labels=False, padded=get_attention_class(attention_type).capabilities.padding_mask)
    with torch.no_grad():
        assert torch.isfinite(main_output(model(**inputs))).all()


def test_a_switched_checkpoint_loads_back_into_full_attention_and_reports_the_unused_weights(tmp_path):
    config = tiny_config("xcv_vit", attention_type="performer", attention_kwargs={"nb_features": 16})
    hf_xcv.ViTForImageClassification(config).save_pretrained(tmp_path)
    with Records("hf_xcv.modeling_utils") as records:
        model = hf_xcv.ViTForImageClassification.from_pretrained(tmp_path, attention_type="full", attention_kwargs={})
    assert model.config.attention_type == "full"
    assert any("does not use" in message and "core.projection" in message for message in records.messages)


def test_strictness_stays_for_weights_of_the_checkpoints_own_architecture(tmp_path):
    hf_xcv.ViTForImageClassification(tiny_config("xcv_vit")).save_pretrained(tmp_path)
    weights = safetensors.torch.load_file(tmp_path / "model.safetensors")
    # a weight the checkpoint's own architecture has, missing: refused even when switching the attention
    broken = {k: v for k, v in weights.items() if k != "vit.encoder.layers.0.mlp.fc1.weight"}
    safetensors.torch.save_file(broken, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"is missing 1 weights of the model: vit\.encoder\.layers\.0\.mlp\.fc1"):
        hf_xcv.ViTForImageClassification.from_pretrained(tmp_path, attention_type="linformer")
    # a weight no configuration of the checkpoint has: refused
    extra = {**weights, "vit.encoder.layers.0.attention.core.stray": torch.zeros(3)}
    safetensors.torch.save_file(extra, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"has 1 weights the model does not have.*core\.stray"):
        hf_xcv.ViTForImageClassification.from_pretrained(tmp_path)


@pytest.fixture
def transformers_vit(tmp_path):
    config = transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, num_labels=3,
    )  # fmt: skip
    transformers.ViTForImageClassification(config).save_pretrained(tmp_path)
    return tmp_path


def test_errors_and_reports_of_a_converted_checkpoint_name_the_users_path(transformers_vit):
    weights = safetensors.torch.load_file(transformers_vit / "model.safetensors")
    del weights["vit.encoder.layer.0.output.dense.weight"]
    safetensors.torch.save_file(weights, transformers_vit / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"lacks 1 weights .*\(hf_xcv's names\).*layers\.0\.mlp\.fc2") as err:
        hf_xcv.ViTForImageClassification.from_pretrained(transformers_vit)  # refused before anything is loaded
    assert str(transformers_vit) in str(err.value) and "hf_xcv-convert" not in str(err.value)
    complete = transformers_vit.parent / "complete"
    transformers.ViTForImageClassification(transformers.ViTConfig.from_pretrained(transformers_vit)).save_pretrained(
        complete
    )
    with Records("transformers.modeling_utils") as records:  # a new core: transformers reports its new weights
        hf_xcv.ViTForImageClassification.from_pretrained(complete, attention_type="performer")
    report = [message for message in records.messages if "LOAD REPORT" in message]
    assert report and all(str(complete) in m and "hf_xcv-convert" not in m for m in report)


def test_shape_mismatches_are_catchable_as_transformers_runtime_error(transformers_vit):
    with pytest.raises(RuntimeError, match="shapes do not match") as err:
        hf_xcv.ViTForImageClassification.from_pretrained(transformers_vit, intermediate_size=48)
    assert isinstance(err.value, (CheckpointMismatchError, ValueError))
    assert str(transformers_vit) in str(err.value) and "hf_xcv-convert" not in str(err.value)


def test_a_head_of_another_size_is_named_with_its_shapes(transformers_vit):
    with pytest.raises(RuntimeError, match=r"task-head weights .*num_labels") as err:
        hf_xcv.ViTForImageClassification.from_pretrained(transformers_vit, num_labels=5)
    assert isinstance(err.value, CheckpointMismatchError) and str(transformers_vit) in str(err.value)
    assert "classifier.weight (checkpoint [3, 32], model [5, 32])" in str(err.value)
    assert "ignore_mismatched_sizes=True" in str(err.value)
    model = hf_xcv.ViTForImageClassification.from_pretrained(
        transformers_vit, num_labels=5, ignore_mismatched_sizes=True
    )
    assert model.classifier.out_features == 5


def test_a_key_without_a_conversion_rule_is_named_with_the_users_path(transformers_vit):
    weights = safetensors.torch.load_file(transformers_vit / "model.safetensors")
    weights["vit.encoder.layer.0.attention.bogus"] = torch.zeros(1)
    safetensors.torch.save_file(weights, transformers_vit / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="no conversion rule") as err:
        hf_xcv.ViTForImageClassification.from_pretrained(transformers_vit)
    assert str(transformers_vit) in str(err.value) and "attention.bogus" in str(err.value)


def test_from_pretrained_none_with_a_config_and_a_state_dict_works_as_in_transformers():
    torch.manual_seed(0)
    model = hf_xcv.ViTForImageClassification(tiny_config("xcv_vit")).eval()
    loaded = hf_xcv.ViTForImageClassification.from_pretrained(None, config=model.config, state_dict=model.state_dict())
    pixels = make_inputs(model, labels=False)["pixel_values"]
    with torch.no_grad():
        assert torch.equal(loaded.eval()(pixels).logits, model(pixels).logits)
    partial = {k: v for k, v in model.state_dict().items() if "layers.1.mlp" not in k}
    with pytest.raises(ValueError, match="is missing 4 weights"):
        hf_xcv.ViTForImageClassification.from_pretrained(None, config=model.config, state_dict=partial)


def test_converting_an_incomplete_checkpoint_writes_nothing(transformers_vit, tmp_path):
    """Without --verify too: the converted weights are checked against the model their config describes."""
    weights = safetensors.torch.load_file(transformers_vit / "model.safetensors")
    del weights["vit.encoder.layer.1.attention.attention.query.weight"]
    safetensors.torch.save_file(weights, transformers_vit / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(
        ValueError, match=r"lacks 1 weights of a ViTForImageClassification .*layers\.1\.attention\.q_proj"
    ):
        convert_checkpoint(transformers_vit, tmp_path / "out", "xcv_vit")
    assert not (tmp_path / "out").exists()


PREFIX_CASES = [
    (model_type, entry.base_model, other)
    for model_type, entry in hf_xcv.MODEL_TYPES.items()
    for other in entry.model_classes
    if other is not entry.base_model
]


@pytest.mark.parametrize("model_type, base, other", PREFIX_CASES, ids=[c[2].__name__ for c in PREFIX_CASES])
def test_the_base_model_prefix_loads_both_ways(model_type, base, other, tmp_path):
    """A task model's (or backbone's) checkpoint loads into the bare model and the bare model's into it, the base
    model's prefix removed or added as transformers does: every weight both have is the checkpoint's."""
    prefix = f"{base.base_model_prefix}."
    torch.manual_seed(0)
    source = other(tiny_config(model_type))
    source.save_pretrained(tmp_path / "other")
    bare = base.from_pretrained(tmp_path / "other")
    theirs = source.state_dict()
    for name, tensor in bare.state_dict().items():
        key = name if name in theirs else prefix + name
        if key in theirs:
            assert torch.equal(tensor, theirs[key]), name
    assert any(prefix + name in theirs or name in theirs for name in bare.state_dict())
    bare.save_pretrained(tmp_path / "bare")
    again = other.from_pretrained(tmp_path / "bare")
    ours = bare.state_dict()
    for name, tensor in again.state_dict().items():
        key = name if name in ours else name.removeprefix(prefix)
        if key in ours:
            assert torch.equal(tensor, ours[key]), name
