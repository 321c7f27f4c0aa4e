"""hf_xcv as users install it: a wheel built from the checkout, installed in a fresh virtual environment, run
outside the checkout. Its commands convert a checkpoint and train (model-card templates are package data)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import torch
import transformers
from helpers import REPO_ROOT

REPO = REPO_ROOT


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


def checkout_copy(destination: Path) -> Path:
    """The checkout's files that git tracks or would track (no build folders, no stale build output)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        origin, target = REPO / name, destination / name
        if not origin.exists() and not origin.is_symlink():
            continue  # deleted in the working tree, not yet committed
        target.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_symlink():
            target.symlink_to(os.readlink(origin))
        else:
            shutil.copy2(origin, target)
    return destination


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(bin folder of a fresh venv with the wheel installed, environment without the checkout on any path)."""
    root = tmp_path_factory.mktemp("installed")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HOME"] = str(root / "hf-home")
    source = checkout_copy(root / "source")  # setuptools builds in the source folder: keep the checkout clean
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(root), str(source)],
        root, env)  # fmt: skip
    wheel = next(root.glob("hf_xcv-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "hf_xcv/model_cards/image_classification.md" in names and "hf_xcv/cli/train_translation.py" in names
    venv = root / "venv"
    run([sys.executable, "-m", "venv", str(venv)], root, env)
    # The dependencies come from this environment's site-packages (a fresh install of torch and transformers
    # would download gigabytes); its editable hf_xcv is not on that path (.pth files of added paths do not run).
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (purelib / "hf_xcv_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], root, env)
    where = run([str(venv / "bin" / "python"), "-c", "import hf_xcv; print(hf_xcv.__file__)"], root, env).stdout
    assert str(REPO) not in where and str(venv) in where
    return venv / "bin", env, root


def test_the_installed_converter_converts_and_verifies(installed):
    bin_dir, env, root = installed
    source = root / "transformers-vit"
    config = transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, num_labels=3,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.ViTForImageClassification(config).save_pretrained(source)
    out = root / "converted"
    result = run([str(bin_dir / "hf-xcv-convert"), "vit", "--input", str(source), "--output", str(out), "--verify"],
                 root, env)  # fmt: skip
    assert "verified" in result.stdout
    assert json.loads((out / "config.json").read_text())["model_type"] == "xcv_vit"
    run([str(bin_dir / "python"), "-m", "hf_xcv.convert", "vit", "--input", str(source), "--output",
         str(root / "again")], root, env)  # fmt: skip


def test_the_installed_trainer_runs_two_steps_and_writes_its_model_card(installed):
    bin_dir, env, root = installed
    out = root / "run"
    args = [
        "image-classification", "--output_dir", str(out), "--preset", "vit-test-tiny", "--max_train_steps", "2",
        "--max_train_samples", "64", "--per_device_train_batch_size", "16", "--eval_every_epochs", "0",
        "--disable_tqdm",
    ]  # fmt: skip
    run([str(bin_dir / "hf-xcv-train"), *args], root, {**env, "OMP_NUM_THREADS": "1"})
    assert (out / "model.safetensors").is_file()
    card = (out / "README.md").read_text()
    assert "hf-xcv-train image-classification" in card  # the command that reproduces the run
