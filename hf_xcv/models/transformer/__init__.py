"""The vanilla Transformer (Vaswani et al. 2017) for translation and other sequence-to-sequence tasks."""

from .configuration_transformer import TransformerConfig
from .modeling_transformer import (
    TransformerForConditionalGeneration,
    TransformerModel,
    TransformerPreTrainedModel,
    shift_tokens_right,
)

__all__ = [
    "TransformerConfig",
    "TransformerForConditionalGeneration",
    "TransformerModel",
    "TransformerPreTrainedModel",
    "shift_tokens_right",
]
