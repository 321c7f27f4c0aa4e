"""Writing hf_xcv checkpoints in transformers' own format, where transformers has the architecture (ViT as
``vit``, a Marian-compatible Transformer as ``marian``), so that a model trained with hf_xcv can be published
for people who only have transformers.

:func:`export_checkpoint` reads an hf_xcv folder or Hub repo, maps config and weights with the pure
``export(config, state_dict)`` of the mapping module its family names (:attr:`hf_xcv.registry.ModelEntry.exporter`;
its optional ``model_kwargs(config, state_dict)`` are the arguments transformers' class is built with), loads them
into transformers' own model class (every weight accounted for, strictly) and saves that, with the processor or
tokenizer files transformers needs, atomically.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers.utils import cached_file

from ..registry import find_exporter
from .checkpoint_io import atomic_directory, load_config_dict, load_state_dict

# Files a translation folder takes along (a converted Marian folder has Marian's tokenizer files; one trained
# with hf_xcv has tokenizer.json, which PreTrainedTokenizerFast loads).
_TEXT_FILES = (
    "source.spm", "target.spm", "vocab.json", "target_vocab.json", "tokenizer_config.json",
    "special_tokens_map.json", "tokenizer.json", "generation_config.json",
)  # fmt: skip


def build_transformers_model(
    config_dict: dict[str, Any], state_dict: dict[str, torch.Tensor], model_kwargs: dict[str, Any] | None = None
) -> torch.nn.Module:
    """transformers' own model for ``config_dict`` (its ``architectures``; built with ``model_kwargs``, e.g. a bare
    ViT without its pooler), holding exactly ``state_dict``."""
    config_dict = dict(config_dict)
    config = transformers.AutoConfig.for_model(config_dict.pop("model_type"), **config_dict)
    model_class = getattr(transformers, config.architectures[0])
    model = model_class(config, **(model_kwargs or {}))
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"the exported weights do not fill {model_class.__name__}: missing {sorted(missing)[:8]}, "
            f"left over {sorted(unexpected)[:8]}"
        )
    return model.eval()


def export_checkpoint(
    source: str | os.PathLike, output_dir: str | os.PathLike, overwrite: bool = False, **hub_kwargs: Any
) -> None:
    """Write the hf_xcv checkpoint at ``source`` to ``output_dir`` in transformers' format (see the module
    docstring); the folder appears complete or not at all."""
    config_dict = load_config_dict(source, **hub_kwargs)
    exporter = find_exporter(config_dict.get("model_type"))
    target_config, target_state_dict = exporter.export(config_dict, load_state_dict(source, **hub_kwargs))
    model_kwargs = exporter.model_kwargs(target_config, target_state_dict) if hasattr(exporter, "model_kwargs") else {}
    model = build_transformers_model(target_config, target_state_dict, model_kwargs)
    with atomic_directory(output_dir, overwrite=overwrite) as staging:
        model.save_pretrained(staging)
        processor = cached_file(
            source, "preprocessor_config.json", _raise_exceptions_for_missing_entries=False, **hub_kwargs
        )
        if processor is not None and hasattr(exporter, "EXPORTED_PROCESSOR_TYPE"):
            settings = json.loads(Path(processor).read_text())
            settings["image_processor_type"] = exporter.EXPORTED_PROCESSOR_TYPE
            (staging / "preprocessor_config.json").write_text(json.dumps(settings, indent=2, sort_keys=True))
        if hasattr(exporter, "EXPORTED_TOKENIZER_CLASS"):
            _copy_text_files(source, staging, exporter.EXPORTED_TOKENIZER_CLASS, hub_kwargs)


def _copy_text_files(source: Any, staging: Path, tokenizer_class: str, hub_kwargs: dict[str, Any]) -> None:
    for name in _TEXT_FILES:
        file = cached_file(source, name, _raise_exceptions_for_missing_entries=False, **hub_kwargs)
        if file is not None:
            shutil.copyfile(file, staging / name)
    config_file = staging / "tokenizer_config.json"
    if config_file.exists():
        settings = json.loads(config_file.read_text())
        if not hasattr(transformers, str(settings.get("tokenizer_class"))):  # hf_xcv's own: transformers' generic
            settings["tokenizer_class"] = tokenizer_class
            config_file.write_text(json.dumps(settings, indent=2, sort_keys=True))
