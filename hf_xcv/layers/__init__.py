"""Building blocks shared by the hf_xcv models."""

from .drop_path import DropPath, drop_path
from .frozen_bn import FrozenBatchNorm2d, freeze_batch_norms
from .mlp import Mlp
from .patch_embed import PatchEmbed, check_pixel_tensor, to_pair
from .pos_embed import (
    SINUSOIDAL_LAYOUTS,
    SinusoidalPositionEmbedding,
    resample_patch_pos_embed,
    sine_position_embedding_2d,
    sinusoidal_table,
)
from .reversible import ChunkedFeedForward, ReversibleBlock, ReversibleSequence, chunked_feed_forward
from .token_embed import ScaledEmbedding, check_range, is_tracing

__all__ = [
    "SINUSOIDAL_LAYOUTS",
    "ChunkedFeedForward",
    "DropPath",
    "FrozenBatchNorm2d",
    "Mlp",
    "PatchEmbed",
    "ReversibleBlock",
    "ReversibleSequence",
    "ScaledEmbedding",
    "SinusoidalPositionEmbedding",
    "check_range",
    "check_pixel_tensor",
    "chunked_feed_forward",
    "drop_path",
    "freeze_batch_norms",
    "is_tracing",
    "resample_patch_pos_embed",
    "sine_position_embedding_2d",
    "sinusoidal_table",
    "to_pair",
]
