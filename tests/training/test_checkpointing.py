"""Run folders and checkpoints: an interruption never leaves a broken checkpoint as the latest."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from accelerate import Accelerator

from hf_xcv.conversion import atomic_directory
from hf_xcv.training import CheckpointManager, TrainerState, prepare_output_dir
from hf_xcv.training.checkpointing import (
    FINAL_RESULTS,
    LATEST,
    RUN_MARKER,
    STATE_FILE,
    commit_final,
    final_complete,
)
from hf_xcv.utils.errors import UsageError


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


# ---- issue 30: checkpoints that do not load, hand-edited step counters, flushing to the disk ----


def truncate(file, keep: float = 0.5) -> None:
    file.write_bytes(file.read_bytes()[: int(file.stat().st_size * keep)])


@pytest.fixture
def three_steps(manager):
    """Checkpoints of steps 1, 2, 3 (weights filled with the step number), then the weights zeroed."""
    ckpt, model = manager
    ckpt.total_limit = None
    for step in (1, 2, 3):
        with torch.no_grad():
            model.weight.fill_(step)
        ckpt.save(TrainerState(completed_steps=step))
    with torch.no_grad():
        model.weight.zero_()
    return ckpt, model


def break_state(ckpt):
    (ckpt.root / "step-00000003" / STATE_FILE).write_text('{"completed_steps": 3, "epo')


def truncate_newest(name: str):
    return lambda ckpt: truncate(ckpt.root / "step-00000003" / name)


CORRUPTIONS = {  # how the newest checkpoint is broken -> what the skipping line says
    "truncated weights": (truncate_newest("model.safetensors"), "model.safetensors is truncated"),
    "truncated optimizer": (truncate_newest("optimizer.bin"), "optimizer.bin is truncated"),
    "broken trainer_state.json": (break_state, "trainer_state.json is not valid JSON"),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_resume_latest_skips_a_checkpoint_that_does_not_load(three_steps, corruption, capsys):
    ckpt, model = three_steps
    breaks, says = CORRUPTIONS[corruption]
    breaks(ckpt)
    path, state = ckpt.resume("latest")
    assert path.name == "step-00000002" and state.completed_steps == 2 and torch.all(model.weight == 2)
    printed = capsys.readouterr().out
    assert f"skipping {ckpt.root / 'step-00000003'}: " in printed and says in printed
    with pytest.raises(UsageError, match=f"cannot resume from .*step-00000003.*{says}"):
        ckpt.resume(str(ckpt.root / "step-00000003"))  # a folder asked for by name is not replaced by another


def test_the_skipping_line_names_the_file_and_what_is_wrong(three_steps, capsys):
    ckpt, _ = three_steps
    truncate(ckpt.root / "step-00000003" / "optimizer.bin")
    ckpt.resume("latest")
    newest = ckpt.root / "step-00000003"
    assert f"skipping {newest}: {newest / 'optimizer.bin'} is truncated" in capsys.readouterr().out


def test_garbage_in_latest_is_skipped_for_the_newest_checkpoint_that_loads(three_steps, capsys):
    ckpt, model = three_steps
    (ckpt.root / LATEST).write_bytes(b"\xff\xfe\x00garbage")
    path, _ = ckpt.resume("latest")
    assert path.name == "step-00000003" and torch.all(model.weight == 3)
    assert f"skipping {ckpt.root / LATEST} is unreadable" in capsys.readouterr().out
    (ckpt.root / LATEST).write_text("step-3\n")
    assert ckpt.resume("latest")[0].name == "step-00000003"
    assert "not a checkpoint name" in capsys.readouterr().out


def test_when_no_checkpoint_loads_each_file_is_named(three_steps):
    ckpt, _ = three_steps
    truncate(ckpt.root / "step-00000001" / "model.safetensors", keep=0.001)  # not even a header
    truncate(ckpt.root / "step-00000002" / "optimizer.bin")
    break_state(ckpt)
    with pytest.raises(UsageError, match="no checkpoint under .* loads") as refused:
        ckpt.resume("latest")
    message = str(refused.value)
    for broken in ("step-00000001/model.safetensors", "step-00000002/optimizer.bin", "step-00000003/trainer_state"):
        assert broken in message


def test_a_hand_edited_step_counter_is_refused(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    ckpt = CheckpointManager(tmp_path, accelerator)
    for step in (1, 2):
        optimizer.step()
        scheduler.step()
        ckpt.save(TrainerState(completed_steps=step))
    state_file = ckpt.root / "step-00000002" / STATE_FILE
    state_file.write_text(json.dumps({"completed_steps": 5, "epoch": 0, "batches_in_epoch": 0}))
    edited = "completed_steps=5 but the folder is step-00000002: the step counter was edited"
    with pytest.raises(UsageError, match=edited):
        ckpt.resume("latest")
    # renamed to match as well: the scheduler still counts 2 steps
    state_file.write_text(json.dumps({"completed_steps": 3, "epoch": 0, "batches_in_epoch": 0}))
    os.replace(ckpt.root / "step-00000002", ckpt.root / "step-00000003")
    (ckpt.root / LATEST).write_text("step-00000003")
    with pytest.raises(UsageError, match="completed_steps=3 but its scheduler has taken 2 steps"):
        ckpt.resume("latest")


class FsyncSpy:
    """Records the order of os.replace calls and of what os.fsync flushed (the path behind each descriptor)."""

    def __init__(self, monkeypatch):
        self.events: list[tuple] = []
        fsync, replace = os.fsync, os.replace

        def spy_fsync(fd):
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            return fsync(fd)

        def spy_replace(src, dst):
            self.events.append(("replace", str(src), str(dst)))
            return replace(src, dst)

        monkeypatch.setattr(os, "fsync", spy_fsync)
        monkeypatch.setattr(os, "replace", spy_replace)

    def index(self, *event) -> int:
        return self.events.index(tuple(str(part) for part in event))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_a_checkpoint_is_flushed_to_the_disk_before_it_becomes_current(manager, monkeypatch):
    """A power cut cannot be simulated here: this checks the order of the flushes instead. Every file and the
    folder are flushed before the rename, the rename before LATEST is replaced, and each replace is followed by a
    flush of the folder holding it."""
    ckpt, _ = manager
    spy = FsyncSpy(monkeypatch)
    final = ckpt.save(TrainerState(completed_steps=1))
    staging = ckpt.root / ".staging-step-00000001"
    rename = spy.index("replace", staging, final)
    for file in final.iterdir():
        assert spy.index("fsync", staging / file.name) < rename, file.name
    assert spy.index("fsync", staging) < rename
    latest = next(i for i, e in enumerate(spy.events) if e[0] == "replace" and e[2] == str(ckpt.root / LATEST))
    flushes_of_root = [i for i, e in enumerate(spy.events) if e == ("fsync", str(ckpt.root))]
    assert any(rename < i < latest for i in flushes_of_root) and flushes_of_root[-1] > latest
    assert spy.events[latest - 1][0] == "fsync" and ".LATEST.tmp" in spy.events[latest - 1][1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_the_final_folder_is_flushed_and_finished_by_its_results_file_last(tmp_path, monkeypatch):
    out, staging = tmp_path / "run", tmp_path / "run" / ".final-staging"
    staging.mkdir(parents=True)
    for name, text in (("config.json", "{}"), ("model.safetensors", "w"), (FINAL_RESULTS, "{}")):
        (staging / name).write_text(text)
    (out / FINAL_RESULTS).write_text('{"old": 1}')  # a finished folder being replaced (a resumed run)
    spy = FsyncSpy(monkeypatch)
    commit_final(staging, out)
    replaces = [e for e in spy.events if e[0] == "replace"]
    assert replaces[-1] == ("replace", str(staging / FINAL_RESULTS), str(out / FINAL_RESULTS))
    last = spy.events.index(replaces[-1])
    assert spy.events[last - 1] == ("fsync", str(out)) and spy.events[-1] == ("fsync", str(out))
    assert final_complete(out) and not staging.exists()


def test_a_results_file_alone_is_not_a_finished_run(tmp_path):
    (tmp_path / FINAL_RESULTS).write_text('{"test": {"accuracy": 1.0}}')
    assert not final_complete(tmp_path)  # what a kill between the old one-by-one renames could leave
    (tmp_path / "config.json").write_text("{}")
    assert not final_complete(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"w")
    assert final_complete(tmp_path)
    (tmp_path / FINAL_RESULTS).write_text('{"test": {"accu')
    assert not final_complete(tmp_path)
