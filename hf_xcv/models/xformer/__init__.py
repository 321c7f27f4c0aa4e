from .configuration_xformer import XFormerConfig
from .modeling_xformer import (
    XFormerCausalLMOutput,
    XFormerForCausalLM,
    XFormerForSequenceClassification,
    XFormerModel,
    XFormerModelOutput,
    XFormerPreTrainedModel,
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
