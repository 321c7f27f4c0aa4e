"""Run directories and checkpoints that survive interruption, a power cut and a full disk.

Layout of a run's ``output_dir``::

    xcv_run.json                 marks the folder as an hf_xcv run (arguments of the first start, and the changes
                                 a resume was allowed to make: --allow_changed_args)
    checkpoints/step-00000040/   accelerate.save_state + trainer_state.json, complete or absent
    checkpoints/LATEST           name of the newest complete checkpoint, replaced atomically
    train_log.jsonl              the training loss every --logging_steps steps (one JSON line each)
    config.json, model.safetensors, preprocessor_config.json, README.md, all_results.json  (final)

A checkpoint is written to a hidden staging folder, flushed to the disk (every file and folder: :func:`fsync_tree`)
and renamed into place; only then is ``LATEST`` replaced (write, flush, ``os.replace``, flush the folder). The final
folder is written to ``.final-staging``, flushed, and moved in with ``all_results.json`` last (:func:`commit_final`):
a folder is finished (:func:`final_complete`) only once that file is there, and then every other file is too. A kill
at any moment leaves ``LATEST`` naming a complete checkpoint.

For tests, ``HF_XCV_FAULT=<point>`` kills the process with SIGKILL at one of these points (:func:`fault_point`):
``checkpoint-staged`` (a checkpoint written, not renamed), ``checkpoint-renamed`` (renamed, ``LATEST`` not replaced),
``final-moving`` (the first final file moved in) and ``final-before-results`` (all but ``all_results.json`` moved).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import zipfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ..utils.errors import UsageError

RUN_MARKER = "xcv_run.json"
CHECKPOINTS = "checkpoints"
FINAL_RESULTS = "all_results.json"  # written with the final model, last: the run ended
TRAIN_LOG = "train_log.jsonl"
LATEST = "LATEST"
STATE_FILE = "trainer_state.json"
CHANGES = "changed_on_resume"  # the key of xcv_run.json that lists the changes resumes were allowed to make
FAULT_ENV = "HF_XCV_FAULT"
_STEP_DIR = re.compile(r"step-(\d{8})")
# Below this much free space, a failed write is taken for a full disk (torch's zip writer does not give the errno).
_NEARLY_FULL = 16 * 2**20

# Arguments a resume may change without changing the run: where and how it reports, how often it checkpoints,
# what it scores (not what it trains on), and where it runs.
RESUME_MAY_CHANGE = frozenset({
    "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "allow_changed_args", "disable_tqdm",
    "logging_steps", "stop_after_steps", "push_to_hub", "hub_model_id", "hub_private", "checkpointing_steps",
    "checkpoints_total_limit", "use_cpu", "per_device_eval_batch_size", "eval_every_epochs", "eval_every_steps",
    "eval_steps", "pictures", "picture_threshold", "timing_warmup_steps", "num_beams", "max_new_tokens",
})  # fmt: skip


@dataclass
class TrainerState:
    """Where the loop is: enough to continue exactly."""

    completed_steps: int = 0  # optimizer steps done
    epoch: int = 0  # epoch in progress
    batches_in_epoch: int = 0  # batches of that epoch already consumed


class DiskFullError(OSError):
    """A save ran out of disk space; what was current before it stays current."""

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return self.strerror


def fault_point(name: str) -> None:
    """Kill this process with SIGKILL (as a power cut or the OOM killer would) if ``HF_XCV_FAULT`` names ``name``:
    how the tests interrupt a real run at a chosen point."""
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's or a folder's entries to the disk (a folder: the names in it, so a rename is durable)."""
    if os.name == "nt" and Path(path).is_dir():
        return  # Windows cannot open a folder; its renames are durable when the call returns
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str | os.PathLike) -> None:
    """Flush every file under ``path`` and every folder (``path`` itself last) to the disk."""
    for folder, _, files in os.walk(path, topdown=False):
        for name in files:
            fsync_path(os.path.join(folder, name))
        fsync_path(folder)


def write_text_atomic(path: Path, text: str) -> None:
    """``path`` holds ``text`` whole, durably, or its previous content: a temporary file flushed and renamed."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def _free_space(path: Path) -> int:
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def _is_out_of_space(error: BaseException, where: Path) -> bool:
    """``error`` (an OSError, torch's RuntimeError, safetensors' error) is a write that found the disk full."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if "No space left on device" in str(error) or "StorageFull" in str(error):
        return True
    return isinstance(error, (OSError, RuntimeError)) and _free_space(where) < _NEARLY_FULL


def _size(count: int) -> str:
    if count < 2**20:
        return f"{count} bytes"
    return f"{count / 2**20:.1f} MiB" if count < 2**30 else f"{count / 2**30:.1f} GiB"


def _disk_full(what: str, where: Path, free: int, kept: str) -> DiskFullError:
    return DiskFullError(
        f"the disk is full: saving {what} to {where} failed with {_size(free)} free there; {kept}. "
        "Free some space, then resume with --resume_from_checkpoint latest"
    )


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


# ---- the arguments a resume may not change ----


def _comparable(run_args: dict[str, Any]) -> dict[str, Any]:
    """``section.name`` -> value, as JSON records it."""
    recorded = json.loads(json.dumps(run_args, default=str))
    return {
        f"{section}.{name}": value
        for section, values in recorded.items()
        if section != CHANGES and isinstance(values, dict)
        for name, value in values.items()
    }


def _recorded_run(output_dir: Path) -> dict[str, Any]:
    marker = output_dir / RUN_MARKER
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"{marker} is unreadable ({err}); the run's arguments cannot be checked") from None
    if not isinstance(recorded, dict):
        raise UsageError(f"{marker} does not hold a JSON object; the run's arguments cannot be checked")
    return recorded


def changed_arguments(output_dir: str | os.PathLike, run_args: dict[str, Any]) -> dict[str, list[Any]]:
    """The arguments of ``run_args`` that differ from those the run in ``output_dir`` trains with (its first
    start's, with the changes resumes made since): ``section.name`` -> [recorded, now]. Arguments that do not change
    the run (:data:`RESUME_MAY_CHANGE`) and ones either side lacks (another version of hf_xcv) are not compared."""
    recorded = _recorded_run(Path(output_dir))
    before = _comparable(recorded)
    for change in recorded.get(CHANGES, []):
        if change.get("step") is not None:
            before |= {key: new for key, (_, new) in change["changed"].items()}
    now = _comparable(run_args)
    return {
        key: [before[key], value]
        for key, value in sorted(now.items())
        if key in before and before[key] != value and key.split(".", 1)[1] not in RESUME_MAY_CHANGE
    }


def describe_changes(changed: dict[str, list[Any]]) -> str:
    return ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changed.items())


def refuse_changed_arguments(output_dir: str | os.PathLike, run_args: dict[str, Any], allow: bool) -> dict:
    """The changes ``run_args`` makes to the run being resumed (see :func:`changed_arguments`); a UsageError listing
    them unless ``allow``. Reads only (every process calls it)."""
    changed = changed_arguments(output_dir, run_args)
    if changed and not allow:
        raise UsageError(
            f"resuming the run in {output_dir} with other arguments would change it: {describe_changes(changed)}; "
            "resume with the arguments it was started with, or pass --allow_changed_args to continue with the "
            "changes (recorded in xcv_run.json, all_results.json and the model card)"
        )
    return changed


def record_changes(output_dir: str | os.PathLike, changed: dict[str, list[Any]]) -> None:
    """Note in xcv_run.json that this resume changes ``changed``, at a step :func:`settle_changes` fills in (main
    process). A note left without a step (a resume that failed before loading its checkpoint) is dropped."""
    marker = Path(output_dir) / RUN_MARKER
    recorded = _recorded_run(Path(output_dir))
    settled = [change for change in recorded.get(CHANGES, []) if change.get("step") is not None]
    pending = [{"step": None, "changed": changed}] if changed else []
    if settled + pending or CHANGES in recorded:
        recorded[CHANGES] = settled + pending
        write_text_atomic(marker, json.dumps(recorded, indent=2, sort_keys=True))


def settle_changes(output_dir: str | os.PathLike, step: int) -> None:
    """The resume's changes apply from ``step``, the step of the checkpoint it loaded (main process)."""
    marker = Path(output_dir) / RUN_MARKER
    recorded = _recorded_run(Path(output_dir))
    pending = [change for change in recorded.get(CHANGES, []) if change.get("step") is None]
    if pending:
        for change in pending:
            change["step"] = step
        write_text_atomic(marker, json.dumps(recorded, indent=2, sort_keys=True))


def changes_made(output_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The changes resumes made to the run (``{"step": N, "changed": {"section.name": [old, new]}}``), in order."""
    marker = Path(output_dir) / RUN_MARKER
    if not marker.exists():
        return []
    return [change for change in _recorded_run(Path(output_dir)).get(CHANGES, []) if change.get("step") is not None]


# ---- the final folder ----


def final_complete(output_dir: str | os.PathLike) -> bool:
    """The run in ``output_dir`` finished: its results file parses, and the config and weights it was saved with
    are there. The results file alone proves nothing (a folder written by an older hf_xcv killed while moving its
    final files in may hold it without the model)."""
    path = Path(output_dir)
    try:
        results = json.loads((path / FINAL_RESULTS).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    if not isinstance(results, dict) or not (path / "config.json").is_file():
        return False
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, AttributeError):
            return False
        return all((path / shard).is_file() for shard in shards)
    return (path / "model.safetensors").is_file()


def commit_final(staging: Path, out: Path) -> None:
    """Move the final files of ``staging`` (written whole and flushed) into ``out``, the results file last.

    The old results file goes first, so that from then on the folder is not finished; each rename is flushed; the
    results file then makes the folder finished in one step. A kill before that leaves an unfinished run, which
    ``--resume_from_checkpoint latest`` finishes.
    """
    results = out / FINAL_RESULTS
    if results.exists():
        results.unlink()
        fsync_path(out)
    for index, file in enumerate(sorted(p for p in staging.iterdir() if p.name != FINAL_RESULTS)):
        os.replace(file, out / file.name)
        if index == 0:
            fault_point("final-moving")
    fsync_path(out)
    fault_point("final-before-results")
    os.replace(staging / FINAL_RESULTS, results)
    fsync_path(out)
    staging.rmdir()


def write_final_staging(staging: Path, write: Any) -> None:
    """Call ``write(staging)`` into a fresh ``staging`` folder and flush it to the disk; on failure remove it (a
    full disk: :class:`DiskFullError`)."""
    shutil.rmtree(staging, ignore_errors=True)  # left by a run killed while saving
    try:
        write(staging)
        fsync_tree(staging)
    except Exception as error:
        full, free = _is_out_of_space(error, staging), _free_space(staging)
        shutil.rmtree(staging, ignore_errors=True)
        if full:
            kept = "nothing was moved into the run folder; its checkpoints are unchanged"
            raise _disk_full("the final model", staging.parent, free, kept) from error
        raise


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


# ---- what makes a checkpoint unloadable ----


def _read_state(path: Path) -> TrainerState:
    """The checkpoint's trainer state; ValueError saying what is wrong with it."""
    try:
        values = json.loads((path / STATE_FILE).read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"is not valid JSON ({err})") from None
    names = [f.name for f in fields(TrainerState)]
    if not isinstance(values, dict) or sorted(values) != sorted(names):
        raise ValueError(f"does not hold exactly the keys {names}")
    if not all(type(value) is int and value >= 0 for value in values.values()):
        raise ValueError(f"holds values that are not integers >= 0: {values}")
    return TrainerState(**values)


def _safetensors_problem(file: Path) -> str | None:
    """Is the file as long as its header says (a truncated one is not)?"""
    size = file.stat().st_size
    with file.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"is truncated ({size} bytes, not even a header)"
        length = int.from_bytes(head, "little")
        if length > size - 8:
            return f"is truncated ({size} bytes; its header alone says {length + 8})"
        try:
            header = json.loads(handle.read(length))
            end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, IndexError) as err:
            return f"has a corrupt header ({err})"
    if size != 8 + length + end:
        return f"is truncated or corrupt ({size} bytes; its header describes {8 + length + end})"
    return None


def _torch_file_problem(file: Path) -> str | None:
    """A ``torch.save`` file is a zip archive: is it whole (its table of contents there, every entry's CRC)?"""
    if not zipfile.is_zipfile(file):
        return f"is truncated or not a torch file ({file.stat().st_size} bytes, no zip directory at its end)"
    try:
        with zipfile.ZipFile(file) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        return f"is corrupt ({err})"
    return f"is corrupt (entry {bad} fails its checksum)" if bad else None


def checkpoint_problem(path: Path) -> str | None:
    """Why the checkpoint folder ``path`` cannot be loaded (the file and what is wrong with it), or None."""
    if not (path / STATE_FILE).is_file():
        return f"{path / STATE_FILE} is missing (an incomplete checkpoint)"
    try:
        _read_state(path)
    except ValueError as err:
        return f"{path / STATE_FILE} {err}"
    for file in sorted(path.iterdir()):
        if file.suffix == ".safetensors":
            problem = _safetensors_problem(file)
        elif file.suffix in (".bin", ".pkl", ".pt"):
            problem = _torch_file_problem(file)
        else:
            continue
        if problem:
            return f"{file} {problem}"
    return None


def _scheduler_steps(path: Path) -> int | None:
    """The steps the checkpoint's one scheduler has taken, where it has exactly one that counts them."""
    import torch

    files = list(path.glob("scheduler*.bin"))
    if len(files) != 1:
        return None
    try:
        steps = torch.load(files[0], weights_only=True, map_location="cpu").get("last_epoch")
    except Exception:  # a scheduler whose state holds more than tensors and numbers: nothing to compare
        return None
    return steps if type(steps) is int else None


def refuse_edited_step(path: Path, state: TrainerState) -> None:
    """A UsageError where the step counter of ``path`` disagrees with its folder name or with its scheduler (the
    loop steps it once per optimizer step): a hand-edited ``trainer_state.json`` would resume at a step the weights
    were not trained to."""
    match = _STEP_DIR.fullmatch(path.name)
    scheduler = _scheduler_steps(path)
    if match and int(match.group(1)) != state.completed_steps:
        found = f"the folder is {path.name}"
    elif scheduler is not None and scheduler != state.completed_steps:
        found = f"its scheduler has taken {scheduler} steps"
    else:
        return
    raise UsageError(
        f"{path / STATE_FILE} says completed_steps={state.completed_steps} but {found}: the step counter was "
        "edited; resuming would continue at a step the weights were not trained to. Restore it or resume from "
        "another checkpoint"
    )


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

    def _pointed_to(self) -> tuple[Path | None, str | None]:
        """The checkpoint LATEST names, or why it names none."""
        pointer = self.root / LATEST
        if not pointer.exists():
            return None, None
        try:
            name = pointer.read_bytes().decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            return None, f"{pointer} is unreadable ({err})"
        if not _STEP_DIR.fullmatch(name):
            return None, f"{pointer} holds {name[:40]!r}, not a checkpoint name (step-NNNNNNNN)"
        if not (self.root / name / STATE_FILE).exists():
            return None, f"{pointer} names {name}, which is not a complete checkpoint"
        return self.root / name, None

    def latest(self) -> Path | None:
        """The checkpoint named by LATEST (or the newest complete one if LATEST is gone or names none)."""
        named, _ = self._pointed_to()
        if named is not None:
            return named
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

    def resume(self, spec: str) -> tuple[Path, TrainerState]:
        """Load ``spec`` (a checkpoint folder, or ``latest``) and return it with its state.

        ``latest`` tries the checkpoint LATEST names, then the others newest first, skipping (and saying so) each
        that does not load: the first that does is resumed. An explicit folder that does not load, or no checkpoint
        that loads, is a UsageError naming each file and what is wrong with it. A hand-edited step counter is
        refused (:func:`refuse_edited_step`).
        """
        if spec != "latest":
            path = self.resolve(spec)
            problem = checkpoint_problem(path)
            if problem:
                raise UsageError(f"cannot resume from {path}: {problem}")
            return path, self.load(path)
        named, pointer_problem = self._pointed_to()
        skipped = [pointer_problem] if pointer_problem else []
        if pointer_problem:
            self.accelerator.print(f"skipping {pointer_problem}")
        newest_first = self.complete_checkpoints()[::-1]
        candidates = ([named] if named else []) + [p for p in newest_first if p != named]
        for path in candidates:
            problem = checkpoint_problem(path)
            if problem is None:
                try:
                    return path, self.load(path)
                except UsageError:
                    raise
                except Exception as err:
                    if self.accelerator.num_processes > 1:  # the others may have loaded it: they cannot follow
                        raise UsageError(f"cannot resume from {path}: {type(err).__name__}: {err}") from err
                    problem = f"{path} does not load ({type(err).__name__}: {str(err).splitlines()[0][:200]})"
            self.accelerator.print(f"skipping {path}: {problem}")
            skipped.append(problem)
        if not skipped:
            self.resolve("latest")  # raises: no checkpoint at all
        raise UsageError(
            f"no checkpoint under {self.root} loads: " + "; ".join(skipped) + ". Restore one, or start over with "
            "--overwrite_output_dir"
        )

    def save(self, state: TrainerState) -> Path:
        """Save model, optimizer, scheduler, RNG states and ``state``; every process must call it.

        A full disk raises :class:`DiskFullError` and leaves ``LATEST`` and the checkpoints as they were."""
        acc = self.accelerator
        final = self.root / f"step-{state.completed_steps:08d}"
        staging = self.root / f".staging-{final.name}"
        if acc.is_main_process:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(staging, ignore_errors=True)
        acc.wait_for_everyone()
        try:
            acc.save_state(str(staging))
            acc.wait_for_everyone()  # every process has written its RNG state before the rename
            if acc.is_main_process:
                (staging / STATE_FILE).write_text(json.dumps(asdict(state), indent=2))
                fsync_tree(staging)
        except Exception as error:
            full, free = _is_out_of_space(error, self.root), _free_space(self.root)
            if acc.is_main_process:
                shutil.rmtree(staging, ignore_errors=True)
            if full:
                kept = self.latest()
                kept = f"the last good checkpoint {kept} stays current" if kept else "no checkpoint was saved"
                raise _disk_full(f"checkpoint {final.name}", self.root, free, kept) from error
            raise
        if acc.is_main_process:
            fault_point("checkpoint-staged")
            self._move_into_place(staging, final)
            fault_point("checkpoint-renamed")
            write_text_atomic(self.root / LATEST, final.name)
            self._prune()
        acc.wait_for_everyone()
        return final

    def _move_into_place(self, staging: Path, final: Path) -> None:
        """Rename ``staging`` to ``final`` durably; a checkpoint of that step saved before (a run resumed from an
        older one) is moved aside first, so ``final`` is always one whole checkpoint or absent."""
        aside = final.with_name(f".replaced-{final.name}")
        if final.exists():
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(final, aside)
        os.replace(staging, final)
        fsync_path(self.root)
        shutil.rmtree(aside, ignore_errors=True)

    def load(self, path: Path) -> TrainerState:
        """Restore the checkpoint ``path`` (refusing a hand-edited step counter) and return its state."""
        try:
            state = _read_state(path)
        except ValueError as err:
            raise UsageError(f"cannot resume from {path}: {path / STATE_FILE} {err}") from None
        refuse_edited_step(path, state)
        self.accelerator.load_state(str(path))
        return state

    def clean_staging(self) -> None:
        """Remove staging folders an interrupted save left behind (main process)."""
        if self.accelerator.is_main_process and self.root.is_dir():
            for leftover in [*self.root.glob(".staging-*"), *self.root.glob(".replaced-*")]:
                shutil.rmtree(leftover, ignore_errors=True)

    def _prune(self) -> None:
        if not self.total_limit:
            return
        for old in self.complete_checkpoints()[: -self.total_limit]:
            shutil.rmtree(old, ignore_errors=True)
