"""Model cards: YAML metadata with a model-index that round-trips through huggingface_hub."""

from __future__ import annotations

import pytest
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results

import hf_xcv
from hf_xcv.training import TEMPLATES, MeasuredResult, build_model_card, write_model_card


@pytest.fixture
def model():
    return hf_xcv.ViTForImageClassification(hf_xcv.preset_config("vit-test-tiny", num_labels=10))


def test_card_metadata_and_model_index(model, repo_root, tmp_path):
    card = build_model_card(
        TEMPLATES / "image_classification.md",
        model,
        repo_id="someone/vit-digits",
        dataset_id="sklearn-digits",
        dataset_name="digits",
        results=[MeasuredResult("accuracy", 0.9721, "test"), MeasuredResult("top5_accuracy", 1.0, "test")],
        hyperparameters={"learning_rate": 0.001},
        command="python training/train_image_classification.py --output_dir x",
    )
    path = write_model_card(card, tmp_path)
    reloaded = ModelCard.load(path)
    data = reloaded.data
    assert data.library_name == "transformers"
    assert data.pipeline_tag == "image-classification"
    assert set(data.tags) >= {"hf_xcv", "xcv_vit", "vision"}
    assert data.datasets == ["sklearn-digits"]
    name, results = model_index_to_eval_results(data.to_dict()["model-index"])
    assert name == "vit-digits"
    assert [(r.metric_type, r.metric_value, r.dataset_split) for r in results] == [
        ("accuracy", 0.9721, "test"),
        ("top5_accuracy", 1.0, "test"),
    ]
    text = path.read_text()
    assert "| test | accuracy | 0.9721 |" in text
    assert f"{model.num_parameters():,}" in text
    assert "python training/train_image_classification.py --output_dir x" in text


@pytest.mark.parametrize(
    "results", [[], [MeasuredResult("accuracy", None, "test")], [MeasuredResult("accuracy", float("nan"), "test")]]
)
def test_a_card_without_a_measured_value_is_refused(model, repo_root, results):
    with pytest.raises(ValueError):
        build_model_card(
            TEMPLATES / "image_classification.md", model, repo_id="a/b", dataset_id="d",
            dataset_name="d", results=results, hyperparameters={}, command="c",
        )  # fmt: skip
