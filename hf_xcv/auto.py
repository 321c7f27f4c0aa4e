"""The registration of every hf_xcv model family with transformers' Auto classes.

Importing this module imports each family of :data:`hf_xcv.models.FAMILIES`, which adds its entry to
:data:`hf_xcv.registry.MODEL_TYPES`; :func:`register_auto_classes` then makes every entry loadable through
``AutoConfig`` / ``AutoModel*`` / ``AutoBackbone`` / ``AutoImageProcessor`` / ``AutoTokenizer``.
"""

from __future__ import annotations

import importlib

from transformers import (
    AutoBackbone,
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForImageToImage,
    AutoModelForObjectDetection,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)
from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING

from .models import FAMILIES
from .registry import MODEL_TYPES, PIPELINE_TAGS, ModelEntry, auto_class_name, pipeline_tag

for _family in FAMILIES:
    importlib.import_module(f"{__package__}.models.{_family}")

# The Auto classes hf_xcv registers task models with, by name (the keys of ModelEntry.heads).
AUTO_CLASSES = {
    "AutoModelForImageClassification": AutoModelForImageClassification,
    "AutoModelForImageToImage": AutoModelForImageToImage,
    "AutoModelForObjectDetection": AutoModelForObjectDetection,
    "AutoModelForSeq2SeqLM": AutoModelForSeq2SeqLM,
    "AutoModelForSequenceClassification": AutoModelForSequenceClassification,
    "AutoModelForCausalLM": AutoModelForCausalLM,
}


def register_auto_classes() -> None:
    """Make every hf_xcv model loadable through AutoConfig / AutoModel* / AutoImageProcessor / AutoTokenizer."""
    for model_type, entry in MODEL_TYPES.items():
        AutoConfig.register(model_type, entry.config, exist_ok=True)
        AutoModel.register(entry.config, entry.base_model, exist_ok=True)
        for auto_name, model_class in entry.heads.items():
            AUTO_CLASSES[auto_name].register(entry.config, model_class, exist_ok=True)
        if entry.backbone is not None:
            AutoBackbone.register(entry.config, entry.backbone, exist_ok=True)
        if entry.image_processor is not None:
            # Registered on the mapping itself: AutoImageProcessor.register matches configs by class name and
            # would merge in transformers' processors of the same-named ViTConfig.
            IMAGE_PROCESSOR_MAPPING.register(entry.config, {"pil": entry.image_processor}, exist_ok=True)
        if entry.tokenizer is not None:
            AutoTokenizer.register(entry.config, fast_tokenizer_class=entry.tokenizer, exist_ok=True)


__all__ = [
    "AUTO_CLASSES",
    "MODEL_TYPES",
    "PIPELINE_TAGS",
    "ModelEntry",
    "auto_class_name",
    "pipeline_tag",
    "register_auto_classes",
]
