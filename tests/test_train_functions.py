"""The training script's building blocks, called directly (no training)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from datasets import Dataset, DatasetDict
from PIL import Image

import hf_xcv


@pytest.fixture(scope="module")
def script(repo_root):
    spec = importlib.util.spec_from_file_location(
        "train_image_classification", repo_root / "training" / "train_image_classification.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_overrides_parse_pairs_and_json(script):
    assert script.parse_overrides("hidden_dropout_prob=0.1,pooling=mean,qkv_bias=false") == {
        "hidden_dropout_prob": 0.1,
        "pooling": "mean",
        "qkv_bias": False,
    }
    assert script.parse_overrides('{"image_size": [32, 32], "attention_kwargs": {}}') == {
        "image_size": [32, 32],
        "attention_kwargs": {},
    }
    assert script.parse_overrides(None) == {}
    with pytest.raises(ValueError, match="key=value"):
        script.parse_overrides("dropout")


def test_a_saved_dataset_with_plain_integer_labels_gets_correct_names(script, tmp_path):
    image = Image.new("L", (8, 8))
    labels = {"train": [1, 10, 2, 10], "validation": [2, 1], "test": [10, 2]}
    DatasetDict(
        {k: Dataset.from_dict({"image": [image] * len(v), "label": v}) for k, v in labels.items()}
    ).save_to_disk(tmp_path / "data")
    data = script.load_data(script.DataArguments(dataset=str(tmp_path / "data")), seed=0)
    names = data["train"].features["label"].names
    assert names == ["1", "2", "10"]
    assert [names[i] for i in data["test"]["label"]] == ["10", "2"]  # the same mapping in every split
    model, _ = script.build_model_and_processor(script.ModelArguments(preset="vit-test-tiny"), names)
    assert model.config.id2label == {0: "1", 1: "2", 2: "10"}


def test_fine_tuning_takes_overrides_and_refuses_a_preset_too(script, tmp_path):
    hf_xcv.ViTForImageClassification(hf_xcv.preset_config("vit-test-tiny", num_labels=3)).save_pretrained(tmp_path)
    hf_xcv.ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(tmp_path)
    args = script.ModelArguments(model_name_or_path=str(tmp_path), config_overrides="drop_path_rate=0.1")
    model, processor = script.build_model_and_processor(args, ["a", "b", "c", "d", "e"])
    assert model.config.drop_path_rate == 0.1
    assert model.classifier.out_features == 5 and model.config.id2label[4] == "e"
    with pytest.raises(ValueError, match="either --preset or --model_name_or_path"):
        script.build_model_and_processor(
            script.ModelArguments(preset="vit-digits", model_name_or_path=str(tmp_path)), ["a", "b"]
        )
    with pytest.raises(ValueError, match=r"has no field \['drop_pth_rate'\]"):
        script.build_model_and_processor(script.ModelArguments(config_overrides="drop_pth_rate=0.1"), ["a", "b"])
