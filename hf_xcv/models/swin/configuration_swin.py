"""Swin Transformer configuration (Liu et al. 2021, "Hierarchical Vision Transformer using Shifted Windows")."""

from __future__ import annotations

from typing import Any

from transformers.backbone_utils import BackboneConfigMixin

from ...configuration_utils import XcvConfig, check_activation, check_attention, check_attention_serves
from ...utils.checks import check_bool, check_int, check_positive_float, check_probability, check_size
from ...utils.errors import UsageError

WINDOW_ATTENTION = "shifted_window"
# What a Swin stage asks of its attention core: self-attention over the stage's token grid.
SWIN_ATTENTION_REQUESTS = {"grid_available": True}
# attention_kwargs a Swin stage sets itself for shifted-window attention (per block and stage).
_STAGE_SET_KWARGS = ("window_size", "shift_size", "shrink_to_grid")


class SwinConfig(BackboneConfigMixin, XcvConfig):
    r"""Configuration of a Swin Transformer. Defaults are Swin-T (patch 4, window 7, 224x224).

    Field names are transformers' ``SwinConfig``'s.

    Args:
        image_size: resolution the model is built for (int or (height, width)); it decides where a stage's
            window shrinks to its grid and the size of absolute position embeddings. Other sizes are padded.
        patch_size: side of the patches of the patch embedding (int or (height, width)).
        num_channels: channels of the input images.
        embed_dim: width C of the first stage; stage i has C * 2**i.
        depths: blocks per stage.
        num_heads: attention heads per stage; each must divide its stage's width.
        window_size: side of the attention windows, in tokens.
        mlp_ratio: hidden width of the feed-forward block, as a multiple of the stage width.
        qkv_bias: bias on the query/key/value projections.
        hidden_dropout_prob: dropout after the embeddings, attention and feed-forward outputs.
        attention_probs_dropout_prob: dropout on the attention probabilities.
        drop_path_rate: stochastic depth, rising linearly from 0 to this value over all blocks.
        hidden_act: activation of the feed-forward block.
        use_absolute_embeddings: add learned absolute position embeddings after the patch embedding.
        initializer_range: std of the truncated-normal initialisation.
        layer_norm_eps: epsilon of the LayerNorms of the blocks and the final norm.
        encoder_stride: kept from transformers' config (its masked-image-modeling decoder); unused here.
        out_features / out_indices: the stages ``SwinBackbone`` returns (``"stem"``, ``"stage1"`` ...).
        attention_type: the registry core of every block; ``"shifted_window"`` is Swin's own, any other entry
            attends within a whole stage (``"full"``: global attention, an ablation).
        attention_kwargs: settings of that core; for ``shifted_window`` the stage sets window and shift itself.
    """

    model_type = "xcv_swin"
    # attention_kwargs the stages set themselves, per entry (tests and tools leave them out).
    model_set_attention_kwargs = {WINDOW_ATTENTION: _STAGE_SET_KWARGS}
    attribute_map = {"num_attention_heads": "num_heads", "num_hidden_layers": "num_layers"}

    image_size: int | list[int] | tuple[int, int] = 224
    patch_size: int | list[int] | tuple[int, int] = 4
    num_channels: int = 3
    embed_dim: int = 96
    depths: list[int] | tuple[int, ...] = (2, 2, 6, 2)
    num_heads: list[int] | tuple[int, ...] = (3, 6, 12, 24)
    window_size: int = 7
    mlp_ratio: float | int = 4.0
    qkv_bias: bool = True
    hidden_dropout_prob: float | int = 0.0
    attention_probs_dropout_prob: float | int = 0.0
    drop_path_rate: float | int = 0.1
    hidden_act: str = "gelu"
    use_absolute_embeddings: bool = False
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-5
    encoder_stride: int = 32
    attention_type: str = WINDOW_ATTENTION
    attention_kwargs: dict[str, Any] | None = None
    _out_features: list[str] | None = None
    _out_indices: list[int] | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        if self.attention_kwargs is None:
            self.attention_kwargs = {}
        self.depths, self.num_heads = list(self.depths), list(self.num_heads)
        self.num_layers = len(self.depths)
        self.hidden_size = int(self.embed_dim * 2 ** (len(self.depths) - 1))
        self.stage_names = ["stem"] + [f"stage{i}" for i in range(1, len(self.depths) + 1)]
        self.set_output_features_output_indices(
            out_indices=kwargs.pop("out_indices", None), out_features=kwargs.pop("out_features", None)
        )
        super().__post_init__(**kwargs)

    def stage_width(self, stage: int) -> int:
        return int(self.embed_dim * 2**stage)

    def check(self) -> None:
        check_size("image_size", self.image_size)
        check_size("patch_size", self.patch_size)
        for name in ("num_channels", "embed_dim", "window_size", "encoder_stride"):
            check_int(name, getattr(self, name))
        for name in ("depths", "num_heads"):
            values = getattr(self, name)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise UsageError(f"{name} must be a non-empty list of integers >= 1, got {values!r}")
        if len(self.depths) != len(self.num_heads):
            raise UsageError(
                f"depths ({len(self.depths)} stages: {self.depths}) and num_heads ({len(self.num_heads)} stages: "
                f"{self.num_heads}) must have one entry per stage"
            )
        for stage, heads in enumerate(self.num_heads):
            if self.stage_width(stage) % heads:
                raise UsageError(
                    f"num_heads[{stage}]={heads} does not divide stage {stage + 1}'s width embed_dim * 2**{stage} = "
                    f"{self.stage_width(stage)}"
                )
        check_positive_float("mlp_ratio", self.mlp_ratio)
        check_bool("qkv_bias", self.qkv_bias)
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate"):
            check_probability(name, getattr(self, name))
        check_activation("hidden_act", self.hidden_act)
        check_bool("use_absolute_embeddings", self.use_absolute_embeddings)
        check_positive_float("initializer_range", self.initializer_range)
        check_positive_float("layer_norm_eps", self.layer_norm_eps)
        if self.attention_type == WINDOW_ATTENTION:
            fixed = sorted(set(self.attention_kwargs) & set(_STAGE_SET_KWARGS))
            if fixed:
                raise UsageError(
                    f"attention_kwargs {fixed} are set by each Swin block for shifted-window attention (window_size "
                    "is the config field window_size; shifts alternate 0, window_size // 2)"
                )
        check_attention(
            self.attention_type,
            self.block_attention_kwargs(),
            self.attention_probs_dropout_prob,
            self.num_heads[0],
            self.embed_dim,
        )
        check_attention_serves(self.attention_type, SWIN_ATTENTION_REQUESTS, "a Swin stage")

    def block_attention_kwargs(self) -> dict[str, Any]:
        """The ``attention_kwargs`` of every block's core: for ``shifted_window``, one window of ``window_size`` (the
        block itself pads, rolls by its shift and cuts the windows, as the original block does); for any other
        core, ``attention_kwargs`` as given."""
        if self.attention_type != WINDOW_ATTENTION:
            return dict(self.attention_kwargs)
        return {**self.attention_kwargs, "window_size": self.window_size, "shift_size": 0, "shrink_to_grid": True}
