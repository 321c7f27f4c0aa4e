"""The one table of hf_xcv model types, and their registration with transformers' Auto classes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
    PretrainedConfig,
)
from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING

from .models.deformable_detr import (
    DeformableDetrConfig,
    DeformableDetrForObjectDetection,
    DeformableDetrModel,
    XcvDeformableDetrImageProcessor,
)
from .models.detr import DetrConfig, DetrForObjectDetection, DetrModel, XcvDetrImageProcessor
from .models.detr.modeling_detr import detr_dummy_inputs
from .models.ipt import IPTConfig, IPTForImageRestoration, IPTImageProcessor, IPTModel
from .models.ipt.modeling_ipt import ipt_dummy_inputs
from .models.swin import SwinBackbone, SwinConfig, SwinForImageClassification, SwinModel, XcvSwinImageProcessor
from .models.swin.modeling_swin import swin_dummy_inputs
from .models.transformer import TransformerConfig, TransformerForConditionalGeneration, TransformerModel
from .models.transformer.modeling_transformer import transformer_dummy_inputs
from .models.transformer.tokenization_transformer import TransformerTokenizerFast
from .models.ttsr import TTSRConfig, TTSRForReferenceSuperResolution, TTSRImageProcessor, TTSRModel
from .models.ttsr.modeling_ttsr import TTSR_ADAPTER_MODULES, ttsr_dummy_inputs
from .models.vit import ViTConfig, ViTForImageClassification, ViTModel, XcvViTImageProcessor
from .models.vit.modeling_vit import vit_dummy_inputs
from .models.xformer import XFormerConfig, XFormerForCausalLM, XFormerForSequenceClassification, XFormerModel
from .models.xformer.modeling_xformer import xformer_dummy_inputs


@dataclass(frozen=True)
class ModelEntry:
    """Everything hf_xcv registers for one model_type, and what the registry-driven tests need to check it.

    Attributes:
        config, base_model, heads (Auto class name -> task model class), backbone (for AutoBackbone: feature maps
            for dense prediction, no task), image_processor, tokenizer: what the Auto classes resolve.
        test_preset: the tiny preset the registry-driven tests build.
        dummy_inputs: ``dummy_inputs(model, *, batch=2, labels=True, padded=True) -> dict`` of forward keyword
            arguments for any model of the type (labels for its task when ``labels``; padding where the inputs
            have any when ``padded``). Any kind of input goes: pixels, token ids, masks, lists of box
            dictionaries, a task name.
        attention_test_overrides: config overrides under which every parameter of a task model gets a
            gradient with any attention entry (e.g. ViT pools by mean: with [CLS] pooling, the last layer's
            patch tokens rightly feed nothing, and a core's part that only they reach gets no gradient).
        adapter_module_names: for a type without attention projections, the modules that take the part of
            hf_xcv's standard adapter targets (``{"q_proj": "conv1", ...}``): peft's defaults name them instead.
    """

    config: type[PretrainedConfig]
    base_model: type
    heads: dict[str, type] = field(default_factory=dict)
    image_processor: type | None = None
    tokenizer: type | None = None
    backbone: type | None = None
    test_preset: str = ""
    dummy_inputs: Callable[..., dict[str, Any]] | None = None
    attention_test_overrides: dict[str, Any] = field(default_factory=dict)
    adapter_module_names: dict[str, str] = field(default_factory=dict)

    @property
    def model_type(self) -> str:
        return self.config.model_type

    @property
    def model_classes(self) -> list[type]:
        """The bare model, every task model and the backbone, if any."""
        return [self.base_model, *self.heads.values(), *([self.backbone] if self.backbone else [])]


MODEL_TYPES: dict[str, ModelEntry] = {
    entry.model_type: entry
    for entry in [
        ModelEntry(
            config=ViTConfig,
            base_model=ViTModel,
            heads={"AutoModelForImageClassification": ViTForImageClassification},
            image_processor=XcvViTImageProcessor,
            test_preset="vit-test-tiny",
            dummy_inputs=vit_dummy_inputs,
            attention_test_overrides={"pooling": "mean"},
        ),
        ModelEntry(
            config=SwinConfig,
            base_model=SwinModel,
            heads={"AutoModelForImageClassification": SwinForImageClassification},
            backbone=SwinBackbone,
            image_processor=XcvSwinImageProcessor,
            test_preset="swin-test-tiny",
            dummy_inputs=swin_dummy_inputs,
        ),
        ModelEntry(
            config=DetrConfig,
            base_model=DetrModel,
            heads={"AutoModelForObjectDetection": DetrForObjectDetection},
            image_processor=XcvDetrImageProcessor,
            test_preset="detr-test-tiny",
            dummy_inputs=detr_dummy_inputs,
        ),
        ModelEntry(
            config=DeformableDetrConfig,
            base_model=DeformableDetrModel,
            heads={"AutoModelForObjectDetection": DeformableDetrForObjectDetection},
            image_processor=XcvDeformableDetrImageProcessor,
            test_preset="deformable-detr-test-tiny",
            dummy_inputs=detr_dummy_inputs,
        ),
        ModelEntry(
            config=TTSRConfig,
            base_model=TTSRModel,
            heads={"AutoModelForImageToImage": TTSRForReferenceSuperResolution},
            image_processor=TTSRImageProcessor,
            test_preset="ttsr-test-tiny",
            dummy_inputs=ttsr_dummy_inputs,
            # the residual blocks' two convolutions (the main network's bulk), for LoRA / IA3 on a conv network
            adapter_module_names=TTSR_ADAPTER_MODULES,
        ),
        ModelEntry(
            config=IPTConfig,
            base_model=IPTModel,
            heads={"AutoModelForImageToImage": IPTForImageRestoration},
            image_processor=IPTImageProcessor,
            test_preset="ipt-test-tiny",
            dummy_inputs=ipt_dummy_inputs,
        ),
        ModelEntry(
            config=TransformerConfig,
            base_model=TransformerModel,
            heads={"AutoModelForSeq2SeqLM": TransformerForConditionalGeneration},
            tokenizer=TransformerTokenizerFast,
            test_preset="transformer-test-tiny",
            dummy_inputs=transformer_dummy_inputs,
        ),
        ModelEntry(
            config=XFormerConfig,
            base_model=XFormerModel,
            heads={
                "AutoModelForSequenceClassification": XFormerForSequenceClassification,
                "AutoModelForCausalLM": XFormerForCausalLM,
            },
            test_preset="xformer-test-tiny",
            dummy_inputs=xformer_dummy_inputs,
        ),
    ]
}

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


# The pipeline task of each Auto class (for model cards); a bare model extracts features.
PIPELINE_TAGS = {
    "AutoModelForImageClassification": "image-classification",
    "AutoModelForImageToImage": "image-to-image",
    "AutoModelForObjectDetection": "object-detection",
    "AutoModelForSeq2SeqLM": "translation",
    "AutoModelForSequenceClassification": "text-classification",
    "AutoModelForCausalLM": "text-generation",
}


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
