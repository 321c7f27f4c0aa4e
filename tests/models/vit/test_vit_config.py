"""ViTConfig validates itself: every bad value is a ValueError naming the field."""

from __future__ import annotations

import pytest
from model_testing import SPECS

import hf_xcv
from hf_xcv import PRESETS, ViTConfig, preset_config


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"hidden_size": 100, "num_attention_heads": 12}, "hidden_size"),
        ({"image_size": 30, "patch_size": 16}, "image_size"),
        ({"image_size": (32, 30), "patch_size": 8}, "image_size"),
        ({"pooling": "max"}, "pooling"),
        ({"attention_type": "sparse-magic"}, "attention_type"),
        ({"attention_kwargs": {"window": 3}}, "attention_kwargs"),
        ({"attention_kwargs": "window=3"}, "attention_kwargs"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"hidden_size": 12.0}, "hidden_size"),
        ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
        ({"drop_path_rate": -0.1}, "drop_path_rate"),
        ({"hidden_act": "swishy"}, "hidden_act"),
        ({"layer_norm_eps": 0}, "layer_norm_eps"),
        ({"num_channels": 0}, "num_channels"),
        ({"patch_size": (4, 4, 4)}, "patch_size"),
        ({"pooling": "cls", "use_cls_token": False}, "use_cls_token"),
        ({"representation_size": -3}, "representation_size"),
        ({"qkv_bias": "yes"}, "qkv_bias"),
        ({"layer_norm_eps": float("inf")}, "layer_norm_eps"),
    ],
)
def test_invalid_values_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        ViTConfig(**overrides)


def test_allowed_values_are_listed():
    with pytest.raises(ValueError, match=r"allowed values: \['cls', 'mean'\]"):
        ViTConfig(pooling="max")
    with pytest.raises(ValueError, match=r"allowed values: \['axial', 'bigbird'.*'full'"):
        ViTConfig(attention_type="nope")


def test_defaults_are_vit_base_16_and_round_trip(tmp_path):
    config = ViTConfig()
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (768, 12, 12)
    assert config.model_type == "xcv_vit"
    assert config.grid_size == (14, 14)
    config.save_pretrained(tmp_path)
    assert ViTConfig.from_pretrained(tmp_path).to_diff_dict() == config.to_diff_dict()


def test_a_field_broken_after_construction_is_caught_before_saving(tmp_path):
    config = ViTConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128)
    config.num_attention_heads = 5
    with pytest.raises(ValueError, match="hidden_size=64 is not divisible by num_attention_heads=5"):
        config.save_pretrained(tmp_path)


def test_rectangular_images_and_patches():
    config = ViTConfig(image_size=(32, 48), patch_size=(8, 16))
    assert config.grid_size == (4, 3)


def test_presets_build_and_reject_unknown_names():
    for name, preset in PRESETS.items():
        config = preset_config(name)
        assert config.model_type == preset.model_type
    base = preset_config("vit-base-patch16-224", num_labels=7)
    assert base.num_labels == 7 and base.hidden_size == 768
    with pytest.raises(ValueError, match="unknown preset 'vit-gigantic'"):
        preset_config("vit-gigantic")
    with pytest.raises(ValueError, match=r"ViTConfig has no field \['drop_path'\]"):
        preset_config("vit-test-tiny", drop_path=0.1)  # a typo of drop_path_rate is not silently kept


def test_vit_base_preset_has_the_paper_parameter_count():
    """Table 1 of Dosovitskiy et al.: ViT-B/16 has 86M parameters (1000 classes)."""
    import torch

    with torch.device("meta"):
        model = hf_xcv.ViTForImageClassification(preset_config("vit-base-patch16-224", num_labels=1000))
    assert round(model.num_parameters() / 1e6) == 87  # 86.6M: 86M in the paper's rounding


@pytest.mark.parametrize(
    ("model_type", "attention_type", "attention_kwargs", "message"),
    [
        ("xcv_vit", "linformer", {"k": "64"}, "k must be a positive integer, got '64'"),
        ("xcv_xformer", "local", {"block_size": 4.5}, "block_size must be an integer"),
        ("xcv_transformer", "routing", {"ema_decay": 1.5}, "ema_decay must be a number in"),
    ],
)
def test_a_wrongly_typed_attention_setting_is_refused_when_the_config_is_made(
    model_type, attention_type, attention_kwargs, message
):
    preset = SPECS[model_type].test_preset
    with pytest.raises(ValueError, match=message):
        hf_xcv.preset_config(preset, attention_type=attention_type, attention_kwargs=attention_kwargs)
