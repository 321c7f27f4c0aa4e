"""XcvDetrImageProcessor: COCO annotations -> DETR targets and back, augmentations, parity, errors; detection data."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import PIL.Image
import pytest
import torch
import transformers
from datasets import Dataset
from transformers.utils import ModelOutput

from hf_xcv.data.detection import DetectionCollator, detection_transform
from hf_xcv.models.detr.image_processing_detr import DetrImageProcessor, XcvDetrImageProcessor
from hf_xcv.processing.detection import crop, size_with_aspect_ratio

MEAN = np.asarray([0.485, 0.456, 0.406])[:, None, None]
STD = np.asarray([0.229, 0.224, 0.225])[:, None, None]
SMALL = {"shortest_edge": 64, "longest_edge": 128}
SMALL_AUGMENT = {
    "augment_scales": [64, 72, 80, 88, 96],
    "augment_max_size": 160,
    "augment_crop_scales": [80, 96, 112],
    "augment_crop_size": [48, 96],
}


def _image(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _annotation(image_id: int, boxes: list[list[float]], labels: list[int], **extra) -> dict:
    objects = [
        {"bbox": box, "category_id": label, "area": box[2] * box[3], "iscrowd": 0, "id": 100 * image_id + k}
        for k, (box, label) in enumerate(zip(boxes, labels))
    ]
    for k, obj in enumerate(objects):
        obj.update({key: values[k] for key, values in extra.items()})
    return {"image_id": image_id, "annotations": objects}


def _xyxy(boxes: list[list[float]]) -> torch.Tensor:
    return torch.tensor([[x, y, x + w, y + h] for x, y, w, h in boxes], dtype=torch.float32)


# --------------------------------------------------------------------------------------------------------------
# boxes: annotations -> labels -> post-processing


def test_box_round_trip_on_a_padded_batch_gives_back_the_original_boxes():
    sizes = [(60, 80), (90, 50)]  # (height, width); the second is taller, so both get padded
    boxes = [[[5, 10, 30, 20], [40.5, 0, 39.5, 60]], [[0, 0, 50, 90], [12.25, 30, 10, 7.5], [20, 70, 5, 20]]]
    labels = [[1, 3], [0, 2, 1]]
    processor = XcvDetrImageProcessor(size=SMALL)
    out = processor(
        [_image(*s, seed=i) for i, s in enumerate(sizes)],
        annotations=[_annotation(i, b, lab) for i, (b, lab) in enumerate(zip(boxes, labels))],
        return_tensors="pt",
    )
    # 60x80 -> 64x85 (int(64 * 80 / 60)); 90x50 -> 115x64; padded to 115x85
    assert out["pixel_values"].shape == (2, 3, 115, 85)
    assert out["labels"][0]["size"].tolist() == [64, 85] and out["labels"][1]["size"].tolist() == [115, 64]
    assert out["pixel_mask"][0, :64, :85].all() and not out["pixel_mask"][0, 64:].any()
    assert not out["pixel_mask"][0, :, 85:].any() and out["pixel_mask"][1, :, 64:].sum() == 0

    for (height, width), image_boxes, label in zip(sizes, boxes, out["labels"]):
        # relative to the unpadded resized image = relative to the original image
        expected = [[(x + w / 2) / width, (y + h / 2) / height, w / width, h / height] for x, y, w, h in image_boxes]
        torch.testing.assert_close(label["boxes"], torch.tensor(expected), atol=1e-6, rtol=0)

    num_queries, num_classes = 4, 4
    logits = torch.full((2, num_queries, num_classes + 1), -10.0)
    logits[..., -1] = 10.0  # unused queries predict no-object
    pred_boxes = torch.full((2, num_queries, 4), 0.5)
    for b, label in enumerate(out["labels"]):
        count = len(label["class_labels"])
        logits[b, torch.arange(count), label["class_labels"]] = 10.0
        logits[b, :count, -1] = -10.0
        pred_boxes[b, :count] = label["boxes"]
    results = processor.post_process_object_detection(
        ModelOutput(logits=logits, pred_boxes=pred_boxes), threshold=0.5, target_sizes=sizes
    )
    for result, image_boxes, image_labels in zip(results, boxes, labels):
        torch.testing.assert_close(result["boxes"], _xyxy(image_boxes), atol=0.01, rtol=0)
        assert result["labels"].tolist() == image_labels
        assert (result["scores"] > 0.99).all()


def test_shortest_edge_uses_the_original_detr_rounding():
    assert size_with_aspect_ratio((480, 640), 800, 1333) == (800, 1066)
    assert size_with_aspect_ratio((800, 1000), 800, 1333) == (800, 1000)  # already the size: unchanged
    # the cap binds: the original rounds the short side (133) and derives the long one from it; transformers
    # keeps the unrounded 133.3 and gets 1333
    assert size_with_aspect_ratio((100, 1000), 800, 1333) == (133, 1330)
    assert size_with_aspect_ratio((1000, 100), 800, 1333) == (1330, 133)
    processor = XcvDetrImageProcessor()
    assert processor(_image(100, 1000), return_tensors="pt")["pixel_values"].shape == (1, 3, 133, 1330)


def test_height_width_and_max_height_width_sizes():
    image = _image(40, 100)
    exact = XcvDetrImageProcessor(size={"height": 30, "width": 20})(image, return_tensors="pt")
    fit = XcvDetrImageProcessor(size={"max_height": 50, "max_width": 50})(image, return_tensors="pt")
    assert exact["pixel_values"].shape == (1, 3, 30, 20)
    assert fit["pixel_values"].shape == (1, 3, 20, 50)


def test_crowd_boxes_are_kept_and_flagged():
    annotation = _annotation(1, [[1, 1, 10, 10], [20, 20, 30, 30]], [1, 2], iscrowd=[0, 1])
    label = XcvDetrImageProcessor(size=SMALL)(_image(64, 64), annotations=annotation, return_tensors="pt")["labels"][0]
    assert label["class_labels"].tolist() == [1, 2]
    assert label["iscrowd"].tolist() == [0, 1]
    assert label["iscrowd"].dtype == torch.int64 and label["boxes"].shape == (2, 4)


def test_area_scales_with_the_resize_and_boxes_can_stay_absolute_xyxy():
    annotation = _annotation(2, [[10, 20, 40, 30], [150, 90, 100, 50]], [0, 1], area=[1000.0, 37.5])
    processor = XcvDetrImageProcessor(size={"shortest_edge": 50, "longest_edge": 1000}, do_convert_annotations=False)
    label = processor(_image(100, 200), annotations=annotation, return_tensors="pt")["labels"][0]
    assert label["size"].tolist() == [50, 100] and label["orig_size"].tolist() == [100, 200]
    torch.testing.assert_close(label["area"], torch.tensor([250.0, 9.375]))  # x 0.5 * 0.5
    # absolute xyxy of the resized image; the second box is clipped to the image first (x1 250 -> 200, y1 140 -> 100)
    torch.testing.assert_close(label["boxes"], torch.tensor([[5.0, 10.0, 25.0, 25.0], [75.0, 45.0, 100.0, 50.0]]))
    assert label["boxes"].dtype == torch.float32 and label["area"].dtype == torch.float32
    assert label["image_id"].tolist() == [2]


def test_empty_annotations_give_empty_targets():
    processor = XcvDetrImageProcessor(size=SMALL)
    for objects in ([], {"bbox": [], "category_id": [], "area": [], "iscrowd": [], "id": []}):
        label = processor(_image(32, 48), {"image_id": 9, "annotations": objects}, return_tensors="pt")["labels"][0]
        assert label["boxes"].shape == (0, 4) and label["class_labels"].shape == (0,)
        assert label["class_labels"].dtype == torch.int64 and label["area"].shape == label["iscrowd"].shape == (0,)


def test_annotations_as_a_dict_of_lists_equal_a_list_of_dicts():
    listed = _annotation(3, [[1, 2, 10, 10], [5, 5, 20, 8]], [0, 4])
    columns = {key: [obj[key] for obj in listed["annotations"]] for key in listed["annotations"][0]}
    processor = XcvDetrImageProcessor(size=SMALL)
    a = processor(_image(40, 40), listed, return_tensors="pt")["labels"][0]
    b = processor(_image(40, 40), {"image_id": 3, "annotations": columns}, return_tensors="pt")["labels"][0]
    for key in a:
        assert torch.equal(a[key], b[key]), key


# --------------------------------------------------------------------------------------------------------------
# augmentation


_RECTANGLES = {  # category id -> (colour, [x, y, w, h])
    0: ((255, 0, 0), [10, 15, 40, 30]),
    1: ((0, 255, 0), [90, 60, 60, 50]),
    2: ((0, 0, 255), [60, 20, 20, 80]),
}


def _rectangles_image() -> tuple[np.ndarray, dict]:
    height, width = 120, 160
    gray = (20 + 100 * np.arange(width) / width).astype(np.uint8)  # grows left to right: shows flips
    image = np.repeat(np.broadcast_to(gray, (height, width))[..., None], 3, axis=2).copy()
    for colour, (x, y, w, h) in _RECTANGLES.values():
        image[y : y + h, x : x + w] = colour
    boxes = [box for _, box in _RECTANGLES.values()]
    return image, _annotation(5, boxes, list(_RECTANGLES))


def _colour_pixels(rgb: np.ndarray, colour: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(ys, xs) of pixels within 55 of a pure colour in every channel (the gray background is at most 120)."""
    close = (np.abs(rgb - np.asarray(colour)[:, None, None]) < 55).all(axis=0)
    return np.nonzero(close)


def _check_boxes_match_pixels(pixel_values: torch.Tensor, label: dict) -> None:
    rgb = (pixel_values.numpy() * STD + MEAN) * 255  # (3, H, W)
    height, width = label["size"].tolist()
    assert rgb.shape[1:] == (height, width)
    found = dict(zip(label["class_labels"].tolist(), label["boxes"].tolist()))
    tol = 1.5  # bilinear resampling blurs the edges by about a pixel
    for category, (colour, _) in _RECTANGLES.items():
        ys, xs = _colour_pixels(rgb, colour)
        if category not in found:  # removed by a crop: none of its pixels may remain
            assert len(xs) == 0, f"category {category} lost its box but {len(xs)} of its pixels are visible"
            continue
        cx, cy, w, h = found[category]
        x0, y0, x1, y1 = (cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height
        if len(xs) == 0:  # a sliver thinner than the blur: only possible for a tiny box
            assert min(x1 - x0, y1 - y0) < 3, (category, x0, y0, x1, y1)
            continue
        assert xs.min() >= x0 - tol and xs.max() + 1 <= x1 + tol, (category, x0, x1, xs.min(), xs.max())
        assert ys.min() >= y0 - tol and ys.max() + 1 <= y1 + tol, (category, y0, y1, ys.min(), ys.max())
        if x1 - x0 >= 4 and y1 - y0 >= 4:  # tight
            assert xs.min() <= x0 + tol and xs.max() + 1 >= x1 - tol, (category, x0, x1, xs.min(), xs.max())
            assert ys.min() <= y0 + tol and ys.max() + 1 >= y1 - tol, (category, y0, y1, ys.min(), ys.max())


def _is_flipped(pixel_values: torch.Tensor) -> bool:
    rgb = (pixel_values.numpy() * STD + MEAN) * 255
    background = (np.ptp(rgb, axis=0) < 8) & (rgb[0] < 130)
    ys, xs = np.nonzero(background)
    return np.polyfit(xs, rgb[0][ys, xs], 1)[0] < 0


def test_augmentation_moves_boxes_with_the_pixels():
    image, annotation = _rectangles_image()
    processor = XcvDetrImageProcessor(size=SMALL, **SMALL_AUGMENT)
    flips, cropped, removed = 0, 0, 0
    for seed in range(40):
        out = processor(image, annotation, return_tensors="pt", do_augment=True, generator=seed)
        label = out["labels"][0]
        _check_boxes_match_pixels(out["pixel_values"][0], label)
        flips += _is_flipped(out["pixel_values"][0])
        height, width = label["size"].tolist()
        # the augmentation's last resize is the only one: short side from the scales unless the cap binds
        assert min(height, width) in SMALL_AUGMENT["augment_scales"] or max(height, width) <= 160
        cropped += abs(width / height - 160 / 120) > 0.05
        removed += len(label["class_labels"]) < 3
    assert 12 <= flips <= 28, flips
    assert cropped >= 8, cropped  # the crop branch ran
    assert removed >= 1, removed  # some crop removed a rectangle (checked above: its pixels are gone)


def test_same_seed_same_augmentation():
    image, annotation = _rectangles_image()
    processor = XcvDetrImageProcessor(size=SMALL, **SMALL_AUGMENT)
    runs = [
        processor(image, annotation, return_tensors="pt", do_augment=True, generator=generator)
        for generator in (7, 7, np.random.default_rng(7))
    ]
    for other in runs[1:]:
        assert torch.equal(runs[0]["pixel_values"], other["pixel_values"])
        for key in runs[0]["labels"][0]:
            assert torch.equal(runs[0]["labels"][0][key], other["labels"][0][key])
    outputs = {
        tuple(processor(image, annotation, do_augment=True, generator=s, return_tensors="pt")["pixel_values"].shape)
        for s in range(6)
    }
    assert len(outputs) > 1  # different seeds, different augmentations


def test_crop_removes_empty_boxes_with_their_fields_and_shrinks_cut_areas():
    target = {
        "boxes": np.asarray([[0.0, 0.0, 10.0, 10.0], [50.0, 50.0, 60.0, 60.0], [15.0, 5.0, 25.0, 15.0]]),
        "class_labels": np.asarray([1, 2, 3]),
        "area": np.asarray([80.0, 100.0, 100.0]),
        "iscrowd": np.asarray([0, 1, 0]),
    }
    image = np.zeros((3, 64, 64), dtype=np.uint8)
    cropped, out = crop(image, target, (5, 5, 15, 20))  # top 5, left 5, 15 high, 20 wide
    assert cropped.shape == (3, 15, 20)
    assert out["class_labels"].tolist() == [1, 3] and out["iscrowd"].tolist() == [0, 0]
    np.testing.assert_allclose(out["boxes"], [[0, 0, 5, 5], [10, 0, 20, 10]])
    np.testing.assert_allclose(out["area"], [80 * 25 / 100, 100 * 100 / 100])


# --------------------------------------------------------------------------------------------------------------
# parity with transformers


def test_pixels_match_transformers_detr_processor_on_one_image():
    image = PIL.Image.fromarray(_image(480, 640))
    ours = XcvDetrImageProcessor()(image, return_tensors="pt")
    theirs = transformers.DetrImageProcessorPil()(image, return_tensors="pt")
    assert ours["pixel_values"].shape == theirs["pixel_values"].shape == (1, 3, 800, 1066)
    torch.testing.assert_close(ours["pixel_values"], theirs["pixel_values"], atol=1e-5, rtol=0)
    assert ours["pixel_values"].dtype == torch.float32


def test_pixel_mask_matches_transformers_on_a_padded_batch():
    images = [PIL.Image.fromarray(_image(60, 80)), PIL.Image.fromarray(_image(90, 50, seed=1))]
    ours = XcvDetrImageProcessor(size=SMALL)(images, return_tensors="pt")
    theirs = transformers.DetrImageProcessorPil(size=SMALL)(images, return_tensors="pt")
    assert ours["pixel_mask"].dtype == torch.int64
    assert torch.equal(ours["pixel_mask"], theirs["pixel_mask"])
    torch.testing.assert_close(ours["pixel_values"], theirs["pixel_values"], atol=1e-5, rtol=0)


def test_numpy_torch_and_pil_inputs_agree():
    array = _image(30, 40)
    processor = XcvDetrImageProcessor(size=SMALL)
    expected = processor(PIL.Image.fromarray(array), return_tensors="pt")["pixel_values"]
    for image in (array, torch.from_numpy(array.transpose(2, 0, 1).copy()), [array]):
        torch.testing.assert_close(processor(image, return_tensors="pt")["pixel_values"], expected)


# --------------------------------------------------------------------------------------------------------------
# errors


def _boxes_error(bbox, image_size=(60, 80), **kwargs) -> str:
    annotation = _annotation(7, [[1, 1, 5, 5]], [0])
    annotation["annotations"].append({"bbox": bbox, "category_id": 1, "area": 10.0, "iscrowd": 0, "id": 42})
    with pytest.raises(ValueError) as info:
        XcvDetrImageProcessor(size=SMALL, **kwargs)(_image(*image_size), annotation)
    return str(info.value)


@pytest.mark.parametrize(
    "bbox, words",
    [
        ([10, 10, -5, 5], "negative width or height"),
        ([10, 10, 0, 5], "zero width or height"),
        ([500, 500, 10, 10], "entirely outside"),
        ([math.nan, 1, 2, 3], "4 finite numbers"),
        ([1, 2, 3], "4 finite numbers"),
        ("1 2 3 4", "4 finite numbers"),
    ],
)
def test_bad_boxes_name_the_image_and_the_annotation(bbox, words):
    message = _boxes_error(bbox)
    assert "image_id 7, annotation 1 (id 42)" in message and words in message


def test_category_ids_outside_num_labels_are_named():
    annotation = _annotation(7, [[1, 1, 5, 5], [2, 2, 5, 5], [3, 3, 5, 5]], [0, 5, 91])
    with pytest.raises(ValueError, match=r"image_id 7: category ids \[5, 91\] are outside \[0, 3\)"):
        XcvDetrImageProcessor(size=SMALL, num_labels=3)(_image(20, 20), annotation)
    with pytest.raises(ValueError, match=r"category ids \[91\]"):  # per call
        XcvDetrImageProcessor(size=SMALL)(_image(20, 20), annotation, num_labels=10)
    XcvDetrImageProcessor(size=SMALL)(_image(20, 20), annotation)  # no num_labels: no check


def test_other_bad_inputs():
    processor = XcvDetrImageProcessor(size=SMALL)
    with pytest.raises(ValueError, match="got 2 image.* but 1 annotation"):
        processor([_image(20, 20), _image(20, 20)], [_annotation(1, [], [])])
    with pytest.raises(ValueError, match="channel axis"):
        processor(np.zeros((5, 8, 7), dtype=np.uint8))
    with pytest.raises(ValueError, match="image_id"):
        processor(_image(20, 20), {"annotations": []})
    with pytest.raises(ValueError, match="'category_id' must be an integer"):
        processor(_image(20, 20), {"image_id": 1, "annotations": [{"bbox": [1, 1, 2, 2], "category_id": "cat"}]})
    with pytest.raises(ValueError, match="unknown argument"):
        processor(_image(20, 20), do_agument=True)
    with pytest.raises(ValueError, match="larger than pad_size"):
        processor(_image(20, 20), pad_size={"height": 32, "width": 32})
    with pytest.raises(ValueError, match="do_pad=True"):
        processor([_image(20, 20), _image(20, 30)], do_pad=False, return_tensors="pt")
    with pytest.raises(ValueError, match="class_activation"):
        XcvDetrImageProcessor(class_activation="relu")
    with pytest.raises(ValueError, match="augment_crop_size"):
        XcvDetrImageProcessor(augment_crop_size=[600, 384])


# --------------------------------------------------------------------------------------------------------------
# save / load


def test_save_load_round_trip_keeps_settings_and_our_type_name(tmp_path):
    processor = XcvDetrImageProcessor(
        size={"max_height": 96, "max_width": 128},
        num_labels=7,
        class_activation="sigmoid",
        pad_size={"height": 128, "width": 128},
        do_convert_annotations=False,
        **SMALL_AUGMENT,
    )
    processor.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert saved["image_processor_type"] == "XcvDetrImageProcessor"
    assert not hasattr(transformers, "XcvDetrImageProcessor")
    assert saved["augment_scales"] == [64, 72, 80, 88, 96] and saved["num_labels"] == 7

    loaded = XcvDetrImageProcessor.from_pretrained(tmp_path)
    assert loaded.to_dict() == processor.to_dict()
    assert DetrImageProcessor is XcvDetrImageProcessor
    image, annotation = _rectangles_image()
    a = processor(image, annotation, return_tensors="pt", do_augment=True, generator=3)
    b = loaded(image, annotation, return_tensors="pt", do_augment=True, generator=3)
    assert a["pixel_values"].shape == (1, 3, 128, 128)
    assert torch.equal(a["pixel_values"], b["pixel_values"]) and torch.equal(a["pixel_mask"], b["pixel_mask"])
    assert torch.equal(a["labels"][0]["boxes"], b["labels"][0]["boxes"])


def test_loads_an_old_transformers_detr_config():
    old = {  # facebook/detr-resnet-50's preprocessor_config.json
        "do_normalize": True,
        "feature_extractor_type": "DetrFeatureExtractor",
        "format": "coco_detection",
        "max_size": 1333,
        "size": 800,
    }
    processor = XcvDetrImageProcessor.from_dict(old)
    assert processor.size.shortest_edge == 800 and processor.size.longest_edge == 1333


# --------------------------------------------------------------------------------------------------------------
# post-processing


def _logit(p: list) -> torch.Tensor:
    p = torch.tensor(p)
    return torch.log(p / (1 - p))


def test_sigmoid_post_processing_takes_the_top_k_query_class_pairs():
    processor = XcvDetrImageProcessor(class_activation="sigmoid")
    logits = _logit([[[0.9, 0.1], [0.2, 0.8], [0.7, 0.6]]])  # (1, 3 queries, 2 classes)
    pred_boxes = torch.tensor([[[0.5, 0.5, 0.2, 0.2], [0.25, 0.25, 0.5, 0.5], [0.75, 0.5, 0.5, 1.0]]])
    outputs = {"logits": logits, "pred_boxes": pred_boxes}
    result = processor.post_process_object_detection(outputs, threshold=0.5, top_k=3)[0]
    torch.testing.assert_close(result["scores"], torch.tensor([0.9, 0.8, 0.7]))
    assert result["labels"].tolist() == [0, 1, 0]
    expected = torch.tensor([[0.4, 0.4, 0.6, 0.6], [0.0, 0.0, 0.5, 0.5], [0.5, 0.0, 1.0, 1.0]])
    torch.testing.assert_close(result["boxes"], expected)  # target_sizes=None: normalised xyxy

    four = processor.post_process_object_detection(outputs, threshold=0.5, top_k=4)[0]
    assert four["labels"].tolist() == [0, 1, 0, 1]  # query 2 gives two detections
    torch.testing.assert_close(four["boxes"][3], expected[2])
    assert len(processor.post_process_object_detection(outputs, threshold=0.75, top_k=4)[0]["scores"]) == 2
    everything = processor.post_process_object_detection(outputs, threshold=0.0, top_k=100)[0]
    assert len(everything["scores"]) == 6
    scaled = processor.post_process_object_detection(outputs, 0.5, torch.tensor([[100, 200]]), top_k=1)[0]
    torch.testing.assert_close(scaled["boxes"], torch.tensor([[80.0, 40.0, 120.0, 60.0]]))


def test_softmax_post_processing_threshold_drops_no_object_and_low_scores():
    processor = XcvDetrImageProcessor()
    logits = torch.tensor([[[4.0, 0.0, 0.0], [0.0, 0.0, 4.0], [0.0, 0.8, 0.5]]])  # last column: no-object
    pred_boxes = torch.full((1, 3, 4), 0.5)
    outputs = ModelOutput(logits=logits, pred_boxes=pred_boxes)
    kept = processor.post_process_object_detection(outputs, threshold=0.5)[0]
    assert kept["labels"].tolist() == [0]  # query 1 is no-object; query 2 scores 0.46
    everything = processor.post_process_object_detection(outputs, threshold=0.0)[0]
    assert everything["labels"].tolist() == [0, 0, 1] and len(everything["boxes"]) == 3
    probs = logits.softmax(-1)[0, :, :-1].max(-1).values
    torch.testing.assert_close(everything["scores"], probs)
    with pytest.raises(ValueError, match="target_sizes"):
        processor.post_process_object_detection(outputs, target_sizes=[(10, 10), (20, 20)])


@dataclass
class _DetectionOutput(ModelOutput):
    logits: torch.Tensor | None = None
    pred_boxes: torch.Tensor | None = None


class _FakeDetector(transformers.PreTrainedModel):
    """Predicts one 'dog' box covering the middle half of the (unpadded) image."""

    config_class = transformers.PretrainedConfig
    base_model_prefix = "fake"

    def __init__(self, config):
        super().__init__(config)
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.post_init()

    def forward(self, pixel_values, pixel_mask=None, **kwargs):
        assert pixel_mask is not None and pixel_mask.shape == (1, *pixel_values.shape[-2:])
        logits = torch.tensor([[[-5.0, 5.0, -5.0], [-5.0, -5.0, 5.0]]]) + self.weight
        pred_boxes = torch.tensor([[[0.5, 0.5, 0.5, 0.5], [0.1, 0.1, 0.1, 0.1]]])
        return _DetectionOutput(logits=logits, pred_boxes=pred_boxes)


def test_works_in_the_object_detection_pipeline():
    config = transformers.PretrainedConfig(id2label={0: "cat", 1: "dog"}, label2id={"cat": 0, "dog": 1})
    detector = transformers.pipeline(
        "object-detection", model=_FakeDetector(config).eval(), image_processor=XcvDetrImageProcessor(size=SMALL)
    )
    predictions = detector(PIL.Image.fromarray(_image(60, 80)))
    assert len(predictions) == 1 and predictions[0]["label"] == "dog" and predictions[0]["score"] > 0.99
    assert predictions[0]["box"] == {"xmin": 20, "ymin": 15, "xmax": 60, "ymax": 45}  # in original pixels


# --------------------------------------------------------------------------------------------------------------
# data: collator and datasets transform


def test_collator_pads_and_keeps_labels():
    features = [
        {"pixel_values": torch.ones(3, 10, 20), "labels": {"boxes": torch.tensor([[0.5, 0.5, 0.2, 0.2]])}},
        {"pixel_values": np.full((3, 16, 12), 2.0, dtype=np.float32), "labels": {"boxes": np.zeros((0, 4))}},
    ]
    batch = DetectionCollator()(features)
    assert batch["pixel_values"].shape == (2, 3, 16, 20) and batch["pixel_mask"].shape == (2, 16, 20)
    assert batch["pixel_mask"].dtype == torch.int64
    assert batch["pixel_mask"][0, :10, :20].all() and batch["pixel_mask"][0].sum() == 200
    assert batch["pixel_mask"][1, :16, :12].all() and batch["pixel_mask"][1].sum() == 192
    assert (batch["pixel_values"][0, :, 10:] == 0).all() and (batch["pixel_values"][1, :, :, 12:] == 0).all()
    assert torch.equal(batch["labels"][0]["boxes"], features[0]["labels"]["boxes"])
    assert batch["labels"][1]["boxes"].shape == (0, 4)

    fixed = DetectionCollator(XcvDetrImageProcessor(pad_size={"height": 32, "width": 24}))(features)
    assert fixed["pixel_values"].shape == (2, 3, 32, 24)
    assert DetectionCollator(pad_size=(20, 20))(features[:1])["pixel_mask"].shape == (1, 20, 20)
    with pytest.raises(ValueError, match="empty batch"):
        DetectionCollator()([])
    with pytest.raises(ValueError, match="no 'labels'"):
        DetectionCollator()([features[0], {"pixel_values": torch.ones(3, 4, 4)}])


def test_detection_transform_on_a_coco_layout_dataset():
    image, annotation = _rectangles_image()
    rows = {
        "image": [PIL.Image.fromarray(image), PIL.Image.fromarray(_image(50, 70))],
        "image_id": [5, 6],
        "annotations": [annotation["annotations"], []],
    }
    processor = XcvDetrImageProcessor(size=SMALL, num_labels=3, **SMALL_AUGMENT)
    plain = Dataset.from_dict(rows).with_transform(detection_transform(processor))
    first = plain[0]
    assert first["pixel_values"].shape == (3, 64, 85)  # unpadded
    assert first["labels"]["class_labels"].tolist() == [0, 1, 2]
    assert plain[1]["labels"]["boxes"].shape == (0, 4)
    batch = DetectionCollator()([plain[0], plain[1]])
    assert batch["pixel_values"].shape == (2, 3, 64, 89)  # 50x70 -> 64x89
    assert [label["image_id"].item() for label in batch["labels"]] == [5, 6]

    def augmented_runs(seed):
        data = Dataset.from_dict(rows).with_transform(detection_transform(processor, augment=True, seed=seed))
        return [data[0] for _ in range(4)]

    a, b = augmented_runs(0), augmented_runs(0)
    for x, y in zip(a, b):  # reproducible
        assert torch.equal(x["pixel_values"], y["pixel_values"])
        assert torch.equal(x["labels"]["boxes"], y["labels"]["boxes"])
    first_pixels = a[0]["pixel_values"]
    assert any(  # each visit of the same row draws a new augmentation
        x["pixel_values"].shape != first_pixels.shape or not torch.equal(x["pixel_values"], first_pixels) for x in a[1:]
    )
    _check_boxes_match_pixels(a[0]["pixel_values"], a[0]["labels"])
