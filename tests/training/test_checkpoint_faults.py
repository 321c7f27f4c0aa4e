"""Runs that survive faults (issue 30): real training runs killed with SIGKILL at chosen points
(``HF_XCV_FAULT``), resumes with other arguments, and a real full disk (a small tmpfs in a private mount
namespace)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from functools import partial

import pytest
from helpers import REPO_ROOT, check, run_script

from hf_xcv.training.checkpointing import FAULT_ENV, FINAL_RESULTS, LATEST, final_complete

SCRIPT = REPO_ROOT / "training" / "train_image_classification.py"
run = partial(run_script, SCRIPT)
# 64 images in batches of 16: 4 batches an epoch, a checkpoint every 2 steps
TINY = [
    "--max_train_samples", "64", "--per_device_train_batch_size", "16", "--eval_every_epochs", "0",
    "--disable_tqdm", "--preset", "vit-test-tiny", "--checkpointing_steps", "2", "--max_train_steps", "4",
]  # fmt: skip


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    import os

    return dict(os.environ, HF_HOME=str(tmp_path_factory.mktemp("hf-home")), OMP_NUM_THREADS="1")


def killed_at(point: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = run(args, {**env, FAULT_ENV: point})
    assert done.returncode == -signal.SIGKILL, f"not killed at {point}: " + done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def story(env, tmp_path_factory) -> dict:
    """One run through four real processes (what each left behind is noted as it happens):

    1. killed after its first checkpoint (step 2) was renamed into place, before LATEST named it;
    2. resumed with arguments that change the run: refused;
    3. resumed with a changed learning rate and --allow_changed_args, killed while moving its final files in (all
       but the results file);
    4. resumed with that learning rate again (recorded: no flag needed) and finished.
    """
    out = tmp_path_factory.mktemp("runs") / "run"
    resume = ["--output_dir", str(out), "--resume_from_checkpoint", "latest", *TINY]
    notes = {"out": out}
    killed_at("checkpoint-renamed", ["--output_dir", str(out), *TINY], env)
    notes["after kill 1"] = sorted(p.name for p in (out / "checkpoints").iterdir())
    changed = ["--learning_rate", "0.002", "--seed", "1", "--per_device_train_batch_size", "8"]
    notes["refused"] = run([*resume, *changed, "--max_train_samples", "48"], env)  # an option's last value counts
    killed_at("final-before-results", [*resume, "--learning_rate", "0.002", "--allow_changed_args"], env)
    notes["after kill 2"] = sorted(p.name for p in out.iterdir()), final_complete(out)
    notes["finished"] = check(run([*resume, "--learning_rate", "0.002"], env))
    return notes


def test_a_run_killed_at_any_point_resumes_and_a_half_moved_final_folder_is_not_finished(story):
    out = story["out"]
    assert story["after kill 1"] == ["step-00000002"]  # complete, though LATEST does not name it yet
    names, finished = story["after kill 2"]
    assert {"config.json", "model.safetensors", "checkpoints"} <= set(names) and not finished
    assert FINAL_RESULTS not in names  # never a results file without its model
    assert "resumed from" in story["finished"].stdout and "step 4" in story["finished"].stdout
    assert final_complete(out) and json.loads((out / FINAL_RESULTS).read_text())["completed_steps"] == 4
    assert not (out / ".final-staging").exists() and (out / "checkpoints" / LATEST).read_text() == "step-00000004"


def test_a_resume_that_changes_the_run_is_refused_unless_allowed_and_then_recorded(story):
    refused = story["refused"]
    assert refused.returncode == 2, refused.stderr[-2000:]
    for difference in (
        "train.learning_rate 0.001 -> 0.002",
        "train.seed 0 -> 1",
        "train.per_device_train_batch_size 16 -> 8",
        "data.max_train_samples 64 -> 48",
        "--allow_changed_args",
    ):
        assert difference in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1  # the CLI's one line, no traceback
    out = story["out"]
    results = json.loads((out / FINAL_RESULTS).read_text())
    assert results["changed_args"] == [{"step": 2, "changed": {"train.learning_rate": [0.001, 0.002]}}]
    assert "| changed_on_resume | from step 2: train.learning_rate 0.001 -> 0.002 |" in (out / "README.md").read_text()


def _private_tmpfs_works() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /tmp"]
    return subprocess.run(probe, capture_output=True).returncode == 0


FULL_DISK = """
import os, sys
from pathlib import Path

import torch
from accelerate import Accelerator
from huggingface_hub import ModelCard

import hf_xcv
from hf_xcv.training.checkpointing import CheckpointManager, DiskFullError, TrainerState
from hf_xcv.training.runner import save_final

disk = Path(sys.argv[1])
accelerator = Accelerator(cpu=True)
model = hf_xcv.ViTForImageClassification(hf_xcv.preset_config("vit-test-tiny"))
optimizer = torch.optim.Adam(model.parameters())
model, optimizer = accelerator.prepare(model, optimizer)
ckpt = CheckpointManager(disk / "run", accelerator)
ckpt.save(TrainerState(completed_steps=1))


def leave(room: int) -> None:  # fill the disk up, then free room bytes
    with open(disk / "filler", "ab", buffering=0) as filler:
        try:
            while True:
                filler.write(b"0" * 4096)
        except OSError:
            pass
    os.truncate(disk / "filler", os.path.getsize(disk / "filler") - room)


# too little room for the weights (safetensors fails); room for the weights but not the optimizer (torch's zip
# writer fails); too little for the final model
for room, save in (
    (40_000, lambda: ckpt.save(TrainerState(completed_steps=2))),
    (100_000, lambda: ckpt.save(TrainerState(completed_steps=3))),
    (40_000, lambda: save_final(accelerator, model, [], disk / "run", {"test": 1.0}, lambda m: ModelCard(""))),
):
    leave(room)
    try:
        save()
        print("SAVED")
    except DiskFullError as error:
        print("ERROR", error, "| CAUSE", type(error.__cause__).__name__, str(error.__cause__)[:60])
print("LATEST", (ckpt.root / "LATEST").read_text())
print("FILES", sorted(p.name for p in (disk / "run").iterdir()), sorted(p.name for p in ckpt.root.iterdir()))
"""


@pytest.mark.skipif(not _private_tmpfs_works(), reason="needs unshare and a tmpfs in a private mount namespace")
def test_a_full_disk_says_so_and_the_last_good_checkpoint_stays_current(env, tmp_path):
    """A real full disk: a 2 MiB tmpfs mounted in a private namespace over tmp_path, filled up after the first save."""
    mount = f'mount -t tmpfs -o size=2m tmpfs "$0" && exec {sys.executable} -c "$1" "$0"'
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", mount, str(tmp_path), FULL_DISK], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    errors = [line for line in lines if line.startswith("ERROR")]
    assert len(errors) == 3 and "SAVED" not in lines, done.stdout
    for error, what in zip(errors, ("checkpoint step-00000002", "checkpoint step-00000003", "the final model")):
        assert f"the disk is full: saving {what} to {tmp_path}/run" in error and "free there" in error
    for error in errors[:2]:
        assert f"the last good checkpoint {tmp_path}/run/checkpoints/step-00000001 stays current" in error
    # the failures were safetensors' and torch's own (not an OSError of ours)
    assert (
        "CAUSE SafetensorError" in errors[0] and "CAUSE RuntimeError" in errors[1] and "inline_container" in errors[1]
    )
    assert "LATEST step-00000001" in lines
    # no staging folder, no second checkpoint, no final file left behind
    assert "FILES ['checkpoints'] ['LATEST', 'step-00000001']" in lines, done.stdout
