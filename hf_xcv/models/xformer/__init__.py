from ...registry import ModelEntry, register_model_type
from .configuration_xformer import XFormerConfig
from .modeling_xformer import (
    XFormerCausalLMOutput,
    XFormerForCausalLM,
    XFormerForSequenceClassification,
    XFormerModel,
    XFormerModelOutput,
    XFormerPreTrainedModel,
)
from .presets import PRESETS

ENTRY = register_model_type(
    ModelEntry(
        config=XFormerConfig,
        base_model=XFormerModel,
        heads={
            "AutoModelForSequenceClassification": XFormerForSequenceClassification,
            "AutoModelForCausalLM": XFormerForCausalLM,
        },
        presets=PRESETS,
    )
)

__all__ = [
    "XFormerCausalLMOutput",
    "XFormerConfig",
    "XFormerForCausalLM",
    "XFormerForSequenceClassification",
    "XFormerModel",
    "XFormerModelOutput",
    "XFormerPreTrainedModel",
]
