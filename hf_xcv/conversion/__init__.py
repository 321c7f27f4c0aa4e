"""Conversion of other libraries' checkpoints into hf_xcv format, on disk or on load.

A converter module defines ``SOURCE_MODEL_TYPE``, ``TARGET_MODEL_TYPE``, ``PROCESSOR_TYPE`` (the hf_xcv
image processor that replaces the source's, or None), optionally ``COPIED_FILES`` (files such as tokenizers
that travel unchanged), optionally ``finish_folder(folder, source_config_dict)`` (run on the staged output) and
``convert(config_dict, state_dict, for_task_model) -> (config_dict, state_dict, dropped_keys)``, built from its
pure ``convert_config`` / ``convert_state_dict`` functions.
:func:`convert_checkpoint` runs one on a folder or Hub repo and writes the result atomically.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
from types import ModuleType
from typing import Any

from transformers.utils import cached_file

from .checkpoint_io import (
    HUB_KWARGS,
    CheckpointMismatchError,
    CorruptCheckpointError,
    atomic_directory,
    find_corrupt_weights,
    load_config_dict,
    load_state_dict,
    read_weights_file,
    save_safetensors,
    split_hub_kwargs,
)

logger = logging.getLogger(__name__)

# (target hf_xcv model_type, source model_type) -> converter module
CONVERTERS: dict[tuple[str, str], str] = {
    ("xcv_vit", "vit"): "hf_xcv.conversion.vit",
    ("xcv_transformer", "marian"): "hf_xcv.conversion.marian",
    ("xcv_swin", "swin"): "hf_xcv.conversion.swin",
    ("xcv_detr", "detr"): "hf_xcv.conversion.detr",
    ("xcv_deformable_detr", "deformable_detr"): "hf_xcv.conversion.deformable_detr",
}


def find_converter(target_model_type: str, source_model_type: str | None) -> ModuleType | None:
    name = CONVERTERS.get((target_model_type, source_model_type))
    return importlib.import_module(name) if name else None


def convertible_sources(target_model_type: str) -> list[str]:
    return sorted(source for target, source in CONVERTERS if target == target_model_type)


def convert_checkpoint(
    source: str | os.PathLike,
    output_dir: str | os.PathLike,
    target_model_type: str,
    overwrite: bool = False,
    for_task_model: bool | None = None,
    **hub_kwargs: Any,
) -> list[str]:
    """Convert the checkpoint at ``source`` (folder or Hub repo) into ``output_dir``; returns dropped keys.

    Writes config.json, model.safetensors and, where the source has them, preprocessor_config.json and the
    converter's ``COPIED_FILES`` (tokenizer, generation config).
    The folder appears complete or not at all. ``for_task_model`` says whether the result will feed a
    model with a task head (None: as the source's architecture says).
    """
    config_dict = load_config_dict(source, **hub_kwargs)
    converter = find_converter(target_model_type, config_dict.get("model_type"))
    if converter is None:
        raise ValueError(
            f"{source} holds a checkpoint of model_type {config_dict.get('model_type')!r}; "
            f"{target_model_type} converts {convertible_sources(target_model_type)}"
        )
    state_dict = load_state_dict(source, **hub_kwargs)
    new_config, new_state_dict, dropped = converter.convert(config_dict, state_dict, for_task_model)
    if dropped:
        logger.warning("conversion of %s dropped %d keys it has no use for: %s", source, len(dropped), dropped)
    check_converted(new_config, new_state_dict, target_model_type, source)
    with atomic_directory(output_dir, overwrite=overwrite) as staging:
        save_safetensors(new_state_dict, staging / "model.safetensors")
        with open(staging / "config.json", "w") as handle:
            json.dump(new_config, handle, indent=2, sort_keys=True)
        if converter.PROCESSOR_TYPE is not None:
            _copy_processor_config(source, staging, converter.PROCESSOR_TYPE, hub_kwargs)
        for name in getattr(converter, "COPIED_FILES", ()):
            file = cached_file(source, name, _raise_exceptions_for_missing_entries=False, **hub_kwargs)
            if file is not None:
                shutil.copyfile(file, staging / name)
        if hasattr(converter, "finish_folder"):  # e.g. fill in what older source folders leave implicit
            converter.finish_folder(staging, config_dict)
    return dropped


def check_converted(
    config_dict: dict[str, Any], state_dict: dict[str, Any], target_model_type: str, source: str | os.PathLike
) -> None:
    """Refuse, before anything is written, converted weights that do not fill the model their config describes
    (built on the meta device): a weight missing (a task head excepted: a backbone converts for fine-tuning;
    tied copies excepted: they are saved once) or of another shape. A broken source then fails here, not later
    when someone loads the result."""
    import torch

    from ..auto import MODEL_TYPES

    entry = MODEL_TYPES[target_model_type]
    classes = {cls.__name__: cls for cls in entry.model_classes}
    model_class = next((classes[n] for n in config_dict.get("architectures") or () if n in classes), entry.base_model)
    config = entry.config.from_dict(config_dict)
    with torch.device("meta"):
        reference = model_class(config)
    tied = set(getattr(reference, "all_tied_weights_keys", None) or ())
    expected = {key: tuple(value.shape) for key, value in reference.state_dict().items() if key not in tied}
    missing = sorted(k for k in expected if k not in state_dict and not reference._is_head_key(k))
    if missing:
        raise ValueError(
            f"{source} lacks {len(missing)} weights of a {model_class.__name__} after conversion (hf_xcv's names): "
            f"{missing[:8]}{' ...' if len(missing) > 8 else ''}"
        )
    shapes = [
        f"{k} (converted {list(state_dict[k].shape)}, model {list(shape)})"
        for k, shape in expected.items()
        if k in state_dict and tuple(state_dict[k].shape) != shape
    ]
    if shapes:
        raise CheckpointMismatchError(
            f"{source} has {len(shapes)} weights whose shapes do not match its config after conversion: {shapes[:8]}"
        )


def _copy_processor_config(
    source: str | os.PathLike, staging: os.PathLike, processor_type: str, hub_kwargs: dict[str, Any]
) -> None:
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
    "CONVERTERS",
    "HUB_KWARGS",
    "CheckpointMismatchError",
    "CorruptCheckpointError",
    "atomic_directory",
    "convert_checkpoint",
    "convertible_sources",
    "find_converter",
    "find_corrupt_weights",
    "load_config_dict",
    "load_state_dict",
    "read_weights_file",
    "save_safetensors",
    "split_hub_kwargs",
]
