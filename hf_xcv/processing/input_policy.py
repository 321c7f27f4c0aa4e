"""What an image input means: the one reading every hf_xcv image processor applies to the images it is given.

Every registered image processor (ViT's, Swin's, DETR's, Deformable DETR's, TTSR's, IPT's) turns its inputs into
pixels with :func:`read_images` and resizes with :func:`resize`, so the same input means the same picture everywhere.
The policy:

**What is accepted.** A PIL image, a numpy array or a torch tensor; one image, or a batch (a list, tuple or other
iterable such as a ``datasets`` column, or a 4-D array or tensor).

**Layout.** Arrays and tensors may be (H, W), (H, W, C) or (C, H, W) with C in {1, 3, 4}. The channel axis is the
one of 1, 3 or 4 entries; a shape that could be either (4x4x3) is refused unless ``input_data_format`` says
``"channels_first"`` or ``"channels_last"``. Channels-first and channels-last copies of an image give the same
pixels. Other ranks, other channel counts (2: pass a PIL ``"LA"`` image) and empty images are refused by name.

**Values: one 8-bit scale.** Every image is read onto the 0-255 scale of an 8-bit image, whatever its type:

* ``uint8`` (and 8-bit PIL modes): 0-255 as they are;
* ``bool``: False/True are 0/255;
* 16-bit images, PIL ``"I;16"`` / ``"I;16B"`` / ``"I;16L"`` / ``"I;16N"`` and ``uint16`` arrays: 0-65535, scaled
  to 0-255 (divided by 257, so 16-bit ``v * 257`` is 8-bit ``v`` exactly). PIL ``"I"`` (32-bit integers, how PIL
  opens some 16-bit files) is read as 16-bit and refused by name if a value lies outside 0-65535;
* other integer arrays (``int64``, ``int32``, ...): 0-255, as transformers reads them; any value outside is refused
  by name (pass ``uint16`` for 16-bit data);
* floats (arrays, tensors, PIL ``"F"``): when the processor rescales (``do_rescale=True``, and always for TTSR's
  and IPT's fixed pipelines), by their values: **all within [0, 1]**: an image already rescaled to [0, 1] (the
  8-bit image divided by 255), so it is never divided by 255 a second time; **a largest value of 2 or more (and at
  most 255)**: 0-255 levels held as floats, rescaled as ``uint8`` would be. A largest value between 1 and 2 (a
  [0, 1] image that resampling or noise pushed past 1, or a 0-255 image too dark to tell), negative, non-finite or
  above-255 values are refused by name: clip the image, or pass ``uint8``. With ``do_rescale=False`` floats are
  the caller's own scale and pass unchanged (as transformers'); an image with alpha then cannot be composited, and
  is refused.

The read keeps an image in ``uint8`` whenever it holds whole 8-bit levels (a float image that is ``uint8 / 255``,
a 16-bit one that is ``uint8 * 257``), so such an input gives bit for bit the pixels of the ``uint8`` image; any
other image is held as float32 on the 0-255 scale and never quantized: :func:`resize` resizes it in PIL's 32-bit
float mode, with the same filter. ``uint8`` images and 8-bit PIL images take exactly transformers' path, so their
pixels equal transformers' processors'. TTSR's and IPT's pipelines read 8-bit images, as the original code: they
round the scale to the nearest 8-bit level (:func:`to_uint8`).

**Channels** (``do_convert_rgb=True``, the default): grayscale (1 channel, PIL ``"1"``, ``"L"``, 16-bit and
``"F"``) is repeated to RGB; an alpha channel (PIL ``"RGBA"``, ``"LA"``, ``"PA"``, a palette with transparency,
4-channel arrays) is **composited on white**, as transformers' ``do_convert_rgb`` does; palette (``"P"``),
``"CMYK"``, ``"YCbCr"``, ``"LAB"``, ``"HSV"`` and ``"RGBX"`` images are converted by PIL. With
``do_convert_rgb=False`` an image keeps its channels (1, 3 or 4; a palette image becomes the colours it indexes);
a PIL mode with other bands (``"CMYK"``, ``"LA"``, ...) is then refused by name.

**Resizing to nothing.** A resize whose output has a side of 0 pixels (a 10000x20 strip whose shorter side a
``longest_edge`` cap shrinks below one pixel) is refused by :func:`check_resized_size`, naming the input size and
the size setting.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import PIL.Image
import torch
from transformers.image_transforms import resize as transformers_resize
from transformers.image_utils import ChannelDimension, PILImageResampling

from ..utils.errors import UsageError

CHANNEL_COUNTS = (1, 3, 4)
# PIL modes of more than 8 bits per channel: read by value here, never through PIL's convert("RGB") (which clips).
HIGH_DEPTH_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N", "F")
# PIL modes kept as they are with do_convert_rgb=False (a palette becomes its colours, "1" becomes "L").
_KEPT_MODES = ("1", "L", "P", "RGB", "RGBA", *HIGH_DEPTH_MODES)
# A float image whose largest value is at most UNIT_MAX is in [0, 1]; at least LEVELS_MIN_MAX, 0-255 levels.
UNIT_MAX = 1.0
LEVELS_MIN_MAX = 2.0
# How far from a whole 8-bit level (on the 0-255 scale) a value may be and still be read as that level.
_LEVEL_TOLERANCE = 1e-3


def describe(obj: Any) -> str:
    """What ``obj`` is, for an error message: its type, and its shape and dtype if it has them."""
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        dtype = str(obj.dtype).replace("torch.", "")
        return f"{type(obj).__name__} of shape {tuple(obj.shape)} and dtype {dtype}"
    if isinstance(obj, PIL.Image.Image):
        return f"PIL image of mode {obj.mode!r} and size {obj.width}x{obj.height} (width x height)"
    return type(obj).__name__


def split_batch(images: Any) -> list[Any]:
    """One image or a batch (list, tuple, a ``datasets`` column, any iterable, 4-D array or tensor) -> a list."""
    if images is None:
        raise UsageError("no images given: got None")
    single = (np.ndarray, torch.Tensor, PIL.Image.Image, str, bytes, dict)
    if isinstance(images, Iterable) and not isinstance(images, single):
        images = list(images)
        if len(images) == 0:
            raise UsageError("no images given: got an empty list")
        return images
    if isinstance(images, (np.ndarray, torch.Tensor)) and images.ndim == 4:
        if images.shape[0] == 0:
            raise UsageError(f"no images given: got a batch {describe(images)}")
        return list(images)
    return [images]


# ----------------------------------------------------------------------------------------------------------------
# the reading


def read_images(
    images: Any,
    *,
    to_rgb: bool = True,
    data_format: Any = None,
    rescale: bool = True,
    what: str = "image",
) -> list[np.ndarray]:
    """One image or a batch -> a list of (C, H, W) arrays as the module's policy reads them: on the 0-255 scale,
    ``uint8`` where the image holds whole 8-bit levels and float32 otherwise (float values unchanged, as float32,
    when ``rescale`` is False); RGB with ``to_rgb``.

    Args:
        images: PIL images, numpy arrays or torch tensors, one or a batch.
        to_rgb: grayscale repeated to three channels, alpha composited on white, other modes converted by PIL.
        data_format: ``"channels_first"`` / ``"channels_last"`` (or transformers' ``ChannelDimension``) for arrays
            whose layout is ambiguous; None infers it.
        rescale: whether the processor rescales (``do_rescale``): floats are then read by value (in [0, 1]: already
            rescaled; from 2 to 255: 0-255 levels); without it floats are the caller's scale and pass unchanged.
        what: what the images are, for error messages (``"image"``, ``"reference"``): ``"<what> <index>: ..."``.

    Raises:
        UsageError: naming the image and what is wrong with it.
    """
    data_format = getattr(data_format, "value", data_format)
    if data_format not in (None, "channels_first", "channels_last"):
        raise UsageError(f"input_data_format must be 'channels_first' or 'channels_last', got {data_format!r}")
    return [
        read_image(image, to_rgb=to_rgb, data_format=data_format, rescale=rescale, what=f"{what} {index}")
        for index, image in enumerate(split_batch(images))
    ]


def read_image(
    image: Any, *, to_rgb: bool = True, data_format: str | None = None, rescale: bool = True, what: str = "image"
) -> np.ndarray:
    """One image -> (C, H, W) array (see :func:`read_images`)."""
    try:
        array, rgb_already = _channels_first_array(image, to_rgb, data_format)
        array = _on_8bit_scale(array, rescale, image)
        return _to_rgb(array, rescale) if to_rgb and not rgb_already else array
    except UsageError as err:
        raise UsageError(f"{what}: {err}") from None


def _channels_first_array(image: Any, to_rgb: bool, data_format: str | None) -> tuple[np.ndarray, bool]:
    """(C, H, W) array of ``image``, values as given (16-bit PIL as uint16, ``"I"`` as int32, ``"F"`` as float32),
    and whether it is RGB already (a PIL image that PIL converted)."""
    if isinstance(image, PIL.Image.Image):
        return _pil_array(image, to_rgb)
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu()
        image = image.float() if image.dtype == torch.bfloat16 else image
        try:
            image = image.numpy()
        except (TypeError, RuntimeError):
            raise UsageError(f"cannot read a tensor of dtype {image.dtype} as an image") from None
    if not isinstance(image, np.ndarray):
        raise UsageError(f"expected a PIL image, numpy array or torch tensor, got {describe(image)}")
    array = _channels_first(image, data_format)
    if 0 in array.shape[1:]:
        raise UsageError(f"got an empty image of shape {tuple(image.shape)}")
    return array, False


def _pil_array(image: PIL.Image.Image, to_rgb: bool) -> tuple[np.ndarray, bool]:
    if image.width == 0 or image.height == 0:
        raise UsageError(f"got an empty image of size {image.width}x{image.height}")
    mode = image.mode
    if mode in HIGH_DEPTH_MODES:
        array = np.asarray(image)
        array = array.astype(array.dtype.newbyteorder("="))  # "I;16B" is big-endian
        if mode == "I":  # 32-bit integers: how PIL opens some 16-bit files
            low, high = int(array.min()), int(array.max())
            if low < 0 or high > 65535:
                raise UsageError(
                    f"a PIL image of mode 'I' is read as 16-bit (0-65535), but its values lie in [{low}, {high}]"
                )
            array = array.astype(np.uint16)
        return array[None], False  # one channel; to RGB after the values are read
    has_alpha = "A" in image.getbands() or "a" in image.getbands() or image.info.get("transparency") is not None
    if to_rgb:
        target = "RGBA" if has_alpha else "RGB"
    elif mode in _KEPT_MODES:
        target = {"1": "L", "P": "RGBA" if has_alpha else "RGB"}.get(mode, mode)
    else:
        raise UsageError(
            f"a PIL image of mode {mode!r} has no RGB or grayscale channels to keep with do_convert_rgb=False: "
            "pass do_convert_rgb=True (or convert it to 'L', 'RGB' or 'RGBA')"
        )
    try:
        converted = image if mode == target else image.convert(target)
    except ValueError as err:
        raise UsageError(f"cannot convert a PIL image of mode {mode!r} to {target}: {err}") from None
    array = np.asarray(converted)
    array = array[None] if array.ndim == 2 else np.moveaxis(array, -1, 0)  # (C, H, W)
    return array, to_rgb and target == "RGB"


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
        channels = array.shape[0 if first else -1]
        if channels not in CHANNEL_COUNTS:
            raise UsageError(
                f"an image must have 1, 3 or 4 channels, got {channels} ({data_format}, shape {tuple(array.shape)})"
            )
    elif array.shape[0] in CHANNEL_COUNTS and array.shape[-1] in CHANNEL_COUNTS:
        raise UsageError(
            f"an image of shape {tuple(array.shape)} could be channels-first or channels-last; "
            "pass input_data_format='channels_first' or 'channels_last'"
        )
    elif array.shape[0] in CHANNEL_COUNTS:
        first = True
    elif array.shape[-1] in CHANNEL_COUNTS:
        first = False
    else:
        raise UsageError(
            f"cannot find the channel axis of an image of shape {tuple(array.shape)}: expected {CHANNEL_COUNTS} "
            "channels first or last (2 channels, gray and alpha: pass a PIL 'LA' image)"
        )
    return array if first else np.moveaxis(array, -1, 0)


def _on_8bit_scale(array: np.ndarray, rescale: bool, image: Any) -> np.ndarray:
    """``array``'s values on the 0-255 scale by the module's policy: uint8 for whole 8-bit levels, else float32."""
    kind = array.dtype.kind
    if array.dtype == np.uint8:
        return array
    if kind == "b":
        return array.astype(np.uint8) * np.uint8(255)
    if kind == "u" and array.dtype.itemsize == 2:
        return _as_levels(array.astype(np.float32) / np.float32(257))
    if kind in "iu":
        low, high = int(array.min()), int(array.max())
        if low < 0 or high > 255:
            raise UsageError(
                f"an integer image of dtype {array.dtype} must hold 0-255 values, got [{low}, {high}]: pass uint8 "
                "(0-255), uint16 (16-bit, 0-65535) or floats in [0, 1]"
            )
        return array.astype(np.uint8)
    if kind != "f":
        raise UsageError(
            f"cannot read an image of dtype {array.dtype}: pass uint8 (0-255), uint16 (0-65535), bool or floats"
        )
    if not rescale:
        return array.astype(np.float32, copy=False)
    values = array if array.dtype == np.float64 else array.astype(np.float32)  # float16 computed in float32
    if not np.isfinite(values).all():
        raise UsageError("a float image must hold finite values, got NaN or infinity")
    low, high = float(values.min()), float(values.max())
    source = "a PIL image of mode 'F'" if isinstance(image, PIL.Image.Image) else f"a float image ({array.dtype})"
    if low < 0 or high > 255:
        raise UsageError(
            f"{source} must hold values in [0, 1] (rescaled) or 0-255 levels, got [{low:.6g}, {high:.6g}]: clip "
            "it, or pass do_rescale=False for values already scaled your way (where the processor has the setting)"
        )
    if high <= UNIT_MAX:
        return _as_levels(values * values.dtype.type(255))
    if high < LEVELS_MIN_MAX:
        raise UsageError(
            f"{source} with values in [{low:.6g}, {high:.6g}] is ambiguous: its largest value lies between 1 and 2, "
            "past a [0, 1] image's range (overshoot of a resampling or noise? clip it to [0, 1]) and too dark for "
            "0-255 levels (pass those as uint8)"
        )
    return _as_levels(values)


def _as_levels(levels: np.ndarray) -> np.ndarray:
    """0-255 values -> uint8 when every one is a whole level (within a tolerance), else float32."""
    rounded = np.round(levels)
    if np.abs(levels - rounded).max(initial=0.0) <= _LEVEL_TOLERANCE:
        return rounded.astype(np.uint8)
    return levels.astype(np.float32)


def _to_rgb(array: np.ndarray, rescale: bool) -> np.ndarray:
    """(C, H, W) on the 0-255 scale -> (3, H, W): gray repeated, alpha composited on white (transformers'
    ``convert_to_rgb`` formula, equal to PIL's ``alpha_composite`` on 8-bit values)."""
    channels = array.shape[0]
    if channels == 1:
        return np.repeat(array, 3, axis=0)
    if channels != 4:
        return array
    if array.dtype != np.uint8 and not rescale:
        raise UsageError(
            "a float image with an alpha channel and do_rescale=False: its scale, and so its white, is the caller's "
            "own; composite it (or drop the alpha channel) first, or pass do_rescale=True"
        )
    alpha = array[3:].astype(np.float64) / 255.0
    composite = alpha * array[:3] + (1.0 - alpha) * 255.0
    return np.round(composite).astype(np.uint8) if array.dtype == np.uint8 else composite.astype(np.float32)


def to_uint8(array: np.ndarray) -> np.ndarray:
    """An array :func:`read_images` gave (0-255 scale) rounded to the nearest 8-bit level (the 8-bit pipelines')."""
    if array.dtype == np.uint8:
        return array
    return np.clip(np.round(array), 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------------------------------------------
# resizing


def size_setting(size: Any) -> str:
    """A ``size`` setting (dict or transformers' ``SizeDict``) as an error message names it: its sides that are set."""
    return f"size={ {key: value for key, value in dict(size).items() if value} }"


def check_resized_size(
    image_size: tuple[int, int], new_size: tuple[int, int], setting: str, what: str = "an image"
) -> None:
    """UsageError naming ``what``, its size and the size ``setting`` when a resize of an image of ``image_size`` to
    ``new_size`` (both (height, width)) leaves a side of fewer than one pixel."""
    if min(new_size) >= 1:
        return
    height, width = image_size
    raise UsageError(
        f"{what} of {height}x{width} (height x width) resizes to {new_size[0]}x{new_size[1]} with {setting}: a side "
        "of 0 pixels; crop such an elongated image first, or resize to a larger size"
    )


def resize(image: np.ndarray, new_size: tuple[int, int], resample: Any = None) -> np.ndarray:
    """(C, H, W) -> (C, height, width) with PIL's ``resample`` filter (bilinear by default).

    ``uint8`` images go through transformers' own resize, exactly as its PIL-backend processors; float images
    (0-255 levels that are not whole, or a caller's own scale) are resized channel by channel in PIL's 32-bit float
    mode ("F"): never quantized to 8 bits, no value range imposed.
    """
    height, width = new_size
    resample = PILImageResampling.BILINEAR if resample is None else resample
    if image.dtype == np.uint8:
        return transformers_resize(
            image,
            size=(height, width),
            resample=resample,
            data_format=ChannelDimension.FIRST,
            input_data_format=ChannelDimension.FIRST,
        )
    channels = [PIL.Image.fromarray(np.ascontiguousarray(channel, dtype=np.float32)) for channel in image]  # mode "F"
    return np.stack([np.asarray(channel.resize((width, height), resample)) for channel in channels])  # (C, h, w)
