"""An integer ``size`` means what it means to the processor's counterpart in transformers: the square side for ViT's,
the short side for Swin's (transformers' crop_pct pipeline, ConvNext's) and for the detectors' (DETR's, with its
longest_edge). Every registered processor is covered: one added later fails here until its counterpart is named."""

from __future__ import annotations

import numpy as np
import pytest
import transformers

from hf_xcv import MODEL_TYPES
from hf_xcv.processing.fixed import FixedPipelineProcessor
from hf_xcv.utils.errors import UsageError

COUNTERPARTS = {  # hf_xcv's processor -> transformers' processor that reads size the same way
    "XcvViTImageProcessor": "ViTImageProcessor",
    "XcvSwinImageProcessor": "ConvNextImageProcessor",
    "XcvDetrImageProcessor": "DetrImageProcessor",
    "XcvDeformableDetrImageProcessor": "DeformableDetrImageProcessor",
}
PROCESSORS = sorted(
    {entry.image_processor for entry in MODEL_TYPES.values() if entry.image_processor is not None},
    key=lambda cls: cls.__name__,
)
RESIZING = [cls for cls in PROCESSORS if not issubclass(cls, FixedPipelineProcessor)]


def counterpart(name: str, **settings):
    return getattr(transformers, COUNTERPARTS[name])(**settings)


def test_every_resizing_processor_names_its_counterpart():
    assert sorted(cls.__name__ for cls in RESIZING) == sorted(COUNTERPARTS)


@pytest.mark.parametrize("cls", RESIZING, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("size", [64, 97])
def test_an_integer_size_is_read_as_transformers_reads_it(cls, size):
    ours, theirs = cls(size=size), counterpart(cls.__name__, size=size)
    assert dict(ours.size) == dict(theirs.size)
    image = np.random.default_rng(0).integers(0, 256, (90, 150, 3), dtype=np.uint8)
    no_crop = {"do_center_crop": False} if hasattr(ours, "do_center_crop") else {}
    got = ours(image, return_tensors="np", **no_crop)["pixel_values"]
    per_call = cls()(image, size=size, return_tensors="np", **no_crop)["pixel_values"]
    assert per_call.shape == got.shape  # given per call, the same
    if cls.__name__ != "XcvSwinImageProcessor":  # ConvNext's pipeline crops below 384 (its own rule): sizes only
        expected = theirs(image, return_tensors="np", **no_crop)["pixel_values"]
        assert got.shape == expected.shape  # the resize target, hence the shape, is transformers'


def test_swins_integer_size_is_the_short_side_not_a_square():
    from hf_xcv import XcvSwinImageProcessor

    processor = XcvSwinImageProcessor(size=256, do_center_crop=False)
    assert dict(processor.size) == {"shortest_edge": 256}
    image = np.zeros((300, 400, 3), dtype=np.uint8)
    assert processor(image, return_tensors="np")["pixel_values"].shape == (1, 3, 256, 341)


@pytest.mark.parametrize("cls", [c for c in PROCESSORS if c not in RESIZING], ids=lambda cls: cls.__name__)
def test_a_fixed_pipeline_refuses_a_size_by_name(cls):
    with pytest.raises(UsageError, match="size"):
        cls(size=64)
