"""Configuration of the generic X-former sequence models: a pre-LN Transformer encoder or decoder around
any attention entry of the hf_xcv registry (Tay et al. 2020, "Efficient Transformers: A Survey")."""

from __future__ import annotations

from typing import Any

from ...attention import available_attention_types, get_attention_class
from ...configuration_utils import XcvConfig, check_activation, check_attention
from ...utils.checks import check_bool, check_choice, check_int, check_positive_float, check_probability
from ...utils.errors import UsageError

POSITION_EMBEDDING_TYPES = ("learned", "sinusoidal", "none")
POOLING_TYPES = ("mean", "first", "last", "pma")


class XFormerConfig(XcvConfig):
    r"""Configuration of :class:`XFormerModel` and its heads.

    One pre-LN block per layer: ``x + Attn(LN(x))`` then ``x + FFN(LN(x))``, a final LayerNorm, and the
    attention core named by ``attention_type``. The defaults are a small base model (512 wide, 6 layers).

    Args:
        vocab_size: number of token ids.
        hidden_size: width of every token representation.
        num_hidden_layers: number of blocks.
        num_attention_heads: heads per attention layer; must divide ``hidden_size``.
        intermediate_size: hidden width of the feed-forward blocks.
        hidden_act: activation of the feed-forward blocks.
        hidden_dropout_prob: dropout on the embeddings and after every sub-layer.
        attention_probs_dropout_prob: dropout on the attention probabilities.
        max_position_embeddings: the longest sequence the position table covers (learned or sinusoidal).
        position_embedding_type: ``"learned"``, ``"sinusoidal"`` or ``"none"``; None picks ``"none"`` for cores
            that encode relative positions themselves (Transformer-XL, Compressive) and ``"learned"`` otherwise.
        layer_norm_eps: epsilon of every LayerNorm.
        initializer_range: std of the normal initialisation of Linear and Embedding weights.
        attention_type / attention_kwargs: the attention core and its settings (``hf_xcv.attention``). The
            sequence models mark no token as special: global-token cores (``longformer``, ``etc``,
            ``bigbird``) use their own ``num_global_tokens`` / global blocks.
        aux_loss_weight: weight of the cores' auxiliary losses (k-means commitment, memory reconstruction)
            in the training loss.
        reversible: reversible residual blocks (Reformer): activations are recomputed in the backward pass
            instead of stored, so memory does not grow with depth.
        feed_forward_chunk_size: apply the feed-forward blocks to this many positions at a time (Reformer's
            chunking; 0 = all at once). Outputs are identical; peak memory is lower.
        pooling: how sequence classification pools the tokens: ``"mean"`` over real tokens, the ``"first"``
            or ``"last"`` real token, or ``"pma"`` (Set Transformer's pooling by multi-head attention).
        classifier_dropout: dropout before the classification layer.
        tie_word_embeddings: the language-model head reuses the token embeddings.
        use_cache: keep keys and values of earlier steps during generation (``full`` attention only; other
            cores recompute the prefix).
    """

    model_type = "xcv_xformer"
    keys_to_ignore_at_inference = ["mems", "past_key_values"]

    vocab_size: int = 32000
    hidden_size: int = 512
    num_hidden_layers: int = 6
    num_attention_heads: int = 8
    intermediate_size: int = 2048
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 4096
    position_embedding_type: str | None = None
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02
    attention_type: str = "full"
    attention_kwargs: dict[str, Any] | None = None
    aux_loss_weight: float = 1.0
    reversible: bool = False
    feed_forward_chunk_size: int = 0
    pooling: str = "mean"
    classifier_dropout: float = 0.0
    tie_word_embeddings: bool = True
    use_cache: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2

    def __post_init__(self, **kwargs: Any) -> None:
        if self.attention_kwargs is None:
            self.attention_kwargs = {}
        if self.position_embedding_type is None and self.attention_type in available_attention_types():
            relative = get_attention_class(self.attention_type).capabilities.relative_positions
            self.position_embedding_type = "none" if relative else "learned"
        super().__post_init__(**kwargs)

    def check(self) -> None:
        check_attention(
            self.attention_type,
            self.attention_kwargs,
            self.attention_probs_dropout_prob,
            self.num_attention_heads,
            self.hidden_size,
        )
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            check_int(name, getattr(self, name))
        if self.hidden_size % self.num_attention_heads:
            raise UsageError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}"
            )
        check_activation("hidden_act", self.hidden_act)
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            check_probability(name, getattr(self, name))
        check_choice("position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES)
        check_positive_float("layer_norm_eps", self.layer_norm_eps)
        check_positive_float("initializer_range", self.initializer_range)
        if not isinstance(self.aux_loss_weight, (int, float)) or isinstance(self.aux_loss_weight, bool):
            raise UsageError(f"aux_loss_weight must be a number, got {self.aux_loss_weight!r}")
        if self.aux_loss_weight < 0:
            raise UsageError(f"aux_loss_weight must be >= 0, got {self.aux_loss_weight}")
        for name in ("reversible", "tie_word_embeddings", "use_cache"):
            check_bool(name, getattr(self, name))
        if isinstance(self.feed_forward_chunk_size, bool) or not isinstance(self.feed_forward_chunk_size, int):
            raise UsageError(f"feed_forward_chunk_size must be an int >= 0, got {self.feed_forward_chunk_size!r}")
        if self.feed_forward_chunk_size < 0:
            raise UsageError(
                f"feed_forward_chunk_size must be >= 0 (0 = no chunking), got {self.feed_forward_chunk_size}"
            )
        check_choice("pooling", self.pooling, POOLING_TYPES)
        caps = get_attention_class(self.attention_type).capabilities
        if caps.needs_grid:
            raise UsageError(
                f"attention_type={self.attention_type!r} needs a 2-D token grid, which a sequence model does not "
                "have; use it in ViT"
            )
        if self.reversible and caps.stateful:
            raise UsageError(
                f"reversible=True cannot carry the memory of attention_type={self.attention_type!r}: a reversible "
                "block recomputes its attention in the backward pass; use reversible=False"
            )
