"""The image reading of the hf_xcv processors, as earlier versions named it: each function here is
:mod:`hf_xcv.processing.input_policy`'s reading (the one policy: layouts, value scales, 16-bit, modes), under the
names its callers use. New code reads images with :func:`hf_xcv.processing.input_policy.read_images`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..utils.errors import UsageError
from .input_policy import HIGH_DEPTH_MODES, read_image, read_images, to_uint8

__all__ = ["HIGH_DEPTH_MODES", "as_uint8", "prepare_image", "prepare_images", "prepare_rgb8"]


def prepare_image(image: Any, to_rgb: bool = True, data_format: str | None = None) -> np.ndarray:
    """One image -> (C, H, W) array; integer images on the 0-255 scale, floats unchanged (the caller's scale, as
    ``do_rescale=False`` reads them)."""
    return read_image(image, to_rgb=to_rgb, data_format=getattr(data_format, "value", data_format), rescale=False)


def prepare_images(images: Any, to_rgb: bool = True, data_format: str | None = None) -> list[np.ndarray]:
    """One image or a batch -> list of (C, H, W) arrays read as :func:`prepare_image` reads one."""
    return read_images(images, to_rgb=to_rgb, data_format=data_format, rescale=False)


def as_uint8(array: np.ndarray, what: str) -> np.ndarray:
    """An image array on its own scale -> uint8 0-255 by the policy's reading (floats in [0, 1] and 0-255 levels,
    16-bit, bool), rounded to 8 bits; UsageError naming ``what`` for anything it refuses."""
    return to_uint8(read_image(array, to_rgb=False, rescale=True, what=what))


def prepare_rgb8(images: Any, what: str, to_rgb: bool, data_format: Any, model: str) -> list[np.ndarray]:
    """(3, H, W) uint8 arrays of ``images`` for the 8-bit pipelines (TTSR's, IPT's): read by the policy (floats in
    [0, 1] or 0-255, 16-bit scaled, modes converted with ``to_rgb``), then rounded to the nearest 8-bit level, as the
    original code reads images; a UsageError names the ``what`` at fault, or an image that is not RGB after the
    conversion ``to_rgb`` asks for (``model`` names who takes RGB only)."""
    arrays = read_images(images, to_rgb=bool(to_rgb), data_format=data_format, rescale=True, what=what)
    for index, array in enumerate(arrays):
        if array.shape[0] != 3:
            raise UsageError(
                f"{what} {index} has {array.shape[0]} channels; {model} takes RGB images (do_convert_rgb=True "
                "converts grayscale, palette and RGBA images)"
            )
    return [to_uint8(array) for array in arrays]
