"""Run directories and checkpoints that survive interruption.

Layout of a run's ``output_dir``::

    xcv_run.json                 marks the folder as an hf_xcv run (arguments of the first start)
    checkpoints/step-00000040/   accelerate.save_state + trainer_state.json, complete or absent
    checkpoints/LATEST           name of the newest complete checkpoint, replaced atomically
    train_log.jsonl              the training loss every --logging_steps steps (one JSON line each)
    config.json, model.safetensors, preprocessor_config.json, README.md, all_results.json  (final)

A checkpoint is written to a hidden staging folder and renamed into place; only then is ``LATEST``
replaced (write + ``os.replace``). A kill at any moment leaves ``LATEST`` naming a complete checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RUN_MARKER = "xcv_run.json"
CHECKPOINTS = "checkpoints"
FINAL_RESULTS = "all_results.json"  # written with the final model: the run ended
TRAIN_LOG = "train_log.jsonl"
LATEST = "LATEST"
STATE_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"step-(\d{8})")


@dataclass
class TrainerState:
    """Where the loop is: enough to continue exactly."""

    completed_steps: int = 0  # optimizer steps done
    epoch: int = 0  # epoch in progress
    batches_in_epoch: int = 0  # batches of that epoch already consumed


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def check_output_dir(output_dir: str | os.PathLike, overwrite: bool, resume: bool) -> str:
    """What may be done with ``output_dir``: "create", "resume" or "overwrite"; raises when nothing may.

    * empty or absent: start a run there;
    * holds a run and ``resume``: continue it;
    * holds a run and ``overwrite``: delete it and start afresh;
    * holds a run otherwise, or holds anything that is not an hf_xcv run: refuse.

    Reads only, so every process of a distributed run can call it and fail the same way.
    """
    path = Path(output_dir)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"output_dir {path} is a file")
    contents = sorted(p.name for p in path.iterdir()) if path.exists() else []
    if not contents:
        return "create"
    if RUN_MARKER not in contents:
        raise FileExistsError(
            f"output_dir {path} is not empty and is not an hf_xcv run (holds {contents[:5]}); choose another folder"
        )
    if resume:
        return "resume"
    if overwrite:
        return "overwrite"
    if not _has_progress(path):
        raise FileExistsError(
            f"output_dir {path} already holds a run that stopped before its first complete checkpoint; "
            "pass --overwrite_output_dir to start over"
        )
    raise FileExistsError(
        f"output_dir {path} already holds a run; pass --overwrite_output_dir to start over "
        "or --resume_from_checkpoint latest to continue it"
    )


def prepare_output_dir(output_dir: str | os.PathLike, overwrite: bool, resume: bool, run_args: dict[str, Any]) -> Path:
    """Check ``output_dir`` (see :func:`check_output_dir`), then create, keep or clear it (one process)."""
    path = Path(output_dir)
    if check_output_dir(path, overwrite, resume) == "overwrite":
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    if not (path / RUN_MARKER).exists():
        write_text_atomic(path / RUN_MARKER, json.dumps(run_args, indent=2, sort_keys=True, default=str))
    return path


def _has_progress(run: Path) -> bool:
    """The run folder holds a complete checkpoint or the final model."""
    return (run / FINAL_RESULTS).exists() or bool(CheckpointManager(run, None).complete_checkpoints())


def release_output_dir(output_dir: str | os.PathLike) -> None:
    """Empty ``output_dir``, a run folder this process claimed afresh whose set-up failed before any checkpoint,
    so that a retry is not refused. A folder with a complete checkpoint or a final model, or that is not a run,
    is left alone."""
    path = Path(output_dir)
    if not (path / RUN_MARKER).exists() or _has_progress(path):
        return
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


class CheckpointManager:
    """Atomic checkpoints under ``output_dir/checkpoints`` for an ``accelerate.Accelerator``."""

    def __init__(self, output_dir: str | os.PathLike, accelerator: Any, total_limit: int | None = None):
        self.root = Path(output_dir) / CHECKPOINTS
        self.accelerator = accelerator
        self.total_limit = total_limit

    def complete_checkpoints(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        found = [p for p in self.root.iterdir() if p.is_dir() and _STEP_DIR.fullmatch(p.name)]
        return sorted(p for p in found if (p / STATE_FILE).exists())

    def latest(self) -> Path | None:
        """The checkpoint named by LATEST (or the newest complete one if LATEST is gone)."""
        pointer = self.root / LATEST
        if pointer.exists():
            candidate = self.root / pointer.read_text().strip()
            if (candidate / STATE_FILE).exists():
                return candidate
        complete = self.complete_checkpoints()
        return complete[-1] if complete else None

    def resolve(self, spec: str) -> Path:
        """``latest`` or a checkpoint folder -> that folder; FileNotFoundError saying what is missing."""
        path = self.latest() if spec == "latest" else Path(spec)
        if path is None:
            raise FileNotFoundError(
                f"no complete checkpoint under {self.root} to resume from; pass --overwrite_output_dir instead "
                "to start over"
            )
        if not (path / STATE_FILE).exists():
            raise FileNotFoundError(f"{path} is not a complete checkpoint (no {STATE_FILE})")
        return path

    def save(self, state: TrainerState) -> Path:
        """Save model, optimizer, scheduler, RNG states and ``state``; every process must call it."""
        acc = self.accelerator
        final = self.root / f"step-{state.completed_steps:08d}"
        staging = self.root / f".staging-{final.name}"
        if acc.is_main_process:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(staging, ignore_errors=True)
        acc.wait_for_everyone()
        acc.save_state(str(staging))
        acc.wait_for_everyone()  # every process has written its RNG state before the rename
        if acc.is_main_process:
            (staging / STATE_FILE).write_text(json.dumps(asdict(state), indent=2))
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
            write_text_atomic(self.root / LATEST, final.name)
            self._prune()
        acc.wait_for_everyone()
        return final

    def load(self, path: Path) -> TrainerState:
        self.accelerator.load_state(str(path))
        return TrainerState(**json.loads((path / STATE_FILE).read_text()))

    def clean_staging(self) -> None:
        """Remove staging folders an interrupted save left behind (main process)."""
        if self.accelerator.is_main_process and self.root.is_dir():
            for leftover in self.root.glob(".staging-*"):
                shutil.rmtree(leftover, ignore_errors=True)

    def _prune(self) -> None:
        if not self.total_limit:
            return
        for old in self.complete_checkpoints()[: -self.total_limit]:
            shutil.rmtree(old, ignore_errors=True)
