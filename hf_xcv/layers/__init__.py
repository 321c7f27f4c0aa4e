"""Building blocks shared by the hf_xcv models."""

from .drop_path import DropPath, drop_path
from .mlp import Mlp
from .patch_embed import PatchEmbed, to_pair
from .pos_embed import resample_patch_pos_embed

__all__ = ["DropPath", "Mlp", "PatchEmbed", "drop_path", "resample_patch_pos_embed", "to_pair"]
