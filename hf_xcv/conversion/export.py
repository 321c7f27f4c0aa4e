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
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import transformers
import yaml
from huggingface_hub import ModelCard
from transformers.utils import cached_file

from ..registry import find_exporter
from ..version import __version__
from .checkpoint_io import atomic_directory, load_config_dict, load_state_dict
from .inverse import transformers_model

# Files a translation folder takes along (a converted Marian folder has Marian's tokenizer files; one trained
# with hf_xcv has tokenizer.json, which PreTrainedTokenizerFast loads).
_TEXT_FILES = (
    "source.spm", "target.spm", "vocab.json", "target_vocab.json", "tokenizer_config.json",
    "special_tokens_map.json", "tokenizer.json", "generation_config.json",
)  # fmt: skip


# The "Use without hf_xcv" section of a card: between the markers hf_xcv.model_card writes, or, in a card written by
# hand, from its heading to the next one.
_USE_WITHOUT = re.compile(
    r"<!-- hf_xcv:use-without -->.*?<!-- /hf_xcv:use-without -->\n?|^## Use without hf_xcv\n.*?(?=^## |\Z)",
    re.DOTALL | re.MULTILINE,
)


def build_transformers_model(
    config_dict: dict[str, Any], state_dict: dict[str, torch.Tensor], model_kwargs: dict[str, Any] | None = None
) -> torch.nn.Module:
    """transformers' own model for ``config_dict`` (its ``architectures``; built with ``model_kwargs``, e.g. a bare
    ViT without its pooler), holding exactly ``state_dict``."""
    model = transformers_model(config_dict, model_kwargs)
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"the exported weights do not fill {type(model).__name__}: missing {sorted(missing)[:8]}, "
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
            settings.pop("auto_map", None)  # hf_xcv's remote code: the export is transformers' own class
            if hasattr(exporter, "export_processor"):
                settings = exporter.export_processor(settings)
            settings["image_processor_type"] = exporter.EXPORTED_PROCESSOR_TYPE
            (staging / "preprocessor_config.json").write_text(json.dumps(settings, indent=2, sort_keys=True))
        if hasattr(exporter, "EXPORTED_TOKENIZER_CLASS"):
            _copy_text_files(source, staging, exporter.EXPORTED_TOKENIZER_CLASS, hub_kwargs)
        write_exported_card(source, staging, config_dict["model_type"], target_config, hub_kwargs)


def write_exported_card(
    source: Any, staging: Path, source_type: str, target_config: dict[str, Any], hub_kwargs: dict[str, Any]
) -> None:
    """The exported folder's README.md: the source's card, its metadata (results, datasets, license) kept, under a
    header that says the folder was exported, from what, and how transformers loads it; a short card of its own when
    the source has none."""
    file = cached_file(source, "README.md", _raise_exceptions_for_missing_entries=False, **hub_kwargs)
    card = ModelCard.load(file) if file is not None else ModelCard("---\n---\n")
    metadata = card.data.to_dict()
    tags = [tag for tag in metadata.get("tags") or [] if tag != source_type]
    metadata.update(library_name="transformers", tags=[*tags, target_config["model_type"], "exported-from-hf_xcv"])
    architecture = target_config["architectures"][0]
    header = (
        f"> Exported from `{source}` (hf_xcv `{source_type}`, hf_xcv {__version__}) to transformers' own "
        f"`{target_config['model_type']}` with `hf-xcv-convert to-transformers`: every weight mapped by name, nothing "
        f"approximated. It loads with transformers alone (`transformers.{architecture}.from_pretrained(...)`, the Auto "
        "classes and `pipeline`); the results below were measured with the hf_xcv model it was exported from.\n"
    )
    # the source's own "Use without hf_xcv" section tells how to export it: this folder is the export
    body = _USE_WITHOUT.sub("", card.text) if file is not None else "\n"
    ModelCard(f"---\n{yaml.safe_dump(metadata, sort_keys=False)}---\n\n{header}{body}").save(staging / "README.md")


def _copy_text_files(source: Any, staging: Path, tokenizer_class: str, hub_kwargs: dict[str, Any]) -> None:
    for name in _TEXT_FILES:
        file = cached_file(source, name, _raise_exceptions_for_missing_entries=False, **hub_kwargs)
        if file is not None:
            shutil.copyfile(file, staging / name)
    config_file = staging / "tokenizer_config.json"
    if config_file.exists():
        settings = json.loads(config_file.read_text())
        settings.pop("auto_map", None)  # hf_xcv's remote code: the export is transformers' own class
        if not hasattr(transformers, str(settings.get("tokenizer_class"))):  # hf_xcv's own: transformers' generic
            settings["tokenizer_class"] = tokenizer_class
        config_file.write_text(json.dumps(settings, indent=2, sort_keys=True))
