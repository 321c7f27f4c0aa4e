"""What every training script does alike, run on each: it guards its output folder."""

from __future__ import annotations

import os

import pytest
from helpers import run_script

from hf_xcv.training.checkpointing import RUN_MARKER

# Each script with arguments that make a run of it small, should it get that far.
SCRIPTS = {
    "train_image_classification.py": ["--preset", "vit-test-tiny", "--max_train_samples", "64"],
    "train_image_restoration.py": ["--preset", "ttsr-test-tiny", "--crop_size", "32", "--max_train_samples", "8",
                                   "--pictures", "0"],
    "train_translation.py": [
        "--preset", "transformer-test-tiny", "--train_size", "64", "--validation_size", "4", "--test_size", "4",
        "--tokenizer_vocab_size", "300",
    ],
}  # fmt: skip


@pytest.fixture(params=sorted(SCRIPTS))
def script(request, repo_root, tmp_path_factory):
    env = dict(os.environ, HF_HOME=str(tmp_path_factory.mktemp("hf-home")), OMP_NUM_THREADS="1")

    def run(*args: str):
        small = [*SCRIPTS[request.param], "--max_train_steps", "1", "--disable_tqdm"]
        return run_script(repo_root / "training" / request.param, [*args, *small], env)

    return run


def test_refuses_a_folder_holding_a_run_unless_told(script, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / RUN_MARKER).write_text("{}")
    result = script("--output_dir", str(tmp_path / "run"))
    assert result.returncode != 0 and "already holds a run" in result.stderr


def test_refuses_a_folder_that_is_not_a_run_even_to_overwrite(script, tmp_path):
    (tmp_path / "thesis.tex").write_text("precious")
    result = script("--output_dir", str(tmp_path), "--overwrite_output_dir")
    assert result.returncode != 0 and "is not an hf_xcv run" in result.stderr
    assert (tmp_path / "thesis.tex").read_text() == "precious"


def test_resume_without_a_checkpoint_says_so(script, tmp_path):
    result = script("--output_dir", str(tmp_path / "empty"), "--resume_from_checkpoint", "latest")
    assert result.returncode != 0 and "no complete checkpoint" in result.stderr


def test_a_dataset_that_fails_its_checks_claims_no_output_folder(script, tmp_path):
    """The data is checked before the run folder is claimed: fixing the dataset and running again just works."""
    result = script("--output_dir", str(tmp_path / "run"), "--dataset", str(tmp_path / "no-such-dataset"))
    assert result.returncode != 0
    assert not (tmp_path / "run").exists()


def test_a_start_that_fails_after_claiming_the_folder_gives_it_back(script, tmp_path):
    """A set-up step after the claim (here the model's config) fails: the folder holds nothing to resume, so it
    is emptied, and the corrected command runs in it without --overwrite_output_dir."""
    out = tmp_path / "run"
    result = script("--output_dir", str(out), "--config_overrides", "no_such_field=1")
    assert result.returncode != 0 and "no_such_field" in result.stderr
    assert not (out / RUN_MARKER).exists()
    result = script("--output_dir", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "all_results.json").is_file()


def test_a_run_stopped_before_its_first_checkpoint_is_refused_with_advice_that_works(script, tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / RUN_MARKER).write_text("{}")
    result = script("--output_dir", str(out))
    assert result.returncode != 0 and "stopped before its first complete checkpoint" in result.stderr
    assert "--resume_from_checkpoint" not in result.stderr.splitlines()[-1]
    assert script("--output_dir", str(out), "--overwrite_output_dir").returncode == 0
