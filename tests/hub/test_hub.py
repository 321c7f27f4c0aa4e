"""Push to and pull from a Hub (minihub on 127.0.0.1) with the real, unmodified huggingface_hub client."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import PIL.Image
import pytest
import torch
import transformers
from helpers import run_python
from huggingface_hub import HfApi, ModelCard

import hf_xcv
from hf_xcv.training import TEMPLATES, MeasuredResult, build_model_card, push_folder_to_hub

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
    fine_tuned = hf_xcv.ViTForImageClassification.from_pretrained(repo)
    fine_tuned.save_pretrained(tmp_path)
    assert ModelCard.load(tmp_path / "README.md").data.base_model == repo
