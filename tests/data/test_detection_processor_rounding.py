"""The DETR-style processors' resize rounding: the original DETR's by default, transformers' exactly where a config
written by transformers is loaded (or ``resize_rounding="transformers"`` is asked for); the saved config says which."""

from __future__ import annotations

import json

import numpy as np
import PIL.Image
import pytest
import torch
import transformers
from transformers import AutoImageProcessor

import hf_xcv  # noqa: F401  (registers the processors)
from hf_xcv.models.deformable_detr.image_processing_deformable_detr import XcvDeformableDetrImageProcessor
from hf_xcv.models.detr.image_processing_detr import XcvDetrImageProcessor
from hf_xcv.processing.detection import size_with_aspect_ratio

SMALL = {"shortest_edge": 48, "longest_edge": 64}
# (height, width): the longest edge caps the first three (the original gives 63, transformers 64), not the last.
SIZES = [(20, 27), (27, 20), (20, 45), (30, 36)]
PAIRS = [
    (XcvDetrImageProcessor, transformers.DetrImageProcessorPil),
    (XcvDeformableDetrImageProcessor, transformers.DeformableDetrImageProcessorPil),
]
IDS = ["detr", "deformable_detr"]


def _image(height: int, width: int) -> PIL.Image.Image:
    return PIL.Image.fromarray(np.random.default_rng(height * width).integers(0, 256, (height, width, 3), np.uint8))


def _annotation(height: int, width: int) -> dict:
    boxes = [[1, 2, width / 2, height / 3], [width / 3, height / 4, width / 2, height / 2]]
    objects = [
        {"id": k, "image_id": 9, "bbox": box, "category_id": k + 1, "area": box[2] * box[3] * 0.8, "iscrowd": 0}
        for k, box in enumerate(boxes)
    ]
    return {"image_id": 9, "annotations": objects}


def _assert_same_as_transformers(ours, theirs) -> None:
    """Per image (transformers normalises boxes to the padded canvas of a batch; hf_xcv, as the original, to the
    image): the sizes and pixels identical, every label equal (to float32 rounding)."""
    for height, width in SIZES:
        image, annotation = _image(height, width), _annotation(height, width)
        a = ours(image, annotations=annotation, return_tensors="pt")
        b = theirs(image, annotations=annotation, return_tensors="pt")
        assert a["pixel_values"].shape == b["pixel_values"].shape, (height, width)
        assert torch.equal(a["pixel_values"], b["pixel_values"]) and torch.equal(a["pixel_mask"], b["pixel_mask"])
        label, expected = a["labels"][0], b["labels"][0]
        assert label.keys() == expected.keys()
        for key in expected:
            torch.testing.assert_close(label[key], expected[key], atol=1e-6, rtol=1e-6, msg=key)


def test_the_two_roundings_and_transformers_own_function_agree_where_they_should():
    from transformers.image_transforms import get_size_with_aspect_ratio

    for height in range(20, 90, 3):
        for width in range(20, 130, 7):
            for short, long in ((48, 64), (800, 1333), (480, 640)):
                theirs = get_size_with_aspect_ratio((height, width), short, long)
                assert size_with_aspect_ratio((height, width), short, long, "transformers") == theirs
    assert size_with_aspect_ratio((20, 27), 48, 64) == (47, 63)  # the original DETR's
    assert size_with_aspect_ratio((20, 27), 48, 64, "transformers") == (47, 64)


@pytest.mark.parametrize("ours_class, theirs_class", PAIRS, ids=IDS)
def test_a_config_written_by_transformers_loads_with_its_sizes_and_pixels(ours_class, theirs_class, tmp_path):
    theirs = theirs_class(size=SMALL)
    theirs.save_pretrained(tmp_path)
    loaded = ours_class.from_pretrained(tmp_path)
    assert loaded.resize_rounding == "transformers"
    _assert_same_as_transformers(loaded, theirs)
    # as hf_xcv converts a transformers checkpoint: the same settings under hf_xcv's type name
    converted = json.loads((tmp_path / "preprocessor_config.json").read_text())
    converted["image_processor_type"] = ours_class.__name__
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(converted))
    auto = AutoImageProcessor.from_pretrained(tmp_path)
    assert type(auto) is ours_class and auto.resize_rounding == "transformers"
    _assert_same_as_transformers(auto, theirs)


@pytest.mark.parametrize("ours_class, theirs_class", PAIRS, ids=IDS)
def test_a_new_processor_keeps_the_original_rounding_unless_asked(ours_class, theirs_class, tmp_path):
    original = ours_class(size=SMALL)
    assert original.resize_rounding == "original"
    assert original(_image(20, 27), return_tensors="pt")["pixel_values"].shape[-2:] == (47, 63)
    asked = ours_class(size=SMALL, resize_rounding="transformers")
    _assert_same_as_transformers(asked, theirs_class(size=SMALL))
    per_call = original(_image(20, 27), return_tensors="pt", resize_rounding="transformers")
    assert per_call["pixel_values"].shape[-2:] == (47, 64)

    asked.save_pretrained(tmp_path / "asked")
    saved = json.loads((tmp_path / "asked" / "preprocessor_config.json").read_text())
    assert saved["resize_rounding"] == "transformers"
    assert AutoImageProcessor.from_pretrained(tmp_path / "asked").resize_rounding == "transformers"
    original.save_pretrained(tmp_path / "original")
    saved = json.loads((tmp_path / "original" / "preprocessor_config.json").read_text())
    assert saved["resize_rounding"] == "original"
    del saved["resize_rounding"]  # what hf_xcv saved before the setting existed: made with the original rounding
    assert ours_class.from_dict(saved).resize_rounding == "original"


def test_an_old_transformers_feature_extractor_config_loads_with_transformers_rounding():
    old = {"feature_extractor_type": "DetrFeatureExtractor", "format": "coco_detection", "max_size": 64, "size": 48}
    processor = XcvDetrImageProcessor.from_dict(old)
    assert processor.resize_rounding == "transformers" and processor.size.longest_edge == 64
    assert processor(_image(20, 27), return_tensors="pt")["pixel_values"].shape[-2:] == (47, 64)


def test_an_unknown_rounding_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"resize_rounding must be one of \('original', 'transformers'\)"):
        XcvDetrImageProcessor(resize_rounding="nearest")


def test_augmentation_resizes_with_the_chosen_rounding():
    settings = {"augment_scales": [48], "augment_max_size": 64, "augment_flip_prob": 0.0}
    shapes = {
        rounding: {
            tuple(
                XcvDetrImageProcessor(size=SMALL, resize_rounding=rounding, **settings)(
                    _image(20, 27), return_tensors="pt", do_augment=True, generator=seed
                )["pixel_values"].shape[-2:]
            )
            for seed in range(6)  # half of the draws resize without a crop: the whole 20x27 image to 48 / 64
        }
        for rounding in ("original", "transformers")
    }
    assert (47, 63) in shapes["original"] and (47, 64) in shapes["transformers"]
    assert (47, 64) not in shapes["original"]
