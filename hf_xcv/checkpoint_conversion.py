"""Converting a checkpoint of another library for a registered model type, on disk or on load, strictly.

The mapping is the pure module a family declares (:attr:`hf_xcv.registry.ModelEntry.converters`); what is checked
is the model the converted config describes, built on the meta device: every weight it has must be there with its
shape (a task head excepted: a backbone converts for fine-tuning; tied copies excepted: they are saved once). A
broken source fails here, before anything is written, not later when someone loads the result.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from typing import Any

import torch
from transformers.utils import cached_file

from .conversion import (
    atomic_directory,
    check_filled,
    copy_processor_config,
    load_config_dict,
    load_state_dict,
    save_safetensors,
)
from .conversion.rules import check_exact_keys
from .registry import MODEL_TYPES, convertible_sources, find_converter
from .remote_code import add_remote_code

logger = logging.getLogger(__name__)


def reference_model(config_dict: dict[str, Any], target_model_type: str) -> torch.nn.Module:
    """The model a converted config describes (its ``architectures``' class of the target type, the bare model
    by default), built on the meta device: no memory, only names and shapes."""
    entry = MODEL_TYPES[target_model_type]
    model_class = entry.model_class(config_dict.get("architectures"))
    with torch.device("meta"):
        return model_class(entry.config.from_dict(config_dict))


def check_converted(
    config_dict: dict[str, Any],
    state_dict: dict[str, Any],
    target_model_type: str,
    source: str | os.PathLike,
    exactly_as: str | None = None,
) -> None:
    """Refuse converted weights that do not fill the model their config describes (see the module docstring).
    With ``exactly_as`` (the model in words, "a 16+16+8+4 TTSR"): the model's keys exactly, its task head included,
    and nothing it would not use (a conversion from an original file, where every key is accounted for)."""
    reference = reference_model(config_dict, target_model_type)
    tied = set(getattr(reference, "all_tied_weights_keys", None) or ())
    expected = {key: tuple(value.shape) for key, value in reference.state_dict().items() if key not in tied}
    if exactly_as is not None:
        check_exact_keys(expected, state_dict, str(source), exactly_as)
    check_filled(state_dict, expected, source, type(reference).__name__, optional=reference._is_head_key)


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
            copy_processor_config(source, staging, converter.PROCESSOR_TYPE, hub_kwargs)
        for name in getattr(converter, "COPIED_FILES", ()):
            file = cached_file(source, name, _raise_exceptions_for_missing_entries=False, **hub_kwargs)
            if file is not None:
                shutil.copyfile(file, staging / name)
        if hasattr(converter, "finish_folder"):  # e.g. fill in what older source folders leave implicit
            converter.finish_folder(staging, config_dict)
        add_remote_code(staging)  # as save_pretrained writes it (hf_xcv.remote_code)
    return dropped
