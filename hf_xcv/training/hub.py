"""Uploading a finished run folder to a Hub."""

from __future__ import annotations

import os

from huggingface_hub import HfApi

from .checkpointing import RUN_MARKER, TRAIN_LOG

# Run bookkeeping that is not part of the model.
RUN_ONLY_PATTERNS = ["checkpoints/*", "checkpoints/**", RUN_MARKER, TRAIN_LOG, ".*", ".*/**"]


def push_folder_to_hub(folder: str | os.PathLike, repo_id: str, private: bool = False, token: str | None = None) -> str:
    """Create ``repo_id`` if needed and upload the model files of ``folder``; returns the commit URL."""
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    commit = api.upload_folder(
        folder_path=str(folder),
        repo_id=repo_id,
        ignore_patterns=RUN_ONLY_PATTERNS,
        commit_message="Upload hf_xcv model",
    )
    return str(commit.commit_url if hasattr(commit, "commit_url") else commit)
