"""Named configurations, with the published numbers beside them: every family's (each declares its own in
``hf_xcv/models/<family>/presets.py``), in one table that conversion, tests, training scripts and model cards read.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

from .auto import MODEL_TYPES
from .configuration_utils import check_known_fields
from .registry import Preset, TrainingRecipe
from .utils.errors import UsageError

# Every family's presets, in the order the families register (hf_xcv.models.FAMILIES).
PRESETS: dict[str, Preset] = {name: preset for entry in MODEL_TYPES.values() for name, preset in entry.presets.items()}


def preset_config(name: str, model_type: str | None = None, **overrides: Any) -> PretrainedConfig:
    """The config of a named preset, with ``overrides`` applied (e.g. ``num_labels=10``); with ``model_type``,
    a preset of another model type is refused (a training script for one family names only its presets)."""
    fitting = sorted(key for key, preset in PRESETS.items() if model_type in (None, preset.model_type))
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; available presets: {fitting}")
    preset = PRESETS[name]
    if model_type is not None and preset.model_type != model_type:
        raise UsageError(
            f"preset {name!r} makes a {preset.model_type} model; this needs a {model_type} preset: {fitting}"
        )
    config_class = MODEL_TYPES[preset.model_type].config
    check_known_fields(config_class, overrides)
    return config_class(**{**preset.config, **overrides})


__all__ = ["PRESETS", "Preset", "TrainingRecipe", "preset_config"]
