"""The one table of hf_xcv model types, and their registration with transformers' Auto classes."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PretrainedConfig,
)
from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING

from .models.transformer import TransformerConfig, TransformerForConditionalGeneration, TransformerModel
from .models.transformer.tokenization_transformer import TransformerTokenizerFast
from .models.vit import ViTConfig, ViTForImageClassification, ViTImageProcessor, ViTModel
from .models.xformer import XFormerConfig, XFormerForCausalLM, XFormerForSequenceClassification, XFormerModel


@dataclass(frozen=True)
class ModelEntry:
    """Everything hf_xcv registers for one model_type."""

    config: type[PretrainedConfig]
    base_model: type
    heads: dict[str, type] = field(default_factory=dict)  # Auto class name -> model class
    image_processor: type | None = None
    tokenizer: type | None = None
    test_preset: str = ""  # tiny preset the registry-driven tests build

    @property
    def model_type(self) -> str:
        return self.config.model_type


MODEL_TYPES: dict[str, ModelEntry] = {
    entry.model_type: entry
    for entry in [
        ModelEntry(
            config=ViTConfig,
            base_model=ViTModel,
            heads={"AutoModelForImageClassification": ViTForImageClassification},
            image_processor=ViTImageProcessor,
            test_preset="vit-test-tiny",
        ),
        ModelEntry(
            config=TransformerConfig,
            base_model=TransformerModel,
            heads={"AutoModelForSeq2SeqLM": TransformerForConditionalGeneration},
            tokenizer=TransformerTokenizerFast,
            test_preset="transformer-test-tiny",
        ),
        ModelEntry(
            config=XFormerConfig,
            base_model=XFormerModel,
            heads={
                "AutoModelForSequenceClassification": XFormerForSequenceClassification,
                "AutoModelForCausalLM": XFormerForCausalLM,
            },
            test_preset="xformer-test-tiny",
        ),
    ]
}

_AUTO_HEADS = {
    "AutoModelForImageClassification": AutoModelForImageClassification,
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
            _AUTO_HEADS[auto_name].register(entry.config, model_class, exist_ok=True)
        if entry.image_processor is not None:
            # Registered on the mapping itself: AutoImageProcessor.register matches configs by class name and
            # would merge in transformers' processors of the same-named ViTConfig.
            IMAGE_PROCESSOR_MAPPING.register(entry.config, {"pil": entry.image_processor}, exist_ok=True)
        if entry.tokenizer is not None:
            AutoTokenizer.register(entry.config, fast_tokenizer_class=entry.tokenizer, exist_ok=True)
