"""Push to and pull from a Hub (minihub on 127.0.0.1) with the real, unmodified huggingface_hub client."""

from __future__ import annotations

import json
import subprocess
import sys

import huggingface_hub
import numpy as np
import PIL.Image
import pytest
import torch
import transformers
from helpers import run_python
from huggingface_hub import HfApi, ModelCard

import hf_xcv
from hf_xcv.training import TEMPLATES, MeasuredResult, build_model_card, push_folder_to_hub, write_model_card

TEMPLATE = TEMPLATES / "image_classification.md"


@pytest.fixture(scope="module")
def trained_pair():
    torch.manual_seed(0)
    config = hf_xcv.preset_config("vit-test-tiny", num_labels=3, id2label={0: "cat", 1: "dog", 2: "owl"})
    config.label2id = {"cat": 0, "dog": 1, "owl": 2}
    model = hf_xcv.ViTForImageClassification(config).eval()
    processor = hf_xcv.XcvViTImageProcessor(size={"height": 16, "width": 16})
    return model, processor


def sample_image() -> PIL.Image.Image:
    rng = np.random.default_rng(0)
    return PIL.Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8))


def fresh_process(code: str, env: dict[str, str]) -> str:
    result = run_python(code, env)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_push_model_processor_and_card_then_pull_in_a_fresh_process(trained_pair, subprocess_env, tmp_path):
    model, processor = trained_pair
    repo = "testuser/vit-hub-roundtrip"
    model.push_to_hub(repo)
    processor.push_to_hub(repo)
    card = build_model_card(
        TEMPLATE, model, repo_id=repo, dataset_id="toy", dataset_name="toy",
        results=[MeasuredResult("accuracy", 0.5, "test")], hyperparameters={"lr": 1e-3}, command="pytest",
    )  # fmt: skip
    card.push_to_hub(repo)

    files = set(HfApi().list_repo_files(repo))
    assert {"config.json", "model.safetensors", "preprocessor_config.json", "README.md"} <= files
    info = HfApi().model_info(repo)
    assert [(r.metric_type, r.metric_value) for r in info.card_data.eval_results] == [("accuracy", 0.5)]
    assert ModelCard.load(repo).data.library_name == "hf_xcv"

    pixels = processor(sample_image(), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        expected = model(pixels).logits
    out = tmp_path / "logits.json"
    fresh_process(
        f"""
        import json, numpy as np, PIL.Image, torch
        import hf_xcv
        from transformers import AutoImageProcessor, AutoModelForImageClassification
        model = AutoModelForImageClassification.from_pretrained("{repo}").eval()
        processor = AutoImageProcessor.from_pretrained("{repo}")
        assert type(model).__module__.startswith("hf_xcv"), type(model)
        assert type(processor).__module__.startswith("hf_xcv"), type(processor)
        image = PIL.Image.fromarray(np.random.default_rng(0).integers(0, 255, (20, 24, 3), dtype=np.uint8))
        with torch.no_grad():
            logits = model(processor(image, return_tensors="pt")["pixel_values"]).logits
        json.dump({{"logits": logits.tolist(), "labels": model.config.id2label}}, open("{out}", "w"))
        """,
        subprocess_env,
    )
    pulled = json.loads(out.read_text())
    assert torch.equal(torch.tensor(pulled["logits"]), expected)
    assert pulled["labels"] == {"0": "cat", "1": "dog", "2": "owl"}


def test_a_transformers_vit_on_the_hub_converts_on_load(subprocess_env):
    torch.manual_seed(3)
    theirs = transformers.ViTForImageClassification(
        transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                               image_size=16, patch_size=4, num_labels=2)
    ).eval()  # fmt: skip
    repo = "testuser/transformers-vit"
    theirs.push_to_hub(repo)
    ours = hf_xcv.ViTForImageClassification.from_pretrained(repo).eval()
    assert ours.name_or_path == repo
    pixels = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert (theirs(pixels).logits - ours(pixels).logits).abs().max() <= 1e-4


def test_training_folder_upload_skips_run_bookkeeping(trained_pair, tmp_path):
    model, processor = trained_pair
    folder = tmp_path / "run"
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    (folder / "xcv_run.json").write_text("{}")
    (folder / "checkpoints" / "step-00000001").mkdir(parents=True)
    (folder / "checkpoints" / "step-00000001" / "optimizer.bin").write_bytes(b"x")
    repo = "testuser/vit-run-upload"
    push_folder_to_hub(folder, repo)
    files = set(HfApi().list_repo_files(repo))
    assert "model.safetensors" in files and "preprocessor_config.json" in files
    assert not any(name.startswith("checkpoints") or name == "xcv_run.json" for name in files)


def test_training_script_pushes_its_result(subprocess_env, tmp_path, repo_root):
    repo = "testuser/digits-from-script"
    out = tmp_path / "run"
    args = [
        sys.executable, str(repo_root / "training" / "train_image_classification.py"), "--output_dir", str(out),
        "--max_train_steps", "2", "--max_train_samples", "64", "--per_device_train_batch_size", "32",
        "--preset", "vit-test-tiny", "--disable_tqdm", "--eval_every_epochs", "0",
        "--push_to_hub", "--hub_model_id", repo,
    ]  # fmt: skip
    result = subprocess.run(args, env=subprocess_env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    info = HfApi().model_info(repo)
    names = {s.rfilename for s in info.siblings}
    assert {"README.md", "config.json", "model.safetensors", "all_results.json"} <= names
    accuracy = json.loads((out / "all_results.json").read_text())["test"]["accuracy"]
    assert dict((r.metric_type, r.metric_value) for r in info.card_data.eval_results)["accuracy"] == pytest.approx(
        accuracy
    )


def test_push_to_hub_writes_hf_xcvs_card_and_a_fine_tuned_save_names_its_base_model(trained_pair, tmp_path):
    model, _ = trained_pair
    repo = "testuser/vit-card"
    model.push_to_hub(repo)
    card = ModelCard.load(repo)
    assert card.data.library_name == "hf_xcv" and "hf_xcv" in card.data.tags
    assert "pip install hf_xcv" in card.text and f'from_pretrained("{repo}")' in card.text
    card.data.license = "mit"  # a card on the Hub is kept (and tagged) on the next push
    card.push_to_hub(repo)
    model.push_to_hub(repo)
    assert ModelCard.load(repo).data.license == "mit"
    copy = hf_xcv.ViTForImageClassification.from_pretrained(repo)
    copy.save_pretrained(tmp_path / "copy")  # the same weights: the repo's card describes them, and is kept
    assert ModelCard.load(tmp_path / "copy" / "README.md").data.license == "mit"
    fine_tuned = hf_xcv.ViTForImageClassification.from_pretrained(repo)
    with torch.no_grad():
        fine_tuned.classifier.weight.add_(0.1)
    fine_tuned.save_pretrained(tmp_path / "fine-tuned")
    assert ModelCard.load(tmp_path / "fine-tuned" / "README.md").data.base_model == repo


@pytest.fixture
def trained_folder(trained_pair, tmp_path):
    """A folder as a training script leaves it: model, processor, and a card with measured results, a license, a
    Hub dataset and a base model, made where another Hub was configured."""
    model, processor = trained_pair
    folder = tmp_path / "run"
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(huggingface_hub.constants, "ENDPOINT", "https://elsewhere.example")
        card = build_model_card(
            TEMPLATE, model, repo_id="run", dataset_id="testuser/toy", dataset_name="toy", license="mit",
            results=[MeasuredResult("accuracy", 0.75, "test")], hyperparameters={"max_train_steps": 60},
            command="pytest", base_model="testuser/vit-base", dataset_on_hub=True,
        )  # fmt: skip
    assert "](https://elsewhere.example/testuser/vit-base)" in card.text
    write_model_card(card, folder)
    return folder


def eval_results(repo: str) -> list[tuple[str, float]]:
    return [(r.metric_type, r.metric_value) for r in HfApi().model_info(repo).card_data.eval_results or ()]


def test_push_after_loading_a_trained_folder_keeps_its_card_pointed_at_the_repo(trained_folder, hub_endpoint):
    repo = "testuser/vit-trained"
    hf_xcv.ViTForImageClassification.from_pretrained(trained_folder).push_to_hub(repo)
    assert eval_results(repo) == [("accuracy", 0.75)]
    card = ModelCard.load(repo)
    assert card.data.license == "mit" and card.data.datasets == ["testuser/toy"]
    assert "| max_train_steps | 60 |" in card.text and "| test | accuracy | 0.7500 |" in card.text
    assert f'from_pretrained("{repo}")' in card.text and 'from_pretrained("run")' not in card.text
    assert f"--input {repo} --output vit-trained-transformers" in card.text
    assert f"]({hub_endpoint}/testuser/vit-base)" in card.text  # the Hub it was pushed to
    assert "elsewhere.example" not in card.text and "huggingface.co" not in card.text


def test_a_changed_model_keeps_its_sources_results_out_of_its_model_index(trained_folder, hub_endpoint):
    """Fine-tuned after loading, a model's card names where it came from and shows that checkpoint's results under
    their own heading; pushed back to the repo it came from, it replaces that repo's card of the old weights."""
    repo = "testuser/vit-trained-source"
    hf_xcv.ViTForImageClassification.from_pretrained(trained_folder).push_to_hub(repo)
    model = hf_xcv.ViTForImageClassification.from_pretrained(repo)
    with torch.no_grad():
        model.classifier.bias.add_(0.1)
    model.push_to_hub("testuser/vit-trained-further")
    card = ModelCard.load("testuser/vit-trained-further")
    assert eval_results("testuser/vit-trained-further") == [] and card.data.base_model == repo
    assert card.data.license == "mit" and card.data.datasets == ["testuser/toy"]
    assert "## Results of the checkpoint it was loaded from" in card.text
    assert "| toy | test | accuracy | 0.7500 |" in card.text
    assert f"[{repo}]({hub_endpoint}/{repo})" in card.text and "huggingface.co" not in card.text
    model.push_to_hub(repo)
    assert eval_results(repo) == [] and "an earlier version of this repository" in ModelCard.load(repo).text


def test_saving_a_changed_model_back_into_its_folder_replaces_the_card_of_the_old_weights(trained_folder):
    """Loaded from a trained folder, trained further and saved back there: the folder's card no longer claims its
    results for the new weights (they stay, under their own heading); unchanged, or a card edited since, is kept."""
    card_before = (trained_folder / "README.md").read_text()
    model = hf_xcv.ViTForImageClassification.from_pretrained(trained_folder)
    model.save_pretrained(trained_folder)  # unchanged: the card still describes these weights
    assert (trained_folder / "README.md").read_text() == card_before
    with torch.no_grad():
        model.classifier.bias.add_(0.1)
    model.save_pretrained(trained_folder)
    card = ModelCard.load(trained_folder / "README.md")
    assert card.data.eval_results is None and card.data.license == "mit"
    assert "## Results of the checkpoint it was loaded from" in card.text and "| 0.7500 |" in card.text
    edited = hf_xcv.ViTForImageClassification.from_pretrained(trained_folder)
    (trained_folder / "README.md").write_text(card.content + "\nA note by hand.\n")
    with torch.no_grad():
        edited.classifier.bias.add_(0.1)
    edited.save_pretrained(trained_folder)
    assert "A note by hand." in (trained_folder / "README.md").read_text()
