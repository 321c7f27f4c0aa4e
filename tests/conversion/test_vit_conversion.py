"""Numerical parity with transformers' ViT: convert-on-load, on-disk conversion, pure mapping."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import transformers
from safetensors.torch import load_file

import hf_xcv
from hf_xcv.checkpoint_conversion import convert_checkpoint
from hf_xcv.conversion.vit import convert_config, convert_state_dict

TOLERANCE = 1e-4  # float32, the bar; the implementations agree to rounding


def transformers_config(**overrides) -> transformers.ViTConfig:
    base = dict(
        hidden_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=96,
        image_size=32,
        patch_size=8,
        num_labels=5,
        hidden_act="gelu",
    )
    return transformers.ViTConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def hf_vit_dir(tmp_path_factory):
    """A transformers ViTForImageClassification checkpoint with random weights, as on the Hub."""
    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("transformers-vit")
    model = transformers.ViTForImageClassification(transformers_config())
    with torch.no_grad():  # non-trivial biases and norms, so a mix-up cannot hide
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    model.save_pretrained(path)
    transformers.ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(path)
    return path


def max_delta(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def test_convert_on_load_matches_transformers_logits(hf_vit_dir):
    theirs = transformers.ViTForImageClassification.from_pretrained(hf_vit_dir).eval()
    ours = hf_xcv.ViTForImageClassification.from_pretrained(hf_vit_dir).eval()
    assert ours.config.model_type == "xcv_vit"
    pixels = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert max_delta(theirs(pixels).logits, ours(pixels).logits) <= TOLERANCE
        # a second resolution, through interpolate_pos_encoding (bicubic resampling of the positions)
        large = torch.randn(2, 3, 48, 40)
        delta = max_delta(
            theirs(large, interpolate_pos_encoding=True).logits, ours(large, interpolate_pos_encoding=True).logits
        )
        assert delta <= TOLERANCE


def test_hidden_states_and_attentions_match_layer_by_layer(hf_vit_dir):
    theirs = transformers.ViTForImageClassification.from_pretrained(hf_vit_dir, attn_implementation="eager").eval()
    ours = hf_xcv.ViTForImageClassification.from_pretrained(hf_vit_dir).eval()
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        a = theirs(pixels, output_hidden_states=True, output_attentions=True)
        b = ours(pixels, output_hidden_states=True, output_attentions=True)
    assert len(a.hidden_states) == len(b.hidden_states) == 4
    assert len(a.attentions) == len(b.attentions) == 3
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert max_delta(x, y) <= TOLERANCE
    for x, y in zip(a.attentions, b.attentions):
        assert max_delta(x, y) <= TOLERANCE


def test_base_model_with_pooler_converts_to_the_pre_logits_layer(tmp_path):
    torch.manual_seed(2)
    theirs = transformers.ViTModel(transformers_config(pooler_act="tanh")).eval()
    theirs.save_pretrained(tmp_path)
    ours = hf_xcv.ViTModel.from_pretrained(tmp_path).eval()
    assert ours.config.representation_size == 48
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        a, b = theirs(pixels), ours(pixels)
    assert max_delta(a.last_hidden_state, b.last_hidden_state) <= TOLERANCE
    assert max_delta(a.pooler_output, b.pooler_output) <= TOLERANCE


def test_base_checkpoint_fine_tunes_into_a_classifier(tmp_path):
    """The usual start of fine-tuning: backbone weights loaded, a new head for new labels, and no
    pre-logits layer (transformers' classifier ignores the pooler; the paper drops it for fine-tuning)."""
    theirs = transformers.ViTModel(transformers_config())  # with a pooler
    theirs.save_pretrained(tmp_path)
    ours = hf_xcv.ViTForImageClassification.from_pretrained(tmp_path, num_labels=4)
    assert ours.classifier.out_features == 4
    assert ours.config.representation_size is None and ours.vit.pooler.dense is None
    torch.testing.assert_close(ours.vit.layernorm.weight, theirs.layernorm.weight)


def test_a_classifier_checkpoint_carrying_a_pooler_matches_transformers(tmp_path):
    """transformers' ViTForImageClassification ignores pooler weights; so does the conversion."""
    from safetensors.torch import save_file

    theirs = transformers.ViTForImageClassification(transformers_config()).eval()
    theirs.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors.update({"vit.pooler.dense.weight": torch.randn(48, 48), "vit.pooler.dense.bias": torch.randn(48)})
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    ours = hf_xcv.ViTForImageClassification.from_pretrained(tmp_path).eval()
    assert ours.config.representation_size is None
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert max_delta(theirs(pixels).logits, ours(pixels).logits) <= TOLERANCE


def test_on_disk_conversion_cli_with_verification(hf_vit_dir, tmp_path, repo_root):
    out = tmp_path / "converted"
    result = subprocess.run(
        [sys.executable, "-m", "conversion.vit", "--input", str(hf_vit_dir), "--output", str(out), "--verify"],
        cwd=repo_root,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "verified: max |delta| = " in result.stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "model.safetensors", "preprocessor_config.json", "xcv_vit.py"  # (its remote code)
    ]  # fmt: skip
    assert json.loads((out / "config.json").read_text())["model_type"] == "xcv_vit"
    # the converted folder is a native hf_xcv checkpoint: loads through the Auto classes, processor included
    model = transformers.AutoModelForImageClassification.from_pretrained(out)
    processor = transformers.AutoImageProcessor.from_pretrained(out)
    assert isinstance(model, hf_xcv.ViTForImageClassification)
    assert isinstance(processor, hf_xcv.XcvViTImageProcessor)
    # refuses to overwrite without being told to
    again = subprocess.run(
        [sys.executable, "-m", "conversion.vit", "--input", str(hf_vit_dir), "--output", str(out)],
        cwd=repo_root,
        capture_output=True,
        text=True,
    )
    assert again.returncode != 0 and "not empty" in again.stderr
    assert "Traceback" not in again.stderr  # a user error reads as one line


def test_pure_mapping_accounts_for_every_key_in_both_layouts(hf_vit_dir):
    on_disk = load_file(hf_vit_dir / "model.safetensors")
    in_memory = transformers.ViTForImageClassification.from_pretrained(hf_vit_dir).state_dict()
    converted_disk, dropped = convert_state_dict(on_disk)
    converted_memory, _ = convert_state_dict(in_memory)
    assert dropped == []
    assert converted_disk.keys() == converted_memory.keys()
    expected = hf_xcv.ViTForImageClassification(
        hf_xcv.ViTConfig(**convert_config(json.loads((hf_vit_dir / "config.json").read_text()), False))
    ).state_dict()
    assert converted_disk.keys() == expected.keys()
    for key, tensor in converted_disk.items():
        assert tensor.shape == expected[key].shape, key
        assert torch.equal(tensor, converted_memory[key]), key


def test_unknown_keys_are_an_error_not_silently_dropped():
    with pytest.raises(ValueError, match="no conversion rule.*vit.encoder.layer.0.mystery.weight"):
        convert_state_dict({"vit.encoder.layer.0.mystery.weight": torch.zeros(1)})
    _, dropped = convert_state_dict({"vit.embeddings.mask_token": torch.zeros(1, 1, 4)})
    assert dropped == ["vit.embeddings.mask_token"]


def test_config_mapping_keeps_transformers_defaults_for_missing_fields():
    config = convert_config({"model_type": "vit", "hidden_size": 64, "num_attention_heads": 4}, with_pooler=False)
    assert config["layer_norm_eps"] == 1e-12  # transformers' default, not hf_xcv's 1e-6
    assert config["model_type"] == "xcv_vit"
    with pytest.raises(ValueError, match="model_type 'vit'"):
        convert_config({"model_type": "bert"}, with_pooler=False)


def test_conversion_writes_nothing_when_it_fails(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "vit"}))
    from safetensors.torch import save_file

    save_file({"vit.unknown.weight": torch.zeros(1)}, str(broken / "model.safetensors"))
    with pytest.raises(ValueError, match="no conversion rule"):
        convert_checkpoint(broken, tmp_path / "out", "xcv_vit")
    assert not (tmp_path / "out").exists()
