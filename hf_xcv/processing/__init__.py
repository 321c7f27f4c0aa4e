"""Input handling shared by the hf_xcv image processors: :mod:`.input_policy` is what an image input means."""

from .images import HIGH_DEPTH_MODES, as_uint8, prepare_images, prepare_rgb8
from .input_policy import check_resized_size, read_image, read_images, resize, to_uint8

__all__ = [
    "HIGH_DEPTH_MODES",
    "as_uint8",
    "check_resized_size",
    "prepare_images",
    "prepare_rgb8",
    "read_image",
    "read_images",
    "resize",
    "to_uint8",
]
