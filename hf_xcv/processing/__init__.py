"""Input handling shared by the hf_xcv image processors."""

from .images import HIGH_DEPTH_MODES, as_uint8, prepare_images, prepare_rgb8

__all__ = ["HIGH_DEPTH_MODES", "as_uint8", "prepare_images", "prepare_rgb8"]
