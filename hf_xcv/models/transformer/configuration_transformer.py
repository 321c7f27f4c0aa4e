"""Configuration of the vanilla Transformer (Vaswani et al. 2017, "Attention Is All You Need")."""

from __future__ import annotations

from typing import Any

from ...configuration_utils import XcvConfig, check_activation, check_attention, check_attention_serves
from ...layers import SINUSOIDAL_LAYOUTS
from ...utils.checks import check_bool, check_choice, check_int, check_positive_float, check_probability
from ...utils.errors import UsageError

POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned")
# What the encoder-decoder asks of its attention core: padded sources, the causal decoder, attention over the
# encoder output (the models declare it too).
TRANSFORMER_ATTENTION_REQUESTS = {"padding_mask": True, "causal": True, "cross_attention": True}
_FLAGS = ("share_encoder_decoder_embeddings", "tie_word_embeddings", "scale_embedding", "normalize_before")
_FLAGS += ("lm_head_bias", "use_cache")
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


class TransformerConfig(XcvConfig):
    r"""Configuration of an encoder-decoder Transformer. Defaults are the paper's base model (Table 3).

    Field names follow transformers' encoder-decoder configs (Marian, BART).

    Args:
        vocab_size: size of the source vocabulary (the joint one when ``share_encoder_decoder_embeddings``).
        decoder_vocab_size: size of the target vocabulary; None for the same as ``vocab_size``.
        share_encoder_decoder_embeddings: one token-embedding matrix for source and target (a joint
            vocabulary); needs ``decoder_vocab_size == vocab_size``.
        tie_word_embeddings: the output projection reuses the target token embeddings (the paper's
            weight sharing, Section 3.4).
        d_model: width of every token representation.
        encoder_layers / decoder_layers: number of blocks in each stack.
        encoder_attention_heads / decoder_attention_heads: heads per attention layer; must divide ``d_model``.
        encoder_ffn_dim / decoder_ffn_dim: hidden width of the feed-forward blocks.
        activation_function: activation of the feed-forward blocks (``relu`` in the paper, ``swish`` in Marian).
        dropout: residual dropout (after every sub-layer and on the embeddings), 0.1 in the paper.
        attention_dropout: dropout on the attention probabilities.
        activation_dropout: dropout after the feed-forward activation.
        max_position_embeddings: longest source or target sequence the model accepts.
        position_embedding_type: ``"sinusoidal"`` (fixed, the paper) or ``"learned"``.
        sinusoidal_layout: ``"interleaved"`` (sin/cos alternating, the paper's formula) or ``"half"``
            (all sines then all cosines, as Marian, fairseq and tensor2tensor).
        scale_embedding: multiply token embeddings by sqrt(d_model) (Section 3.4).
        normalize_before: pre-LN blocks (LayerNorm inside the residual branch, plus a final LayerNorm per
            stack) instead of the paper's post-LN.
        layer_norm_eps: epsilon of every LayerNorm.
        lm_head_bias: a bias on the output projection (Marian checkpoints carry one).
        label_smoothing: label smoothing of the training loss, 0.1 in the paper (Section 5.4).
        init_std: std of the normal initialisation of Linear and Embedding weights.
        attention_type / attention_kwargs: the attention core of every attention layer, from the hf_xcv
            registry; it must serve padding masks, causal masking and cross-attention.
        use_cache: let the decoder keep keys and values of earlier steps during generation.
    """

    model_type = "xcv_transformer"
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 37000
    decoder_vocab_size: int | None = None
    share_encoder_decoder_embeddings: bool = True
    tie_word_embeddings: bool = True
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    max_position_embeddings: int = 1024
    position_embedding_type: str = "sinusoidal"
    sinusoidal_layout: str = "interleaved"
    scale_embedding: bool = True
    normalize_before: bool = False
    layer_norm_eps: float = 1e-5
    lm_head_bias: bool = False
    label_smoothing: float = 0.1
    init_std: float = 0.02
    attention_type: str = "full"
    attention_kwargs: dict[str, Any] | None = None
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 1

    def __post_init__(self, **kwargs: Any) -> None:
        if self.attention_kwargs is None:
            self.attention_kwargs = {}
        if self.decoder_vocab_size is None:
            self.decoder_vocab_size = self.vocab_size
        super().__post_init__(**kwargs)

    def check(self) -> None:
        for name in (
            "vocab_size",
            "decoder_vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "max_position_embeddings",
        ):
            check_int(name, getattr(self, name))
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name):
                raise UsageError(f"d_model={self.d_model} is not divisible by {name}={getattr(self, name)}")
        for name in _FLAGS:
            check_bool(name, getattr(self, name))
        if self.share_encoder_decoder_embeddings and self.decoder_vocab_size != self.vocab_size:
            raise UsageError(
                f"share_encoder_decoder_embeddings=True needs decoder_vocab_size == vocab_size, got "
                f"{self.decoder_vocab_size} != {self.vocab_size}; set share_encoder_decoder_embeddings=False "
                "for separate vocabularies"
            )
        check_activation("activation_function", self.activation_function)
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            check_probability(name, getattr(self, name))
        check_choice("position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES)
        check_choice("sinusoidal_layout", self.sinusoidal_layout, SINUSOIDAL_LAYOUTS)
        check_positive_float("layer_norm_eps", self.layer_norm_eps)
        check_positive_float("init_std", self.init_std)
        self._check_token_ids()
        check_attention(
            self.attention_type,
            self.attention_kwargs,
            self.attention_dropout,
            self.encoder_attention_heads,
            self.d_model,
        )
        check_attention_serves(self.attention_type, TRANSFORMER_ATTENTION_REQUESTS, "an encoder-decoder")

    def _check_token_ids(self) -> None:
        for name in _TOKEN_IDS:
            value = getattr(self, name)
            if value is None:
                if name in ("pad_token_id", "decoder_start_token_id"):
                    raise UsageError(f"{name} must be set: the model pads and starts decoding with it")
                continue
            check_int(name, value, minimum=0)
            # the pad id pads sources and targets; the others are target tokens
            sizes = {"vocab_size": self.vocab_size} if name == "pad_token_id" else {}
            sizes["decoder_vocab_size"] = self.decoder_vocab_size
            for field, size in sizes.items():
                if value >= size:
                    raise UsageError(f"{name}={value} is outside the vocabulary ({field}={size})")
