"""Bad pixels and bad checkpoints give errors that name the problem, never a half-initialised model."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import hf_xcv
from hf_xcv.conversion import CorruptCheckpointError


@pytest.fixture
def model():
    return hf_xcv.ViTForImageClassification(hf_xcv.preset_config("vit-test-tiny", num_labels=3)).eval()


@pytest.fixture
def saved(model, tmp_path):
    path = tmp_path / "model"
    model.save_pretrained(path)
    return path


@pytest.mark.parametrize(
    ("pixels", "message"),
    [
        (torch.randn(2, 1, 16, 16), "1 channels but the model expects num_channels=3"),
        (torch.randn(2, 3, 20, 20), "image size 20x20 differs from the model's image_size 16x16"),
        (torch.randn(2, 3, 18, 16), "not a positive multiple of the patch size 4x4"),
        (torch.randn(3, 16, 16), r"shape \(batch, channels, height, width\), got \(3, 16, 16\)"),
        (torch.randn(2, 3, 2, 2), "not a positive multiple of the patch size"),
    ],
)
def test_pixels_the_model_cannot_take(model, pixels, message):
    with pytest.raises(ValueError, match=message):
        model(pixels)


def test_other_resolutions_need_interpolate_pos_encoding(model):
    with torch.no_grad():
        assert model(torch.randn(1, 3, 24, 32), interpolate_pos_encoding=True).logits.shape == (1, 3)
        with pytest.raises(ValueError, match="interpolate_pos_encoding=True"):
            model(torch.randn(1, 3, 24, 32))


def test_missing_pixels(model):
    with pytest.raises(ValueError, match="pixel_values is required"):
        model()


def test_truncated_weights_file(saved):
    weights = saved / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptCheckpointError, match=r"model.safetensors is corrupt or truncated"):
        hf_xcv.ViTForImageClassification.from_pretrained(saved)


def test_garbage_weights_file(saved):
    (saved / "model.safetensors").write_bytes(b"\x00garbage" * 100)
    with pytest.raises(CorruptCheckpointError, match="corrupt or truncated"):
        hf_xcv.ViTForImageClassification.from_pretrained(saved)


def test_truncated_pytorch_bin_file(model, tmp_path):
    model.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    data = (tmp_path / "pytorch_model.bin").read_bytes()
    (tmp_path / "pytorch_model.bin").write_bytes(data[: len(data) // 3])
    with pytest.raises(CorruptCheckpointError, match=r"pytorch_model.bin is corrupt or truncated"):
        hf_xcv.ViTForImageClassification.from_pretrained(tmp_path)


def test_corrupt_config(saved):
    (saved / "config.json").write_text("{not json")
    with pytest.raises(CorruptCheckpointError, match=r"config.json is not valid JSON"):
        hf_xcv.ViTForImageClassification.from_pretrained(saved)


def test_checkpoint_of_another_model_type(tmp_path):
    bert = transformers.BertModel(
        transformers.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    )
    bert.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"model_type 'bert'.*loads 'xcv_vit'.*converts \['vit'\]"):
        hf_xcv.ViTForImageClassification.from_pretrained(tmp_path)


def test_missing_backbone_weights(saved):
    weights = load_file(saved / "model.safetensors")
    kept = {k: v for k, v in weights.items() if "layers.1." not in k}
    save_file(kept, str(saved / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing \d+ weights.*layers\.1\."):
        hf_xcv.ViTForImageClassification.from_pretrained(saved)


def test_leftover_backbone_weights(saved):
    config = json.loads((saved / "config.json").read_text())
    config["num_hidden_layers"] = 1  # the checkpoint has two layers
    (saved / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"weights the model does not have.*layers\.1\."):
        hf_xcv.ViTForImageClassification.from_pretrained(saved)


def test_shapes_that_do_not_match_the_config(saved):
    config = json.loads((saved / "config.json").read_text())
    config["intermediate_size"] = 128
    (saved / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="shapes do not match its config"):
        hf_xcv.ViTForImageClassification.from_pretrained(saved)


def test_ignore_mismatched_sizes_reinitialises_heads_but_never_the_backbone(saved):
    resized = hf_xcv.ViTForImageClassification.from_pretrained(saved, num_labels=7, ignore_mismatched_sizes=True)
    assert resized.classifier.out_features == 7
    config = json.loads((saved / "config.json").read_text())
    config["intermediate_size"] = 128
    (saved / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"backbone weights whose shapes do not match.*mlp\.fc1"):
        hf_xcv.ViTForImageClassification.from_pretrained(saved, ignore_mismatched_sizes=True)


def test_a_new_head_is_allowed_and_reported(saved, tmp_path, caplog):
    """Loading a backbone into a classifier (fine-tuning) is legitimate; the new head is logged."""
    base = tmp_path / "base"
    hf_xcv.ViTModel.from_pretrained(saved).save_pretrained(base)
    with caplog.at_level("WARNING", logger="hf_xcv.modeling_utils"):
        classifier = hf_xcv.ViTForImageClassification.from_pretrained(base, num_labels=4)
    assert classifier.classifier.out_features == 4
    assert "classifier" in caplog.text


def test_corrupt_transformers_checkpoint_is_reported_during_conversion(tmp_path):
    transformers.ViTForImageClassification(
        transformers.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                               image_size=16, patch_size=8)
    ).save_pretrained(tmp_path)  # fmt: skip
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CorruptCheckpointError, match="model.safetensors is corrupt or truncated"):
        hf_xcv.ViTForImageClassification.from_pretrained(tmp_path)


def test_missing_folder_gives_transformers_usual_error(tmp_path):
    with pytest.raises(OSError):
        hf_xcv.ViTForImageClassification.from_pretrained(tmp_path / "nowhere")
