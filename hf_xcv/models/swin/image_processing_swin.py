"""Swin image processor: the original evaluation transform (short side to 256 bicubic, centre crop 224,
ImageNet mean/std). Pure PIL/numpy, no torchvision."""

from __future__ import annotations

from typing import Any

from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, PILImageResampling

from ...processing.classification import ClassificationImageProcessor
from ...utils.errors import UsageError


class XcvSwinImageProcessor(ClassificationImageProcessor):
    """The original Swin evaluation transform by default: resize the short side to ``crop / crop_pct`` (256 for a
    224 crop) with bicubic filtering, centre crop, rescale to [0, 1], normalise with ImageNet's mean and std.

    Saved as ``"image_processor_type": "XcvSwinImageProcessor"`` (transformers has no class of that name). Takes
    the arguments of transformers' image processors (``size``, ``crop_size``, ``resample``, ``do_center_crop``,
    ``image_mean``, ...) and ``crop_pct``: when set, the resize target is the short side
    ``int(crop_size / crop_pct)`` and ``size`` is derived from it. The inputs are coerced as by every hf_xcv
    classifier's processor (PIL / numpy / torch, gray and RGBA to RGB).

    An integer ``size`` is the short side (``size=256`` is ``{"shortest_edge": 256}``), as transformers' processors
    with this transform read it (``ConvNextImageProcessor``'s ``crop_pct`` pipeline); ViT's reads it as a square.
    """

    default_to_square = False  # how an integer size is read: the short side
    resample = PILImageResampling.BICUBIC
    image_mean = IMAGENET_DEFAULT_MEAN
    image_std = IMAGENET_DEFAULT_STD
    size = {"shortest_edge": 256}
    crop_size = {"height": 224, "width": 224}
    do_center_crop = True

    def __init__(self, crop_pct: float | None = None, **kwargs: Any):
        if crop_pct is not None:
            if isinstance(crop_pct, bool) or not isinstance(crop_pct, (int, float)) or not 0 < crop_pct <= 1:
                raise UsageError(f"crop_pct must be a fraction in (0, 1], got {crop_pct!r}")
            crop = kwargs.get("crop_size", self.crop_size)
            crop = crop if isinstance(crop, dict) else {"height": crop, "width": crop}
            kwargs["size"] = {"shortest_edge": int(min(crop["height"], crop["width"]) / crop_pct)}
        super().__init__(**kwargs)
        self.crop_pct = crop_pct

    @classmethod
    def for_image_size(cls, size: tuple[int, int]) -> XcvSwinImageProcessor:
        """The evaluation transform at another resolution: the short side to ``size / 0.875``, centre crop ``size``."""
        return cls(crop_size={"height": size[0], "width": size[1]}, crop_pct=224 / 256)
