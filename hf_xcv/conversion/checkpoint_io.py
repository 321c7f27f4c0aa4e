"""Reading and writing checkpoints safely: clear errors for corrupt files, atomic writes."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers.utils import cached_file

from ..utils.errors import UsageError

# from_pretrained keyword arguments that locate files (on disk or on a Hub).
HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder", "proxies")

_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


class CorruptCheckpointError(UsageError):
    """A weights file cannot be read: truncated, corrupt, or not a weights file at all."""


class CheckpointMismatchError(UsageError, RuntimeError):
    """Checkpoint weights whose shapes do not match the model. A RuntimeError too, which is what transformers
    raises for them: code written for transformers catches it."""


def split_hub_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(file-locating kwargs, everything else)."""
    hub = {k: v for k, v in kwargs.items() if k in HUB_KWARGS}
    rest = {k: v for k, v in kwargs.items() if k not in HUB_KWARGS}
    return hub, rest


def read_weights_file(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """One safetensors or torch file -> state dict; CorruptCheckpointError naming the file otherwise."""
    path = str(path)
    try:
        if path.endswith(".safetensors"):
            return load_file(path)
        return torch.load(path, map_location="cpu", weights_only=True)
    except (SafetensorError, RuntimeError, EOFError, OSError, ValueError) as err:
        raise CorruptCheckpointError(f"weights file {path} is corrupt or truncated: {err}") from err


def find_corrupt_weights(folder: str | os.PathLike) -> str | None:
    """The first weights file in a local folder that does not open, with the reason; None if all open."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    for file in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        try:
            read_weights_file(file)
        except CorruptCheckpointError as err:
            return str(err)
    return None


def load_state_dict(path_or_repo: str | os.PathLike, **hub_kwargs: Any) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint (local folder or Hub repo), single-file or sharded."""
    for name in _WEIGHT_FILES:
        file = cached_file(path_or_repo, name, _raise_exceptions_for_missing_entries=False, **hub_kwargs)
        if file is not None:
            break
    else:
        raise OSError(f"no weights file ({', '.join(_WEIGHT_FILES)}) found in {path_or_repo}")
    if not name.endswith(".index.json"):
        return read_weights_file(file)
    with open(file) as handle:
        shards = sorted(set(json.load(handle)["weight_map"].values()))
    state_dict: dict[str, torch.Tensor] = {}
    for shard in shards:
        state_dict.update(read_weights_file(cached_file(path_or_repo, shard, **hub_kwargs)))
    return state_dict


def check_local_source(path_or_repo: str | os.PathLike) -> None:
    """FileNotFoundError for a source written as a local path (``./run``, ``/data/run``, ``~/run``, ``a/b/c``) that
    is not there: such a name is no Hub repo id (``owner/name``), and the Hub's "Repo id must use alphanumeric
    chars" would not say that the folder is missing."""
    text = os.fspath(path_or_repo)
    looks_local = text.startswith((".", "/", "~")) or text.count("/") > 1 or (os.sep != "/" and os.sep in text)
    if looks_local and not os.path.exists(os.path.expanduser(text)):
        raise FileNotFoundError(f"{text}: no such file or folder")


def load_config_dict(path_or_repo: str | os.PathLike, **hub_kwargs: Any) -> dict[str, Any]:
    check_local_source(path_or_repo)
    file = cached_file(path_or_repo, "config.json", _raise_exceptions_for_missing_entries=False, **hub_kwargs)
    if file is None:
        raise OSError(f"no config.json found in {path_or_repo}")
    with open(file) as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as err:
            raise CorruptCheckpointError(f"config file {file} is not valid JSON: {err}") from err


@contextmanager
def atomic_directory(target: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``target`` in one rename.

    An exception (or a kill) leaves ``target`` as it was: never a half-written checkpoint.
    """
    target = Path(target)
    if target.exists() and any(target.iterdir()) and not overwrite:
        raise FileExistsError(f"{target} exists and is not empty; pass --overwrite (overwrite=True) to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield staging
        if target.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.replace(target, trash / "old")
            os.replace(staging, target)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def save_safetensors(state_dict: dict[str, torch.Tensor], path: str | os.PathLike) -> None:
    """Write a contiguous copy of every tensor as safetensors with the ``pt`` format tag."""
    save_file({k: v.detach().contiguous() for k, v in state_dict.items()}, str(path), metadata={"format": "pt"})


def load_pth_state_dict(path: str) -> dict[str, Any]:
    """The state dict of an original repository's ``.pth`` (under ``"model"``, or bare), read with
    ``weights_only=True``; a truncated or foreign file is refused by name."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say so by name
        raise ValueError(f"{path} is not a readable PyTorch checkpoint: {err}") from err
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("model"), dict):
        checkpoint = checkpoint["model"]
    if not isinstance(checkpoint, dict) or not all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        raise ValueError(f"{path} holds no state dict (expected tensors under 'model')")
    return checkpoint


def load_official_state_dict(path: str | os.PathLike, files: str) -> dict[str, torch.Tensor]:
    """The state dict of an official ``.pt`` file holding a model's tensors alone, read with ``weights_only=True``;
    an error naming the file when it is missing, unreadable (truncated, corrupt) or not a plain state dict. ``files``
    names the official files in the messages ("the official TTSR.pt / TTSR-rec.pt")."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated zip, foreign pickle, random bytes: each raises its own type
        raise CorruptCheckpointError(
            f"{path} is not a readable PyTorch checkpoint (truncated or corrupt?): {err}"
        ) from err
    if not isinstance(checkpoint, dict) or not checkpoint:
        held = "an empty dict" if isinstance(checkpoint, dict) else f"a {type(checkpoint).__name__}"
        raise CorruptCheckpointError(
            f"{path} holds {held}, not a state dict: {files} are plain state dicts (parameter name -> tensor)"
        )
    other = sorted(repr(key) for key, value in checkpoint.items() if not isinstance(value, torch.Tensor))
    if other or not all(isinstance(key, str) for key in checkpoint):
        raise CorruptCheckpointError(
            f"{path} is not a plain state dict: its entries {other[:6]} are not tensors. {files} hold the model's "
            "tensors alone (model.state_dict()); for a training checkpoint that wraps one, save the model's state "
            "dict alone and convert that"
        )
    return checkpoint
