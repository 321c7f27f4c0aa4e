"""Input handling shared by the hf_xcv image processors."""

from .images import prepare_images

__all__ = ["prepare_images"]
