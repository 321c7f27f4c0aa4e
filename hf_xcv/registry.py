"""The table of hf_xcv's model types, filled by the model families themselves.

Each family's package (``hf_xcv/models/<family>/__init__.py``) declares one :class:`ModelEntry` with
:func:`register_model_type` when it is imported: its config and model classes, processor or tokenizer, named
presets, the checkpoints of other libraries it converts, its export to transformers' own format and the training
recipe of its paper. :mod:`hf_xcv.auto` imports every family of :data:`hf_xcv.models.FAMILIES` and registers the
entries with transformers' Auto classes.

The table lives here, at the bottom of the package, so that what serves every model (loading with conversion on the
fly, model cards, presets, the command-line programs) reads it without importing a family: a family adds itself,
and nothing else names it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .utils.errors import UsageError

# The pipeline task of each Auto class a task model registers with (ModelEntry.heads' keys); a bare model
# extracts features, a backbone feeds a dense-prediction model.
PIPELINE_TAGS = {
    "AutoModelForImageClassification": "image-classification",
    "AutoModelForImageToImage": "image-to-image",
    "AutoModelForObjectDetection": "object-detection",
    "AutoModelForSeq2SeqLM": "translation",
    "AutoModelForSequenceClassification": "text-classification",
    "AutoModelForCausalLM": "text-generation",
}


@dataclass(frozen=True)
class TrainingRecipe:
    """What a paper's training sets, for the options a user leaves unset, and what a model card says of it.

    Attributes:
        name: the architecture as its paper names it ("Deformable DETR").
        paper: the citation ("Zhu et al. 2020").
        defaults: training-script options and their values (``{"learning_rate": 2e-4, ...}``); a script applies
            those it has to every option left unset.
        notes: further facts a script or card reads (how detections are scored, a training mode).
    """

    name: str
    paper: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Preset:
    """A named configuration with the figures published for it.

    Attributes:
        model_type: the hf_xcv model type it configures.
        config: the config fields it sets (the rest are the config's defaults).
        reference: the paper and what it reports for this configuration.
        params: the parameter count as published.
        extra: further facts about the preset.
        recipe: the training settings that go with it, where they belong to the preset rather than the family
            (the Long Range Arena tasks' batch sizes and step budgets).
    """

    model_type: str
    config: dict[str, Any]
    reference: str = ""
    params: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    recipe: TrainingRecipe | None = None


@dataclass(frozen=True)
class ModelEntry:
    """Everything hf_xcv registers for one model type.

    Attributes:
        config, base_model, heads (Auto class name -> task model class), backbone (for AutoBackbone: feature maps
            for dense prediction, no task), image_processor, tokenizer: what the Auto classes resolve.
        adapter_module_names: for a type without attention projections, the modules that take the part of
            hf_xcv's standard adapter targets (``{"q_proj": "conv1", ...}``): peft's defaults name them instead.
        presets: the family's named configurations (name -> :class:`Preset`).
        converters: checkpoints of other libraries the type takes: their ``model_type`` -> the pure mapping module
            of :mod:`hf_xcv.conversion` (``{"vit": "hf_xcv.conversion.vit"}``); ``from_pretrained`` converts them on
            load and ``hf-xcv-convert`` writes them.
        exporter: the mapping module whose ``export_config`` / ``export`` write the type in transformers' own
            format (``hf-xcv-convert to-transformers``), if transformers has the architecture.
        conversion_formats: the ``hf-xcv-convert <format>`` programs the family adds; the program of ``a-b`` is
            ``hf_xcv.cli.convert_a_b`` (a checkout's wrapper ``conversion/a_b.py``).
        recipe: the training recipe of the family's paper (the defaults of its training script's unset options).
        card_fields: the config fields a model card's table shows (where a family has none of its own, the vision
            fields it has: image and patch size, width, depth, heads, MLP width, pooling, attention).
        pipelines: custom pipeline tasks of the type's task models -> the import path of hf_xcv's pipeline class
            (``{"image-to-image": "hf_xcv.pipelines.ImageRestorationPipeline"}``): saved configs name them in
            ``custom_pipelines``, so ``transformers.pipeline(model=folder)`` finds them (:mod:`hf_xcv.remote_code`).
    """

    config: type
    base_model: type
    heads: dict[str, type] = field(default_factory=dict)
    image_processor: type | None = None
    tokenizer: type | None = None
    backbone: type | None = None
    adapter_module_names: dict[str, str] = field(default_factory=dict)
    presets: dict[str, Preset] = field(default_factory=dict)
    converters: dict[str, str] = field(default_factory=dict)
    exporter: str | None = None
    conversion_formats: tuple[str, ...] = ()
    recipe: TrainingRecipe | None = None
    card_fields: tuple[str, ...] = (
        "image_size", "patch_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "pooling", "attention_type",
    )  # fmt: skip
    pipelines: dict[str, str] = field(default_factory=dict)

    @property
    def model_type(self) -> str:
        return self.config.model_type

    @property
    def model_classes(self) -> list[type]:
        """The bare model, every task model and the backbone, if any."""
        return [self.base_model, *self.heads.values(), *([self.backbone] if self.backbone else [])]

    def model_class(self, architectures: list[str] | None) -> type:
        """The class a saved config's ``architectures`` names among this type's (the bare model by default)."""
        classes = {cls.__name__: cls for cls in self.model_classes}
        return next((classes[name] for name in architectures or () if name in classes), self.base_model)


MODEL_TYPES: dict[str, ModelEntry] = {}


def register_model_type(entry: ModelEntry) -> ModelEntry:
    """Add a family's entry to :data:`MODEL_TYPES` and return the registered one (one per model type: an equal
    declaration changes nothing, another is refused; its presets' names must be new)."""
    model_type = entry.model_type
    for name, preset in entry.presets.items():
        if preset.model_type != model_type:
            raise ValueError(f"preset {name!r} of {model_type} makes a {preset.model_type} model")
        owner = next((t for t, e in MODEL_TYPES.items() if name in e.presets and t != model_type), None)
        if owner is not None:
            raise ValueError(f"preset {name!r} of {model_type} is a preset of {owner} already")
    if model_type in MODEL_TYPES:
        if MODEL_TYPES[model_type] != entry:
            raise ValueError(f"model_type {model_type!r} is registered already")
        return MODEL_TYPES[model_type]  # declared again (a family's package imported again): nothing changes
    MODEL_TYPES[model_type] = entry
    return entry


def find_converter(target_model_type: str, source_model_type: str | None) -> ModuleType | None:
    """The mapping module that converts ``source_model_type`` checkpoints for ``target_model_type``, or None."""
    entry = MODEL_TYPES.get(target_model_type)
    name = entry.converters.get(source_model_type) if entry is not None and source_model_type else None
    return importlib.import_module(name) if name else None


def convertible_sources(target_model_type: str) -> list[str]:
    """The model types whose checkpoints ``target_model_type`` converts."""
    entry = MODEL_TYPES.get(target_model_type)
    return sorted(entry.converters) if entry is not None else []


def converted_types() -> dict[str, str]:
    """Every model type hf_xcv takes a checkpoint of -> the hf_xcv type it loads as (its own types included)."""
    types = {model_type: model_type for model_type in MODEL_TYPES}
    for model_type, entry in MODEL_TYPES.items():
        types.update({source: model_type for source in entry.converters})
    return types


def exported_types() -> list[str]:
    """The hf_xcv model types that export to transformers' own format."""
    return sorted(t for t, entry in MODEL_TYPES.items() if entry.exporter)


def find_exporter(model_type: str | None) -> ModuleType:
    """The mapping module that writes ``model_type`` in transformers' format; ValueError naming the exported types
    for any other."""
    entry = MODEL_TYPES.get(model_type) if model_type else None
    if entry is None or not entry.exporter:
        raise UsageError(
            f"model_type {model_type!r} has no transformers format to export to; exported types: {exported_types()}"
        )
    return importlib.import_module(entry.exporter)


def conversion_programs() -> dict[str, str]:
    """``hf-xcv-convert``'s formats -> their programs: each family's formats, and ``to-transformers`` when any type
    exports."""
    formats = [fmt for entry in MODEL_TYPES.values() for fmt in entry.conversion_formats]
    programs = {fmt: "hf_xcv.cli.convert_" + fmt.replace("-", "_") for fmt in formats}
    if exported_types():
        programs["to-transformers"] = "hf_xcv.cli.export_to_transformers"
    return programs


def auto_class_name(model_class: type) -> str:
    """The Auto class that loads ``model_class`` (``AutoModel`` for a bare model)."""
    for entry in MODEL_TYPES.values():
        if model_class is entry.backbone:
            return "AutoBackbone"
        for auto_name, head in entry.heads.items():
            if head is model_class:
                return auto_name
    return "AutoModel"


def pipeline_tag(model_class: type) -> str:
    """The Hub's pipeline tag for ``model_class``."""
    return PIPELINE_TAGS.get(auto_class_name(model_class), "feature-extraction")
