"""Pieces the training scripts share: run folders, atomic checkpoints, model cards, Hub upload, schedules."""

from ..model_card import TEMPLATES, MeasuredResult, build_model_card, write_model_card
from .checkpointing import CheckpointManager, TrainerState, check_output_dir, prepare_output_dir
from .hub import push_folder_to_hub
from .optim import NO_WEIGHT_DECAY, parameter_groups
from .schedules import get_noam_schedule, noam_factor

__all__ = [
    "TEMPLATES",
    "CheckpointManager",
    "MeasuredResult",
    "NO_WEIGHT_DECAY",
    "TrainerState",
    "build_model_card",
    "get_noam_schedule",
    "noam_factor",
    "parameter_groups",
    "check_output_dir",
    "prepare_output_dir",
    "push_folder_to_hub",
    "write_model_card",
]
