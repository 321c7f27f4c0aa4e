"""The input pipeline of hf_xcv's image classifiers (ViT's, Swin's processors): resize, optional centre crop, rescale,
normalise, after coercing whatever image the user passes. Pure PIL/numpy, no torchvision."""

from __future__ import annotations

from typing import Any

import numpy as np
from transformers.image_processing_backends import PilBackend
from transformers.image_processing_utils import BatchFeature
from transformers.image_transforms import get_resize_output_image_size, get_size_with_aspect_ratio
from transformers.image_utils import (
    IMAGENET_STANDARD_MEAN,
    IMAGENET_STANDARD_STD,
    ChannelDimension,
    PILImageResampling,
    SizeDict,
    get_image_size_for_max_height_width,
)

from ..remote_code import RemoteCodeMixin
from ..utils.errors import UsageError
from .input_policy import check_resized_size, read_images, size_setting
from .input_policy import resize as resize_image


class ClassificationImageProcessor(RemoteCodeMixin, PilBackend):
    """transformers' image-processor arguments and pipeline (its ``ViTImageProcessor``'s defaults), with hf_xcv's
    input reading first (:mod:`hf_xcv.processing.input_policy`): PIL images, numpy arrays (HW, HWC or CHW) and torch
    tensors, one image or a batch; floats in [0, 1] are never rescaled twice, 16-bit images are scaled to 8 bits'
    range, grayscale and palette images become RGB and alpha is composited on white; anything else raises a
    ValueError that says what it got. ``uint8`` and 8-bit PIL images give transformers' pixels exactly.

    Args (all optional, also accepted per call):
        do_resize / size: resize to ``{"height", "width"}`` (or ``{"shortest_edge"}``).
        resample: PIL resampling filter (bilinear by default).
        do_center_crop / crop_size: center crop to ``{"height", "width"}`` after resizing.
        do_rescale / rescale_factor: multiply by 1/255 by default.
        do_normalize / image_mean / image_std: per-channel normalisation (0.5, 0.5, 0.5 by default).
        do_convert_rgb: grayscale -> 3 channels, alpha composited on white, other modes to RGB (default True).

    A family's processor subclasses it with the original's evaluation transform as its defaults, under a saved name
    of its own (never one of transformers' classes).
    """

    model_input_names = ["pixel_values"]
    resample = PILImageResampling.BILINEAR
    image_mean = IMAGENET_STANDARD_MEAN
    image_std = IMAGENET_STANDARD_STD
    size = {"height": 224, "width": 224}
    crop_size = {"height": 224, "width": 224}
    do_resize = True
    do_center_crop = False
    do_rescale = True
    do_normalize = True
    do_convert_rgb = True

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("auto_map", None)  # a saved folder's, not a setting: every save writes the registry's
        super().__init__(**kwargs)

    @classmethod
    def for_image_size(cls, size: tuple[int, int]) -> ClassificationImageProcessor:
        """The processor a model trained from scratch at ``size`` (height, width) uses: a direct resize."""
        return cls(size={"height": size[0], "width": size[1]})

    def preprocess(self, images: Any, *args: Any, **kwargs: Any) -> BatchFeature:
        to_rgb = kwargs.pop("do_convert_rgb", None)
        to_rgb = self.do_convert_rgb if to_rgb is None else to_rgb
        rescale = kwargs.get("do_rescale")
        rescale = self.do_rescale if rescale is None else rescale
        data_format = kwargs.pop("input_data_format", None)
        arrays = read_images(images, to_rgb=bool(to_rgb), data_format=data_format, rescale=bool(rescale))
        return super().preprocess(arrays, *args, input_data_format="channels_first", do_convert_rgb=False, **kwargs)

    def resize(self, image: np.ndarray, size: SizeDict, resample: Any = None, **kwargs: Any) -> np.ndarray:
        """transformers' resize of a (C, H, W) image to ``size`` (its ``PilBackend``'s sizes and, for ``uint8``
        images, its pixels), refusing a side of 0 pixels by name and resizing float images without quantizing them
        (:func:`hf_xcv.processing.input_policy.resize`)."""
        new_size = resized_size(image.shape[-2:], size)
        check_resized_size(image.shape[-2:], new_size, size_setting(size))
        return resize_image(image, new_size, resample)


def resized_size(image_size: tuple[int, int], size: SizeDict) -> tuple[int, int]:
    """The (height, width) transformers' PIL backend resizes an image of ``image_size`` to for ``size``."""
    height, width = image_size
    if size.shortest_edge and size.longest_edge:
        return get_size_with_aspect_ratio((height, width), size.shortest_edge, size.longest_edge)
    if size.shortest_edge:
        return get_resize_output_image_size(
            np.broadcast_to(np.uint8(0), (1, height, width)),  # only its shape is read
            size=size.shortest_edge,
            default_to_square=False,
            input_data_format=ChannelDimension.FIRST,
        )
    if size.max_height and size.max_width:
        return get_image_size_for_max_height_width((height, width), size.max_height, size.max_width)
    if size.height and size.width:
        return size.height, size.width
    raise UsageError(
        "Size must contain 'height' and 'width' keys, or 'max_height' and 'max_width', or 'shortest_edge' key. Got"
        f" {size}."
    )
