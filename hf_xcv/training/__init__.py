"""Pieces the training scripts share: run folders, atomic checkpoints, model cards, Hub upload, schedules, the EMA
of the weights and layer-wise learning-rate decay (for the scripts and for transformers' Trainer)."""

from ..model_card import TEMPLATES, MeasuredResult, build_model_card, write_model_card
from .checkpointing import CheckpointManager, TrainerState, check_output_dir, prepare_output_dir
from .ema import EmaCallback, ModelEma, holds_ema_weights
from .hub import push_folder_to_hub
from .layer_decay import layer_decay_parameter_groups, layer_ids
from .mixing import MixupCallback
from .optim import NO_WEIGHT_DECAY, parameter_groups
from .schedules import get_noam_schedule, noam_factor

__all__ = [
    "TEMPLATES",
    "CheckpointManager",
    "EmaCallback",
    "ModelEma",
    "MeasuredResult",
    "MixupCallback",
    "NO_WEIGHT_DECAY",
    "TrainerState",
    "build_model_card",
    "get_noam_schedule",
    "holds_ema_weights",
    "layer_decay_parameter_groups",
    "layer_ids",
    "noam_factor",
    "parameter_groups",
    "check_output_dir",
    "prepare_output_dir",
    "push_folder_to_hub",
    "write_model_card",
]
