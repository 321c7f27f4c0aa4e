"""ViT configuration (Dosovitskiy et al. 2020, "An Image is Worth 16x16 Words")."""

from __future__ import annotations

from typing import Any

from ...configuration_utils import XcvConfig, check_activation, check_attention, check_attention_serves
from ...layers import to_pair
from ...utils.checks import check_bool, check_choice, check_int, check_positive_float, check_probability, check_size
from ...utils.errors import UsageError

POOLING_CHOICES = ("cls", "mean")
# What ViT asks of its attention core: bidirectional attention over the patch grid (the models declare it too).
VIT_ATTENTION_REQUESTS = {"grid_available": True}


class ViTConfig(XcvConfig):
    r"""Configuration of a Vision Transformer. Defaults are ViT-B/16 at 224x224.

    Args:
        image_size: input resolution the position embeddings are made for (int or (height, width)).
        patch_size: side of the square patches (int or (height, width)).
        num_channels: channels of the input images.
        hidden_size: width D of the tokens.
        num_hidden_layers: number of encoder blocks.
        num_attention_heads: heads per attention layer; must divide ``hidden_size``.
        intermediate_size: hidden width of the feed-forward block.
        hidden_act: activation of the feed-forward block.
        hidden_dropout_prob: dropout after the embeddings, attention and feed-forward outputs.
        attention_probs_dropout_prob: dropout on the attention probabilities.
        drop_path_rate: stochastic depth, rising linearly to this value over the blocks.
        initializer_range: std of the truncated-normal initialisation.
        layer_norm_eps: epsilon of every LayerNorm.
        qkv_bias: bias on the query/key/value projections.
        pooling: ``"cls"`` (the [CLS] token) or ``"mean"`` (mean over the patch tokens).
        use_cls_token: prepend a learned [CLS] token (required by ``pooling="cls"``).
        representation_size: width of the paper's pre-logits layer (Linear + tanh) before the
            classifier; None for no pre-logits layer. transformers' ``ViTModel`` pooler maps onto it.
        representation_act: activation of the pre-logits layer.
        attention_type: name of the attention core in the hf_xcv registry.
        attention_kwargs: settings of that core.
    """

    model_type = "xcv_vit"

    image_size: int | list[int] | tuple[int, int] = 224
    patch_size: int | list[int] | tuple[int, int] = 16
    num_channels: int = 3
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    drop_path_rate: float = 0.0
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-6
    qkv_bias: bool = True
    pooling: str = "cls"
    use_cls_token: bool = True
    representation_size: int | None = None
    representation_act: str = "tanh"
    attention_type: str = "full"
    attention_kwargs: dict[str, Any] | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        if self.attention_kwargs is None:
            self.attention_kwargs = {}
        super().__post_init__(**kwargs)

    @property
    def grid_size(self) -> tuple[int, int]:
        """Patch grid (rows, columns) at ``image_size``."""
        (h, w), (ph, pw) = to_pair(self.image_size), to_pair(self.patch_size)
        return h // ph, w // pw

    def check(self) -> None:
        check_size("image_size", self.image_size)
        check_size("patch_size", self.patch_size)
        (h, w), (ph, pw) = to_pair(self.image_size), to_pair(self.patch_size)
        if h % ph or w % pw:
            raise UsageError(f"image_size {h}x{w} is not divisible by patch_size {ph}x{pw}")
        for name in ("num_channels", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
            check_int(name, getattr(self, name))
        if self.hidden_size % self.num_attention_heads:
            raise UsageError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}"
            )
        check_activation("hidden_act", self.hidden_act)
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate"):
            check_probability(name, getattr(self, name))
        check_positive_float("initializer_range", self.initializer_range)
        check_positive_float("layer_norm_eps", self.layer_norm_eps)
        check_bool("qkv_bias", self.qkv_bias)
        check_choice("pooling", self.pooling, POOLING_CHOICES)
        check_bool("use_cls_token", self.use_cls_token)
        if self.pooling == "cls" and not self.use_cls_token:
            raise UsageError("pooling='cls' needs use_cls_token=True; use pooling='mean' without a [CLS] token")
        if self.representation_size is not None:
            check_int("representation_size", self.representation_size)
        check_activation("representation_act", self.representation_act)
        check_attention(
            self.attention_type,
            self.attention_kwargs,
            self.attention_probs_dropout_prob,
            self.num_attention_heads,
            self.hidden_size,
        )
        check_attention_serves(self.attention_type, VIT_ATTENTION_REQUESTS, "a ViT encoder")
