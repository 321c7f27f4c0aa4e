"""Remote code: what lets transformers load a saved hf_xcv model, image processor or tokenizer in a process that never
imports hf_xcv, with ``trust_remote_code=True``.

Every save of an hf_xcv config (so of every model: a model saves its config), image processor or tokenizer, to a
folder or through ``push_to_hub``, writes two things beside its files:

* ``<model_type>.py`` (``xcv_vit.py``): a generated module that imports the model type's classes from hf_xcv. It
  holds no model code, so hf_xcv must be installed; transformers checks a remote module's imports before it runs it
  and then names the missing package, ``hf_xcv``, which is also the name to ``pip install``;
* an ``auto_map`` in the JSON file it saves, naming classes of that module: in ``config.json`` the config and every
  model class under its Auto class (``AutoModel``, the task heads' ``AutoModelFor*``, ``AutoBackbone``), in
  ``preprocessor_config.json`` the ``AutoImageProcessor``, in ``tokenizer_config.json`` the ``AutoTokenizer``. A
  config also names the family's custom pipelines (:attr:`hf_xcv.registry.ModelEntry.pipelines`) in
  ``custom_pipelines``, so ``transformers.pipeline(model=folder, trust_remote_code=True)`` finds them.

All of it is read from :data:`hf_xcv.registry.MODEL_TYPES`: a new family gets it without code of its own. An object
does not keep the ``auto_map`` of the folder it was loaded from (a config or image processor drops it, a tokenizer's
is replaced): each save writes the registry's. Where hf_xcv is imported, its own registration with the Auto classes
serves every folder, with or without these files (transformers prefers registered classes that are not its own to a
folder's code), so folders saved before still load as they did.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from .registry import MODEL_TYPES, ModelEntry
from .version import __version__

# The package the generated modules import: its import name is the pip distribution's (pyproject.toml), so
# transformers' "Run `pip install hf_xcv`" is the command that installs it.
PACKAGE = "hf_xcv"
CONFIG_FILE = "config.json"
IMAGE_PROCESSOR_FILE = "preprocessor_config.json"
TOKENIZER_FILE = "tokenizer_config.json"
# What transformers' save_pretrained(..., push_to_hub=True) passes on to the push
_PUSH_KWARGS = ("repo_id", "commit_message", "commit_description", "token", "private", "create_pr", "revision")


def module_name(entry: ModelEntry) -> str:
    """The generated module of a model type: its ``model_type`` (``xcv_vit`` -> ``xcv_vit.py``)."""
    return entry.model_type


def _public_module(cls: type) -> str:
    """The shortest module path that exports ``cls``: ``hf_xcv`` for a class of the package's API, else its family's
    package or the module that defines it."""
    parts = cls.__module__.split(".")
    for end in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:end]))
        if module is not None and getattr(module, cls.__name__, None) is cls:
            return module.__name__
    return cls.__module__


def _classes(entry: ModelEntry) -> list[type]:
    return [cls for cls in (entry.config, *entry.model_classes, entry.image_processor, entry.tokenizer) if cls]


def module_source(entry: ModelEntry) -> str:
    """The text of the generated module of ``entry``: imports of its classes and pipelines from hf_xcv."""
    imports: dict[str, set[str]] = {}
    for cls in _classes(entry):
        imports.setdefault(_public_module(cls), set()).add(cls.__name__)
    for path in entry.pipelines.values():
        module, name = path.rsplit(".", 1)
        cls = getattr(sys.modules.get(module), name, None)  # hf_xcv.pipelines is loaded with hf_xcv
        imports.setdefault(_public_module(cls) if isinstance(cls, type) else module, set()).add(name)
    lines = [
        f'"""Remote code of an hf_xcv model ({entry.model_type}), written by hf_xcv {__version__} with this folder.',
        "",
        "transformers loads the folder with trust_remote_code=True through the classes imported here, which are",
        f"hf_xcv's own: there is no model code in this file. It needs hf_xcv installed: pip install {PACKAGE}",
        '"""',
        "",
    ]
    for module in sorted(imports):
        line = f"from {module} import {', '.join(sorted(imports[module]))}"
        if len(line) > 100:
            line = "\n".join([f"from {module} import (", *(f"    {name}," for name in sorted(imports[module])), ")"])
        lines.append(line)
    return "\n".join(lines) + "\n"


def class_ref(entry: ModelEntry, name: str) -> str:
    """How an ``auto_map`` names class ``name`` of the generated module (``xcv_vit.ViTModel``)."""
    return f"{module_name(entry)}.{name}"


def config_auto_map(entry: ModelEntry) -> dict[str, str]:
    """The ``auto_map`` of a type's ``config.json``: the config, the bare model, each head and the backbone."""
    auto_map = {"AutoConfig": class_ref(entry, entry.config.__name__)}
    auto_map["AutoModel"] = class_ref(entry, entry.base_model.__name__)
    auto_map.update({auto: class_ref(entry, head.__name__) for auto, head in entry.heads.items()})
    if entry.backbone is not None:
        auto_map["AutoBackbone"] = class_ref(entry, entry.backbone.__name__)
    return auto_map


def processor_auto_map(entry: ModelEntry, processor: type) -> dict[str, Any]:
    """The ``auto_map`` of the JSON file a type's image processor or tokenizer saves."""
    if processor is entry.tokenizer:  # [slow, fast]: hf_xcv's tokenizers are fast ones
        return {"AutoTokenizer": [None, class_ref(entry, processor.__name__)]}
    return {"AutoImageProcessor": class_ref(entry, processor.__name__)}


def custom_pipelines(entry: ModelEntry) -> dict[str, dict[str, Any]]:
    """The ``custom_pipelines`` of a type's config: each pipeline of the entry, loaded from the generated module,
    for the Auto classes of its task models."""
    return {
        task: {"impl": class_ref(entry, path.rsplit(".", 1)[1]), "pt": list(entry.heads)}
        for task, path in entry.pipelines.items()
    }


def find_remote_code(obj: Any) -> tuple[ModelEntry, str, dict[str, Any]] | None:
    """(entry, the JSON file ``obj.save_pretrained`` writes, its ``auto_map``) for an hf_xcv config, image processor
    or tokenizer; None for an object of a class hf_xcv has not registered (a subclass of the user's)."""
    for entry in MODEL_TYPES.values():
        if type(obj) is entry.image_processor:
            return entry, IMAGE_PROCESSOR_FILE, processor_auto_map(entry, entry.image_processor)
        if type(obj) is entry.tokenizer:
            return entry, TOKENIZER_FILE, processor_auto_map(entry, entry.tokenizer)
    entry = MODEL_TYPES.get(getattr(obj, "model_type", None) or "")
    if entry is not None and isinstance(obj, entry.config):
        return entry, CONFIG_FILE, config_auto_map(entry)
    return None


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _write_json(path: Path, saved: dict[str, Any]) -> None:
    path.write_text(json.dumps(saved, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def write_remote_code(folder: str | os.PathLike, entry: ModelEntry, json_file: str, auto_map: dict[str, Any]) -> None:
    """Write ``entry``'s generated module into ``folder`` and set ``auto_map`` in its saved ``json_file`` (replacing
    one loaded with the object: the registry's is the one that fits the module)."""
    folder = Path(folder)
    (folder / f"{module_name(entry)}.py").write_text(module_source(entry), encoding="utf-8")
    saved = _read_json(folder / json_file)
    saved["auto_map"] = auto_map
    _write_json(folder / json_file, saved)


def add_remote_code(folder: str | os.PathLike) -> None:
    """Give a folder of an hf_xcv model that was not written by ``save_pretrained`` (a converter's output, a folder
    saved before hf_xcv wrote remote code) what a save writes: the generated module, the ``auto_map`` and custom
    pipelines of its ``config.json``, and the ``auto_map`` of its processor's or tokenizer's file where that is the
    type's own; ValueError for a folder of another model type."""
    folder = Path(folder)
    config = _read_json(folder / CONFIG_FILE)
    entry = MODEL_TYPES.get(config.get("model_type") or "")
    if entry is None:
        raise ValueError(
            f"{folder} holds a {config.get('model_type')!r} model, not one of hf_xcv's {list(MODEL_TYPES)}"
        )
    if entry.pipelines:
        config["custom_pipelines"] = {**config.get("custom_pipelines", {}), **custom_pipelines(entry)}
        _write_json(folder / CONFIG_FILE, config)
    write_remote_code(folder, entry, CONFIG_FILE, config_auto_map(entry))
    saved_as = {IMAGE_PROCESSOR_FILE: ("image_processor_type", entry.image_processor)}
    saved_as[TOKENIZER_FILE] = ("tokenizer_class", entry.tokenizer)
    for json_file, (key, processor) in saved_as.items():
        path = folder / json_file
        if processor is not None and path.is_file() and _read_json(path).get(key) == processor.__name__:
            write_remote_code(folder, entry, json_file, processor_auto_map(entry, processor))


class RemoteCodeMixin:
    """Makes ``save_pretrained`` (and so ``push_to_hub``) of hf_xcv's configs, image processors and tokenizers write
    their remote code (see the module docstring). Put it first among the bases."""

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        found = find_remote_code(self)
        if found is None:
            return super().save_pretrained(save_directory, *args, **kwargs)
        entry, json_file, auto_map = found
        # transformers would upload within its save_pretrained, before the module exists: save, then push
        push = kwargs.pop("push_to_hub", False)
        hub = {key: kwargs.pop(key) for key in _PUSH_KWARGS if push and key in kwargs}
        if json_file == CONFIG_FILE and entry.pipelines:
            # the registry's entries again (transformers.pipeline() puts classes into a loaded config's "pt" lists)
            self.custom_pipelines = {**(getattr(self, "custom_pipelines", None) or {}), **custom_pipelines(entry)}
        result = super().save_pretrained(save_directory, *args, **kwargs)
        prefix = kwargs.get("filename_prefix") if json_file == TOKENIZER_FILE else None
        json_file = f"{prefix}-{json_file}" if prefix else json_file
        if (Path(save_directory) / json_file).is_file():  # not when transformers refused the folder
            write_remote_code(save_directory, entry, json_file, auto_map)
        if push:
            self.push_to_hub(hub.pop("repo_id", Path(save_directory).name), **hub)
        return result

    @classmethod
    def register_for_auto_class(cls, auto_class: Any = None) -> None:
        """Nothing to register: every save writes the ``auto_map`` of hf_xcv's registry. (transformers calls this on
        a class it loaded by remote code; its own registration would make the next save copy hf_xcv's source file
        instead.)"""
