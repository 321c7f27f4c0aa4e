"""The vanilla Transformer (Vaswani et al. 2017) for translation and other sequence-to-sequence tasks."""

from ...registry import ModelEntry, register_model_type
from .configuration_transformer import TransformerConfig
from .modeling_transformer import (
    TransformerForConditionalGeneration,
    TransformerModel,
    TransformerPreTrainedModel,
    shift_tokens_right,
)
from .presets import PRESETS
from .tokenization_transformer import TransformerTokenizerFast

ENTRY = register_model_type(
    ModelEntry(
        config=TransformerConfig,
        base_model=TransformerModel,
        heads={"AutoModelForSeq2SeqLM": TransformerForConditionalGeneration},
        tokenizer=TransformerTokenizerFast,
        presets=PRESETS,
        converters={"marian": "hf_xcv.conversion.marian"},
        exporter="hf_xcv.conversion.marian",
        conversion_formats=("marian",),
    )
)

__all__ = [
    "TransformerConfig",
    "TransformerForConditionalGeneration",
    "TransformerModel",
    "TransformerPreTrainedModel",
    "shift_tokens_right",
]
