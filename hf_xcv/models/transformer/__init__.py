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
        card_fields=(
            "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
            "encoder_ffn_dim", "decoder_ffn_dim", "dropout", "label_smoothing", "position_embedding_type",
            "normalize_before", "attention_type",
        ),  # fmt: skip
    )
)

__all__ = [
    "TransformerConfig",
    "TransformerForConditionalGeneration",
    "TransformerModel",
    "TransformerPreTrainedModel",
    "shift_tokens_right",
]
