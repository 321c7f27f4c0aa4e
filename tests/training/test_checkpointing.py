"""Run folders and checkpoints: an interruption never leaves a broken checkpoint as the latest."""

from __future__ import annotations

import json

import pytest
import torch
from accelerate import Accelerator

from hf_xcv.conversion import atomic_directory
from hf_xcv.training import CheckpointManager, TrainerState, prepare_output_dir
from hf_xcv.training.checkpointing import LATEST, RUN_MARKER, STATE_FILE


@pytest.fixture
def manager(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    return CheckpointManager(tmp_path, accelerator, total_limit=2), model


def test_checkpoints_are_complete_pruned_and_pointed_to(manager):
    ckpt, model = manager
    for step in (1, 2, 3):
        with torch.no_grad():
            model.weight.fill_(step)
        ckpt.save(TrainerState(completed_steps=step, epoch=0, batches_in_epoch=step))
    assert [p.name for p in ckpt.complete_checkpoints()] == ["step-00000002", "step-00000003"]
    assert (ckpt.root / LATEST).read_text() == "step-00000003"
    state = ckpt.load(ckpt.resolve("latest"))
    assert state == TrainerState(completed_steps=3, epoch=0, batches_in_epoch=3)
    assert torch.all(model.weight == 3)


def test_an_interrupted_save_is_never_the_latest(manager):
    ckpt, _ = manager
    ckpt.save(TrainerState(completed_steps=5))
    # a kill in the middle of saving step 6 leaves a staging folder, and maybe a folder without its state file
    (ckpt.root / ".staging-step-00000006").mkdir()
    (ckpt.root / ".staging-step-00000006" / "model.safetensors").write_bytes(b"half")
    (ckpt.root / "step-00000007").mkdir()
    assert ckpt.resolve("latest").name == "step-00000005"
    (ckpt.root / LATEST).unlink()  # even without the pointer, only complete checkpoints count
    assert ckpt.latest().name == "step-00000005"
    ckpt.clean_staging()
    assert not (ckpt.root / ".staging-step-00000006").exists()
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        ckpt.resolve(str(ckpt.root / "step-00000007"))


def test_prepare_output_dir_rules(tmp_path):
    fresh = prepare_output_dir(tmp_path / "new", overwrite=False, resume=False, run_args={"a": 1})
    assert json.loads((fresh / RUN_MARKER).read_text()) == {"a": 1}
    with pytest.raises(FileExistsError, match="already holds a run"):
        prepare_output_dir(fresh, overwrite=False, resume=False, run_args={})
    assert prepare_output_dir(fresh, overwrite=False, resume=True, run_args={}) == fresh
    (fresh / "model.safetensors").write_bytes(b"old")
    prepare_output_dir(fresh, overwrite=True, resume=False, run_args={"b": 2})
    assert not (fresh / "model.safetensors").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not an hf_xcv run"):
        prepare_output_dir(other, overwrite=True, resume=False, run_args={})
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        prepare_output_dir(tmp_path / "file", overwrite=True, resume=False, run_args={})


def test_atomic_directory_leaves_the_target_untouched_on_failure(tmp_path):
    target = tmp_path / "out"
    with atomic_directory(target) as staging:
        (staging / "a.txt").write_text("first")
    assert (target / "a.txt").read_text() == "first"
    with pytest.raises(RuntimeError), atomic_directory(target, overwrite=True) as staging:
        (staging / "a.txt").write_text("half-written")
        raise RuntimeError("killed")
    assert (target / "a.txt").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging left behind
    with pytest.raises(FileExistsError):
        with atomic_directory(target):
            pass


def test_state_file_name_is_what_resume_looks_for(manager):
    ckpt, _ = manager
    path = ckpt.save(TrainerState(completed_steps=1))
    assert (path / STATE_FILE).exists()
