"""Model cards: YAML metadata with a model-index that round-trips through huggingface_hub."""

from __future__ import annotations

import pytest
import yaml
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results

import hf_xcv
from hf_xcv.model_card import USE_WITHOUT_BEGIN, USE_WITHOUT_END, dataset_label, quoted, use_without_section
from hf_xcv.registry import exported_types
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
    assert data.library_name == "hf_xcv"
    assert data.pipeline_tag == "image-classification"
    assert set(data.tags) >= {"hf_xcv", "xcv_vit", "vision"}
    assert data.datasets is None  # not a Hub dataset: only Hub ids are listed
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


def test_a_card_lists_its_base_model_and_only_hub_datasets(model, tmp_path):
    card = build_model_card(
        TEMPLATES / "image_classification.md", model, repo_id="a/b", dataset_id="someone/flowers",
        dataset_name="flowers", results=[MeasuredResult("accuracy", 0.5, "test")], hyperparameters={},
        command="c", base_model="google/vit-base-patch16-224", dataset_on_hub=True,
    )  # fmt: skip
    data = ModelCard.load(write_model_card(card, tmp_path)).data
    assert data.base_model == "google/vit-base-patch16-224" and data.datasets == ["someone/flowers"]
    assert "fine-tuned from [google/vit-base-patch16-224]" in card.text
    local = build_model_card(
        TEMPLATES / "image_classification.md", model, repo_id="a/b", dataset_id="d", dataset_name="d",
        results=[MeasuredResult("accuracy", 0.5, "test")], hyperparameters={}, command="c", base_model=str(tmp_path),
    )  # fmt: skip
    assert local.data.base_model is None  # a local folder is no base model the Hub can link


def test_the_translation_card_shows_non_ascii_text_as_text(tmp_path):
    model = hf_xcv.TransformerForConditionalGeneration(hf_xcv.preset_config("transformer-test-tiny"))
    card = build_model_card(
        TEMPLATES / "translation.md", model, repo_id="a/numbers", dataset_id="d", dataset_name="d",
        results=[MeasuredResult("bleu", 12.0, "test")], hyperparameters={}, command="c",
        task_type="translation", pipeline_tag="translation", language=["en", "fr"],
        template_vars={
            "source_lang": "en", "target_lang": "fr", "num_beams": 4, "example_source": quoted("twenty-three"),
            "example_reference": quoted("vingt-trois élèves"), "example_hypothesis": quoted("vingt-trois élève"),
        },
    )  # fmt: skip
    text = write_model_card(card, tmp_path).read_text()
    assert '"vingt-trois élèves"' in text and "\\u00e9" not in text


def test_save_pretrained_writes_a_card_naming_the_library_and_keeps_an_existing_one(model, tmp_path):
    model.save_pretrained(tmp_path / "fresh")
    card = ModelCard.load(tmp_path / "fresh" / "README.md")
    assert card.data.library_name == "hf_xcv" and {"hf_xcv", "xcv_vit"} <= set(card.data.tags)
    assert card.data.pipeline_tag == "image-classification"
    assert "pip install hf_xcv" in card.text and "import hf_xcv" in card.text
    assert "AutoModelForImageClassification.from_pretrained" in card.text
    assert "hf-xcv-convert to-transformers" in card.text  # exportable: how to use it with transformers alone
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "README.md").write_text("my own card")
    model.save_pretrained(tmp_path / "mine")
    assert (tmp_path / "mine" / "README.md").read_text() == "my own card"


def test_a_model_loaded_from_a_local_folder_names_no_base_model_even_from_elsewhere(model, tmp_path, monkeypatch):
    """``runs/digits`` reads like a repo id: whether it was a local folder is judged when it is loaded."""
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    model.save_pretrained("runs/digits")
    loaded = type(model).from_pretrained("runs/digits")
    monkeypatch.chdir(tmp_path / "runs")  # "runs/digits" no longer exists from here
    loaded.save_pretrained(tmp_path / "again")
    assert ModelCard.load(tmp_path / "again" / "README.md").data.base_model is None


def test_a_local_dataset_is_named_by_its_folder_in_the_card():
    assert dataset_label("/home/someone/private/shapes/") == "shapes"
    assert dataset_label("someone/flowers") == "someone/flowers"


def test_use_without_hf_xcv_for_an_exported_type_shows_the_export_and_the_remote_code(model, tmp_path):
    assert model.config.model_type in exported_types()
    section = use_without_section(model, "someone/vit-digits")
    assert section.startswith(USE_WITHOUT_BEGIN) and section.endswith(USE_WITHOUT_END)
    assert "## Use without hf_xcv" in section
    export = "hf-xcv-convert to-transformers --input someone/vit-digits --output vit-digits-transformers --verify"
    assert export in section
    assert 'AutoModelForImageClassification.from_pretrained("vit-digits-transformers")' in section
    assert 'AutoModelForImageClassification.from_pretrained("someone/vit-digits", trust_remote_code=True)' in section
    assert "pip install hf_xcv" in section
    model.save_pretrained(tmp_path / "saved")  # every card has the section
    assert 'from_pretrained("saved", trust_remote_code=True)' in (tmp_path / "saved" / "README.md").read_text()


def test_use_without_hf_xcv_says_why_the_exporter_refuses_a_config():
    model = hf_xcv.ViTForImageClassification(hf_xcv.preset_config("vit-test-tiny", pooling="mean"))
    section = use_without_section(model, "a/b")
    assert "refuses it" in section and "pooling" in section and "--output" not in section
    assert 'AutoModelForImageClassification.from_pretrained("a/b", trust_remote_code=True)' in section


def test_use_without_hf_xcv_for_a_type_transformers_lacks_shows_the_remote_code_only():
    presets = hf_xcv.PRESETS
    name = next(n for n, p in presets.items() if n.endswith("-test-tiny") and p.model_type not in exported_types())
    entry = hf_xcv.MODEL_TYPES[presets[name].model_type]
    model = entry.base_model(hf_xcv.preset_config(name))
    section = use_without_section(model, "a/b")
    assert "hf-xcv-convert to-transformers --input" not in section and "transformers has no architecture" in section
    assert 'AutoModel.from_pretrained("a/b", trust_remote_code=True)' in section


def test_every_card_template_has_the_use_without_hf_xcv_section():
    templates = [path for path in TEMPLATES.glob("*.md") if path.name != "use_without_hf_xcv.md"]
    assert len(templates) >= 6 and all("{{ use_without }}" in path.read_text() for path in templates)


def test_a_card_hf_xcv_did_not_write_gives_its_results_to_hf_xcvs_card_while_the_model_is_unchanged(model, tmp_path):
    model.save_pretrained(tmp_path / "theirs")
    results = [{"task": {"type": "image-classification"}, "dataset": {"name": "digits", "type": "digits"},
                "metrics": [{"type": "accuracy", "value": 0.9}]}]  # fmt: skip
    metadata = {"license": "mit", "model-index": [{"name": "theirs", "results": results}]}
    (tmp_path / "theirs" / "README.md").write_text(f"---\n{yaml.safe_dump(metadata)}---\n\nSomeone's own card.\n")
    loaded = type(model).from_pretrained(tmp_path / "theirs")
    loaded.save_pretrained(tmp_path / "same")
    card = ModelCard.load(tmp_path / "same" / "README.md")
    assert card.data.library_name == "hf_xcv" and card.data.license == "mit" and "Someone's" not in card.text
    assert [(r.metric_type, r.metric_value) for r in card.data.eval_results] == [("accuracy", 0.9)]
    assert "## Results\n" in card.text and "`theirs`" in card.text
    loaded.half()  # another dtype: no longer the measured model
    loaded.save_pretrained(tmp_path / "half")
    card = ModelCard.load(tmp_path / "half" / "README.md")
    assert card.data.eval_results is None and "## Results of the checkpoint it was loaded from" in card.text
