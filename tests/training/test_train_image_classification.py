"""training/train_image_classification.py: runs, resumes exactly, runs data-parallel (guards: test_training_scripts)."""

from __future__ import annotations

import json
from functools import partial

import pytest
import torch
import yaml
from helpers import REPO_ROOT, accelerate_launcher, check, run_script
from safetensors.torch import load_file

SCRIPT = REPO_ROOT / "training" / "train_image_classification.py"
run = partial(run_script, SCRIPT)
# Small and quick: 256 training images in batches of 32 = 8 batches an epoch.
QUICK = [
    "--max_train_samples", "256", "--per_device_train_batch_size", "32", "--eval_every_epochs", "0",
    "--disable_tqdm", "--preset", "vit-test-tiny",
]  # fmt: skip


@pytest.fixture(scope="module")
def module_env(tmp_path_factory):
    import os

    env = dict(os.environ)
    env["HF_HOME"] = str(tmp_path_factory.mktemp("hf-home"))
    return env


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, module_env):
    out = tmp_path_factory.mktemp("runs") / "digits"
    check(run(["--output_dir", str(out), "--max_train_steps", "10", "--checkpointing_steps", "4", *QUICK], module_env))
    return out


def test_a_run_leaves_a_hub_ready_folder_with_a_model_card(finished_run):
    names = {p.name for p in finished_run.iterdir()}
    assert {"config.json", "model.safetensors", "preprocessor_config.json", "README.md", "all_results.json"} <= names
    assert not any(name.startswith(".final") for name in names)
    results = json.loads((finished_run / "all_results.json").read_text())
    assert results["world_size"] == 1 and results["completed_steps"] == 10
    assert results["test"]["num_samples"] == 179
    card = (finished_run / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["library_name"] == "hf_xcv" and meta["pipeline_tag"] == "image-classification"
    assert "hf_xcv" in meta["tags"]
    metrics = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert metrics["accuracy"] == pytest.approx(results["test"]["accuracy"])
    assert metrics["top5_accuracy"] == pytest.approx(results["test"]["top5_accuracy"])
    assert results["epochs"] == 1.25  # 10 steps of 8 batches an epoch
    assert "| max_train_steps | 10 |" in card and "| epochs | 1.25 |" in card and "num_train_epochs" not in card
    checkpoints = finished_run / "checkpoints"
    assert (checkpoints / "LATEST").read_text().strip() == "step-00000008"
    assert sorted(p.name for p in checkpoints.iterdir() if p.is_dir()) == ["step-00000004", "step-00000008"]


def test_overwrite_starts_afresh(module_env, tmp_path):
    out = tmp_path / "run"
    check(run(["--output_dir", str(out), "--max_train_steps", "4", "--checkpointing_steps", "2", *QUICK], module_env))
    check(run(["--output_dir", str(out), "--overwrite_output_dir", "--max_train_steps", "3", *QUICK], module_env))
    assert json.loads((out / "all_results.json").read_text())["completed_steps"] == 3
    assert not (out / "checkpoints" / "step-00000002").exists()


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(module_env, tmp_path):
    """Stop after 7 steps (checkpoints every 3: the last is step 6), resume to 12; crosses epoch boundaries,
    with gradient accumulation, dropout and augmentation all drawing random numbers."""
    common = [
        "--max_train_steps", "12", "--checkpointing_steps", "3", "--gradient_accumulation_steps", "2",
        "--per_device_train_batch_size", "16", "--max_train_samples", "160", "--max_shift", "2",
        "--eval_every_epochs", "0", "--disable_tqdm", "--preset", "vit-test-tiny",
        "--config_overrides", "hidden_dropout_prob=0.1,attention_probs_dropout_prob=0.1,drop_path_rate=0.2",
    ]  # fmt: skip
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    check(run(["--output_dir", str(straight), *common], module_env))
    check(run(["--output_dir", str(resumed), "--stop_after_steps", "7", *common], module_env))
    assert not (resumed / "model.safetensors").exists()  # stopped like a killed run: no final model
    assert (resumed / "checkpoints" / "LATEST").read_text().strip() == "step-00000006"
    log = check(run(["--output_dir", str(resumed), "--resume_from_checkpoint", "latest", *common], module_env))
    assert "resumed from" in log.stdout and "step 6" in log.stdout
    assert json.loads((straight / "config.json").read_text())["drop_path_rate"] == 0.2
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_two_process_data_parallel_run_on_cpu(module_env, tmp_path):
    """`accelerate launch --multi_gpu --num_processes 2` starts two gloo processes on a CPU machine."""
    out = tmp_path / "ddp"
    args = ["--output_dir", str(out), "--max_train_steps", "4", "--checkpointing_steps", "2", *QUICK]
    check(run(args, module_env, accelerate_launcher(2)))
    results = json.loads((out / "all_results.json").read_text())
    assert results["world_size"] == 2
    assert results["test"]["num_samples"] == 179  # gathered from both processes, no duplicates
    # every process saved its own random state into the checkpoint
    assert {p.name for p in (out / "checkpoints" / "step-00000004").glob("random_states_*")} == {
        "random_states_0.pkl",
        "random_states_1.pkl",
    }


def test_bf16_mixed_precision_runs(module_env, tmp_path):
    out = tmp_path / "bf16"
    check(run(["--output_dir", str(out), "--max_train_steps", "2", "--mixed_precision", "bf16", *QUICK], module_env))
    assert json.loads((out / "all_results.json").read_text())["completed_steps"] == 2


def test_undecodable_images_are_refused_by_file_before_the_run_folder_is_claimed_or_dropped_and_counted(tmp_path):
    """A saved dataset whose train split holds a truncated PNG and a row without a class (-1, datasets' "no
    label")."""
    import PIL.Image
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image

    from hf_xcv.cli import train_image_classification as script
    from hf_xcv.utils.errors import UsageError

    features = Features({"image": Image(), "label": ClassLabel(names=["a", "b"])})
    splits = {}
    for split, count in (("train", 6), ("validation", 2), ("test", 2)):
        paths = []
        for i in range(count):
            path = tmp_path / f"{split}-{i}.png"
            PIL.Image.effect_noise((8, 8), 60).save(path)  # grayscale 8x8, as the digits
            paths.append(str(path))
        splits[split] = {"image": paths, "label": [-1 if (split, i) == ("train", 3) else i % 2 for i in range(count)]}
    cut = tmp_path / "train-1.png"
    cut.write_bytes(cut.read_bytes()[:60])  # truncated: the header reads, the pixels do not
    data = DatasetDict({split: Dataset.from_dict(rows, features=features) for split, rows in splits.items()})
    data.save_to_disk(str(tmp_path / "saved"))
    out = tmp_path / "run"
    args = ["--dataset", str(tmp_path / "saved"), "--output_dir", str(out), "--max_train_steps", "1",
            "--per_device_train_batch_size", "2", "--eval_every_epochs", "0", "--disable_tqdm", "--preset",
            "vit-test-tiny"]  # fmt: skip
    with pytest.raises(UsageError) as caught:
        script.main(args)
    message = str(caught.value)
    assert "has 2 bad row(s)" in message and "--drop_invalid_images" in message
    assert "train-1.png: does not decode" in message and "has label -1, not an id of the 2 classes" in message
    assert not out.exists()

    results = script.main([*args, "--drop_invalid_images"])
    assert results["data"] == {"dropped_images": 2}
    assert json.loads((out / "all_results.json").read_text())["data"] == {"dropped_images": 2}
    assert "Dropped before training (--drop_invalid_images): 2 images." in (out / "README.md").read_text()
