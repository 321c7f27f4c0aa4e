"""Turn whatever a user passes as "images" into a list of channels-first numpy arrays, or say why not.

Accepted: PIL images, numpy arrays and torch tensors, one image or a batch (a list/tuple, or a
4-D array/tensor). Arrays may be (H, W), (H, W, C) or (C, H, W) with C in {1, 3, 4}. With
``to_rgb``, grayscale is repeated to three channels and an alpha channel is dropped (as PIL's
``convert("RGB")`` does).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import PIL.Image
import torch

from ..utils.errors import UsageError

_CHANNEL_COUNTS = (1, 3, 4)


def _describe(obj: Any) -> str:
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return f"{type(obj).__name__} of shape {tuple(obj.shape)}"
    return type(obj).__name__


def _split_batch(images: Any) -> list[Any]:
    """One image or a batch (list, tuple, a ``datasets`` column, any iterable, 4-D array) -> a list."""
    single = (np.ndarray, torch.Tensor, PIL.Image.Image, str, bytes, dict)
    if isinstance(images, Iterable) and not isinstance(images, single):
        images = list(images)
        if len(images) == 0:
            raise UsageError("no images given: got an empty list")
        return images
    if isinstance(images, (np.ndarray, torch.Tensor)) and images.ndim == 4:
        if images.shape[0] == 0:
            raise UsageError(f"no images given: got a batch {_describe(images)}")
        return list(images)
    return [images]


def _pil_to_array(image: PIL.Image.Image, to_rgb: bool) -> np.ndarray:
    if image.width == 0 or image.height == 0:
        raise UsageError(f"got an empty image of size {image.width}x{image.height}")
    if to_rgb and image.mode != "RGB":
        image = image.convert("RGB")
    array = np.asarray(image)
    return array[None] if array.ndim == 2 else np.moveaxis(array, -1, 0)  # (C, H, W)


def _channels_first(array: np.ndarray, data_format: str | None) -> np.ndarray:
    """(H, W) / (H, W, C) / (C, H, W) -> (C, H, W)."""
    if array.ndim == 2:
        return array[None]
    if array.ndim != 3:
        raise UsageError(
            f"an image must have 2 dimensions (H, W) or 3 (H, W, C) or (C, H, W); got shape {tuple(array.shape)}"
        )
    if data_format in ("channels_first", "channels_last"):
        first = data_format == "channels_first"
    elif array.shape[0] in _CHANNEL_COUNTS and array.shape[-1] in _CHANNEL_COUNTS:
        raise UsageError(
            f"an image of shape {tuple(array.shape)} could be channels-first or channels-last; "
            "pass input_data_format='channels_first' or 'channels_last'"
        )
    elif array.shape[0] in _CHANNEL_COUNTS:
        first = True
    elif array.shape[-1] in _CHANNEL_COUNTS:
        first = False
    else:
        raise UsageError(
            f"cannot find the channel axis of an image of shape {tuple(array.shape)}: "
            f"expected {_CHANNEL_COUNTS} channels first or last"
        )
    return array if first else np.moveaxis(array, -1, 0)


def _to_rgb(array: np.ndarray) -> np.ndarray:
    channels = array.shape[0]
    if channels == 1:
        return np.repeat(array, 3, axis=0)
    if channels == 4:
        return array[:3]
    return array


def prepare_image(image: Any, to_rgb: bool = True, data_format: str | None = None) -> np.ndarray:
    """One image -> (C, H, W) numpy array."""
    if isinstance(image, PIL.Image.Image):
        return _pil_to_array(image, to_rgb)
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu()
        image = image.float().numpy() if image.dtype == torch.bfloat16 else image.numpy()
    if not isinstance(image, np.ndarray):
        raise UsageError(f"expected a PIL image, numpy array or torch tensor, got {_describe(image)}")
    array = _channels_first(image, data_format)
    channels, height, width = array.shape
    if height == 0 or width == 0:
        raise UsageError(f"got an empty image of shape {tuple(image.shape)}")
    if channels not in _CHANNEL_COUNTS:
        raise UsageError(f"an image must have 1, 3 or 4 channels, got {channels} (shape {tuple(image.shape)})")
    if array.dtype == bool:
        array = array.astype(np.uint8) * 255
    return _to_rgb(array) if to_rgb else array


def prepare_images(images: Any, to_rgb: bool = True, data_format: str | None = None) -> list[np.ndarray]:
    """One image or a batch -> list of (C, H, W) numpy arrays; ValueError naming what was wrong."""
    if images is None:
        raise UsageError("no images given: got None")
    return [prepare_image(image, to_rgb, data_format) for image in _split_batch(images)]


# PIL modes that convert("RGB") clips to 8 bits (16-bit integer, 32-bit integer and float images)
HIGH_DEPTH_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N", "F")


def as_uint8(array: np.ndarray, what: str) -> np.ndarray:
    """uint8 as it is; floats in [0, 1] rounded to 0-255 (the restoration models' official pipelines read 8-bit
    images); anything else refused by name."""
    if array.dtype == np.uint8:
        return array
    if np.issubdtype(array.dtype, np.floating):
        values = array.astype(np.float64)
        if values.size and not (values.min() >= 0.0 and values.max() <= 1.0):
            raise UsageError(
                f"{what}: float images must hold values in [0, 1] (or pass uint8 0-255), got [{values.min()}, "
                f"{values.max()}]"
            )
        return np.round(values * 255.0).astype(np.uint8)
    raise UsageError(f"{what}: expected uint8 (0-255) or float ([0, 1]) images, got dtype {array.dtype}")


def prepare_rgb8(images: Any, what: str, to_rgb: bool, data_format: Any, model: str) -> list[np.ndarray]:
    """(3, H, W) uint8 arrays of ``images`` (PIL images, arrays, tensors; floats in [0, 1] rounded), or a ValueError
    naming the ``what`` at fault: a 16-bit or float PIL image (RGB conversion would clip it), an image that is not
    RGB after the conversion ``to_rgb`` asks for (``model`` names who takes RGB only)."""
    data_format = getattr(data_format, "value", data_format)
    for index, image in enumerate(images if isinstance(images, (list, tuple)) else [images]):
        if isinstance(image, PIL.Image.Image) and image.mode in HIGH_DEPTH_MODES:
            raise UsageError(
                f"{what} {index} is a PIL image of mode {image.mode!r} (16-bit or float), which RGB conversion "
                "would clip: convert it to 8-bit RGB, or pass a float array with values in [0, 1]"
            )
    try:
        arrays = prepare_images(images, to_rgb=bool(to_rgb), data_format=data_format)
    except ValueError as err:
        raise UsageError(f"{what}s: {err}") from None
    for index, array in enumerate(arrays):
        if array.shape[0] != 3:
            raise UsageError(
                f"{what} {index} has {array.shape[0]} channels; {model} takes RGB images (do_convert_rgb=True "
                "converts grayscale, palette and RGBA images)"
            )
    return [as_uint8(array, f"{what} {index}") for index, array in enumerate(arrays)]
