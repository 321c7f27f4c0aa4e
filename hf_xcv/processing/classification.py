"""The input pipeline of hf_xcv's image classifiers (ViT's, Swin's processors): resize, optional centre crop, rescale,
normalise, after coercing whatever image the user passes. Pure PIL/numpy, no torchvision."""

from __future__ import annotations

from typing import Any

from transformers.image_processing_backends import PilBackend
from transformers.image_processing_utils import BatchFeature
from transformers.image_utils import IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, PILImageResampling

from ..remote_code import RemoteCodeMixin
from .images import prepare_images


class ClassificationImageProcessor(RemoteCodeMixin, PilBackend):
    """transformers' image-processor arguments and pipeline (its ``ViTImageProcessor``'s defaults), with hf_xcv's
    input coercion first: PIL images, numpy arrays (HW, HWC or CHW) and torch tensors, one image or a batch,
    grayscale and RGBA converted to RGB; anything else raises a ValueError that says what it got.

    Args (all optional, also accepted per call):
        do_resize / size: resize to ``{"height", "width"}`` (or ``{"shortest_edge"}``).
        resample: PIL resampling filter (bilinear by default).
        do_center_crop / crop_size: center crop to ``{"height", "width"}`` after resizing.
        do_rescale / rescale_factor: multiply by 1/255 by default.
        do_normalize / image_mean / image_std: per-channel normalisation (0.5, 0.5, 0.5 by default).
        do_convert_rgb: grayscale -> 3 channels, RGBA -> RGB (default True).

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
        data_format = kwargs.pop("input_data_format", None)
        data_format = getattr(data_format, "value", data_format)
        arrays = prepare_images(images, to_rgb=bool(to_rgb), data_format=data_format)
        return super().preprocess(arrays, *args, input_data_format="channels_first", do_convert_rgb=False, **kwargs)
