"""Pieces the training scripts share: run folders, atomic checkpoints, model cards, Hub upload."""

from .checkpointing import CheckpointManager, TrainerState, check_output_dir, prepare_output_dir
from .hub import push_folder_to_hub
from .model_card import MeasuredResult, build_model_card, write_model_card

__all__ = [
    "CheckpointManager",
    "MeasuredResult",
    "TrainerState",
    "build_model_card",
    "check_output_dir",
    "prepare_output_dir",
    "push_folder_to_hub",
    "write_model_card",
]
