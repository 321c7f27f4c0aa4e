"""Building blocks shared by the hf_xcv models."""

from .drop_path import DropPath, drop_path
from .mlp import Mlp
from .patch_embed import PatchEmbed, to_pair
from .pos_embed import SINUSOIDAL_LAYOUTS, SinusoidalPositionEmbedding, resample_patch_pos_embed, sinusoidal_table
from .reversible import ChunkedFeedForward, ReversibleBlock, ReversibleSequence, chunked_feed_forward

__all__ = [
    "SINUSOIDAL_LAYOUTS",
    "ChunkedFeedForward",
    "DropPath",
    "Mlp",
    "PatchEmbed",
    "ReversibleBlock",
    "ReversibleSequence",
    "SinusoidalPositionEmbedding",
    "chunked_feed_forward",
    "drop_path",
    "resample_patch_pos_embed",
    "sinusoidal_table",
    "to_pair",
]
