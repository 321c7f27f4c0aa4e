"""TTSR configuration (Yang et al. 2020, "Learning Texture Transformer Network for Image Super-Resolution")."""

from __future__ import annotations

from typing import Any

from ...configuration_utils import XcvConfig, check_attention, check_attention_serves
from ...processing.restoration import SCALE
from ...utils.checks import check_int, check_positive_float
from ...utils.errors import UsageError

# What the texture transfer asks of a registry core when one replaces the hard attention (attention_type set): keys
# (the degraded reference's patches) come from another image than the queries (the upsampled input's).
TTSR_ATTENTION_REQUESTS = {"cross_attention": True}
MIN_RELEVANCE_CHUNK = 64  # below this, a GEMM block may round differently from the whole product (see the config)


def parse_res_blocks(value: Any) -> list[int]:
    """``"16+16+8+4"`` (the original's option) or ``[16, 16, 8, 4]`` -> [16, 16, 8, 4]; ValueError otherwise."""
    blocks: list[int] = []
    if isinstance(value, str) and all(part.strip().isdigit() for part in value.split("+")):
        blocks = [int(part) for part in value.split("+")]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        blocks = list(value)
    if len(blocks) != 4 or any(b < 0 for b in blocks):
        raise UsageError(
            "num_res_blocks must give the residual blocks of the 4 stages (shallow extractor, x1, x2, x4) as "
            f"'16+16+8+4' or [16, 16, 8, 4] (non-negative integers), got {value!r}"
        )
    return blocks


class TTSRConfig(XcvConfig):
    r"""Configuration of TTSR. Defaults are the paper's (6.7M parameters: a 0.55M texture extractor, VGG19 up to
    relu3_1, and a 6.17M main network).

    Args:
        num_channels: channels of the images (RGB).
        upscale: the super-resolution factor; TTSR is x4 only (its texture levels and cross-scale integration are
            built for x4; any other value is refused).
        num_res_blocks: residual blocks of the shallow feature extractor and of the x1, x2 and x4 stages, as the
            original's option string ``"16+16+8+4"`` or a list of four integers.
        n_feats: width of the main network (even: its last convolution halves it).
        res_scale: scale of each residual block's branch.
        texture_channels: widths of the texture extractor's three levels (relu1_1, relu2_1, relu3_1 of VGG19:
            64, 128, 256; VGG19 ImageNet weights load only with these).
        relevance_chunk_size: the relevance between the upsampled input's and the degraded reference's 3x3 patches
            is computed in blocks of at most this many query and this many key positions (memory
            ``relevance_chunk_size**2`` floats per block, never (input area) x (reference area)); the arg-max and the
            result equal the unchunked computation's (blocks of at least 64 positions compute every relevance as the
            whole product does on the CPU; the test checks it).
        attention_type: ``None`` for TTSR's hard attention (the most relevant reference patch is copied, the paper);
            a registry entry (``"full"``, ``"performer"``, ...) replaces it by a softmax-weighted sum of the reference
            patches through that core: the "traditional attention" the paper argues blurs textures, as an ablation
            (the reference's unfolded patches become the values: memory grows with the reference area x 7 x
            (relu3_1 width x 9)).
        attention_kwargs: settings of that core.
        transfer_temperature: the softmax temperature of the weighted transfer (relevances are cosines in [-1, 1]).
        reconstruction_loss_weight: weight of the L1 reconstruction loss that ``labels`` give (the original's
            ``rec_w``).
    """

    model_type = "xcv_ttsr"
    attribute_map = {"num_hidden_layers": "num_stages", "num_attention_heads": "num_texture_heads"}

    num_channels: int = 3
    upscale: int = SCALE
    num_res_blocks: str | list[int] = "16+16+8+4"
    n_feats: int = 64
    res_scale: float | int = 1.0
    texture_channels: list[int] | tuple[int, ...] = (64, 128, 256)
    relevance_chunk_size: int = 4096
    attention_type: str | None = None
    attention_kwargs: dict[str, Any] | None = None
    transfer_temperature: float = 0.01
    reconstruction_loss_weight: float = 1.0

    def __post_init__(self, **kwargs: Any) -> None:
        if self.attention_kwargs is None:
            self.attention_kwargs = {}
        if isinstance(self.texture_channels, tuple):
            self.texture_channels = list(self.texture_channels)
        self.hidden_size = self.n_feats
        super().__post_init__(**kwargs)

    @property
    def num_stages(self) -> int:
        """The main network's stages that fuse textures (x1, x2, x4): its "hidden layers"."""
        return 3

    @num_stages.setter
    def num_stages(self, value: Any) -> None:
        raise UsageError("num_hidden_layers (num_stages) is TTSR's 3 stages, not a setting")

    @property
    def num_texture_heads(self) -> int:
        """Heads of the texture attention: one relevance over whole patch vectors (the hard attention); a weighted
        transfer's core cuts the values into heads as wide as the patch vectors (:meth:`weighted_transfer_heads`)."""
        return 1 if self.attention_type is None else self.weighted_transfer_heads()[0]

    @num_texture_heads.setter
    def num_texture_heads(self, value: Any) -> None:
        raise UsageError("num_attention_heads (num_texture_heads) follows from texture_channels, not a setting")

    def weighted_transfer_heads(self) -> tuple[int, int]:
        """(heads, head width) of a weighted transfer's core: the reference patches' values at the three scales
        (C3 * 9 + C2 * 36 + C1 * 144 numbers; 7 x C3 * 9 with VGG's widths) cut into heads as wide as the queries
        (C3 * 9), every head attending with the same queries and keys."""
        c1, c2, c3 = self.texture_channels
        values, width = c3 * 9 + c2 * 36 + c1 * 144, c3 * 9
        return -(-values // width), width

    @property
    def res_blocks(self) -> list[int]:
        """``num_res_blocks`` as four integers."""
        return parse_res_blocks(self.num_res_blocks)

    def check(self) -> None:
        if self.num_channels != 3:
            raise UsageError(
                f"num_channels={self.num_channels!r} is not allowed: TTSR takes RGB images (3; the texture extractor "
                "normalises with ImageNet's per-channel mean and std)"
            )
        if self.upscale != SCALE:
            raise UsageError(
                f"upscale={self.upscale!r} is not allowed: TTSR is x4 only (its three texture levels and the "
                "cross-scale feature integration are built for x4)"
            )
        parse_res_blocks(self.num_res_blocks)
        check_int("n_feats", self.n_feats)
        if self.n_feats % 2:
            raise UsageError(f"n_feats must be even (the last convolution halves it), got {self.n_feats}")
        check_positive_float("res_scale", self.res_scale)
        channels = self.texture_channels
        if not isinstance(channels, (list, tuple)) or len(channels) != 3:
            raise UsageError(f"texture_channels must be three widths (relu1_1, relu2_1, relu3_1), got {channels!r}")
        for width in channels:
            check_int("texture_channels", width)
        check_int("relevance_chunk_size", self.relevance_chunk_size, MIN_RELEVANCE_CHUNK)
        check_positive_float("transfer_temperature", self.transfer_temperature)
        check_positive_float("reconstruction_loss_weight", self.reconstruction_loss_weight)
        if self.attention_type is None:
            if self.attention_kwargs:
                raise UsageError(
                    "attention_kwargs configure the core of a weighted texture transfer; with attention_type=None "
                    f"(TTSR's hard attention) there is none, got {self.attention_kwargs!r}"
                )
            return
        check_attention(self.attention_type, self.attention_kwargs, 0.0, *self.weighted_transfer_heads())
        check_attention_serves(self.attention_type, TTSR_ATTENTION_REQUESTS, "TTSR's texture transfer")
