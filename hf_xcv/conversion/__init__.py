"""Conversion of other libraries' checkpoints into hf_xcv's layout, and back: pure mappings and checkpoint I/O.

Nothing here builds a model or knows which model types exist. A mapping module (one per family) defines
``SOURCE_MODEL_TYPE``, ``TARGET_MODEL_TYPE``, ``PROCESSOR_TYPE`` (the hf_xcv image processor that replaces the
source's, or None), optionally ``COPIED_FILES`` (files such as tokenizers that travel unchanged), optionally
``finish_folder(folder, source_config_dict)`` (run on the staged output) and ``convert(config_dict, state_dict,
for_task_model) -> (config_dict, state_dict, dropped_keys)``, built from its pure ``convert_config`` /
``convert_state_dict`` functions; where transformers has the architecture, also ``export_config`` / ``export``.
Which family converts what is declared by the families (:class:`hf_xcv.registry.ModelEntry`); the checks that need
a model (every weight there, with its shape) take the model's expected keys and shapes as arguments, and
:mod:`hf_xcv.checkpoint_conversion` supplies them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from transformers.utils import cached_file

from .checkpoint_io import (
    HUB_KWARGS,
    CheckpointMismatchError,
    CorruptCheckpointError,
    atomic_directory,
    check_local_source,
    find_corrupt_weights,
    load_config_dict,
    load_state_dict,
    read_weights_file,
    save_safetensors,
    split_hub_kwargs,
)

_LISTED = 8  # how many keys an error shows


def _listed(keys: list[str]) -> str:
    return f"{keys[:_LISTED]}{' ...' if len(keys) > _LISTED else ''}"


def check_filled(
    state_dict: Mapping[str, Any],
    expected: Mapping[str, tuple[int, ...]],
    source: str | os.PathLike,
    model_name: str,
    optional: Callable[[str], bool] = lambda key: False,
) -> None:
    """Refuse converted weights that do not fill a model: ``expected`` maps each of its state-dict keys to its
    shape; a key missing from ``state_dict`` is a ValueError unless ``optional(key)`` (a task head: a backbone
    converts for fine-tuning), a weight of another shape a :class:`CheckpointMismatchError`. ``model_name`` names
    the model in the message (``"ViTForImageClassification"``)."""
    missing = sorted(k for k in expected if k not in state_dict and not optional(k))
    if missing:
        raise ValueError(
            f"{source} lacks {len(missing)} weights of a {model_name} after conversion (hf_xcv's names): "
            f"{_listed(missing)}"
        )
    shapes = [
        f"{k} (converted {list(state_dict[k].shape)}, model {list(shape)})"
        for k, shape in expected.items()
        if k in state_dict and tuple(state_dict[k].shape) != tuple(shape)
    ]
    if shapes:
        raise CheckpointMismatchError(
            f"{source} has {len(shapes)} weights whose shapes do not match its config after conversion: "
            f"{shapes[:_LISTED]}"
        )


def copy_processor_config(
    source: str | os.PathLike, staging: os.PathLike, processor_type: str, hub_kwargs: dict[str, Any]
) -> None:
    """The source's ``preprocessor_config.json``, if it has one, under hf_xcv's processor type."""
    file = cached_file(source, "preprocessor_config.json", _raise_exceptions_for_missing_entries=False, **hub_kwargs)
    if file is None:
        return
    with open(file) as handle:
        processor = json.load(handle)
    # Older checkpoints name a feature extractor; the hf_xcv processor takes the same arguments.
    processor.pop("feature_extractor_type", None)
    processor["image_processor_type"] = processor_type
    with open(os.path.join(staging, "preprocessor_config.json"), "w") as handle:
        json.dump(processor, handle, indent=2, sort_keys=True)


__all__ = [
    "HUB_KWARGS",
    "CheckpointMismatchError",
    "CorruptCheckpointError",
    "atomic_directory",
    "check_filled",
    "copy_processor_config",
    "find_corrupt_weights",
    "check_local_source",
    "load_config_dict",
    "load_state_dict",
    "read_weights_file",
    "save_safetensors",
    "split_hub_kwargs",
]
