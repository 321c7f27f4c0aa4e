"""The built-in shapes detection dataset, COCO files to and from datasets, and the pictures of detections."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch
from datasets import ClassLabel, Image, load_from_disk

from hf_xcv.data import (
    SHAPE_CATEGORIES,
    detection_label_names,
    load_coco_detection,
    load_coco_split,
    load_shapes_dataset,
    write_coco_detection,
)
from hf_xcv.data import shapes as shapes_module
from hf_xcv.visualization import GROUND_TRUTH_COLOURS, class_colour, detection_grid, draw_detections

SMALL = {"num_train": 24, "num_validation": 8, "num_test": 8}


@pytest.fixture(scope="module")
def small():
    return load_shapes_dataset(**SMALL)


@pytest.fixture(scope="module")
def many():
    """A few hundred images, for the statistics."""
    return load_shapes_dataset(num_train=400, num_validation=8, num_test=8, seed=3)


def _pixels(split) -> list[np.ndarray]:
    return [np.asarray(image) for image in split["image"]]


# ----------------------------------------------------------------------------------------------- shapes


def test_same_seed_same_data_other_seed_other_data(small):
    again = load_shapes_dataset(**SMALL)
    other = load_shapes_dataset(**SMALL, seed=1)
    for split in small:
        assert small[split]["annotations"] == again[split]["annotations"]
        assert all(np.array_equal(a, b) for a, b in zip(_pixels(small[split]), _pixels(again[split])))
        assert small[split]["annotations"] != other[split]["annotations"]
        assert not any(np.array_equal(a, b) for a, b in zip(_pixels(small[split]), _pixels(other[split])))


def test_splits_sizes_features_and_image_sizes(small):
    assert {name: len(split) for name, split in small.items()} == {"train": 24, "validation": 8, "test": 8}
    features = small["train"].features
    assert isinstance(features["image"], Image)
    assert isinstance(features["annotations"].feature["category_id"], ClassLabel)
    assert features["annotations"].feature["category_id"].names == SHAPE_CATEGORIES
    assert features["annotations"].feature["bbox"].length == 4
    rows = list(small["train"])
    for row in rows:
        assert row["image"].mode == "RGB" and row["image"].size == (row["width"], row["height"])
        assert 64 <= row["width"] <= 96 and 64 <= row["height"] <= 96
    assert len({(row["width"], row["height"]) for row in rows}) > 10  # sizes vary, batches need padding
    assert any(row["width"] != row["height"] for row in rows)


def test_test_split_does_not_depend_on_the_other_split_sizes(small):
    bigger = load_shapes_dataset(num_train=40, num_validation=3, num_test=12)
    assert bigger["test"]["image_id"][:8] == small["test"]["image_id"]
    assert bigger["test"]["annotations"][:8] == small["test"]["annotations"]
    assert all(np.array_equal(a, b) for a, b in zip(_pixels(bigger["test"]), _pixels(small["test"])))


def test_image_and_annotation_ids_are_unique_across_splits(small):
    image_ids = [image_id for split in small.values() for image_id in split["image_id"]]
    annotation_ids = [a["id"] for split in small.values() for row in split["annotations"] for a in row]
    assert len(set(image_ids)) == len(image_ids) == 40
    assert len(set(annotation_ids)) == len(annotation_ids) > 40
    assert min(annotation_ids) > 0  # pycocotools' matcher reads an id of 0 as "unmatched"


def test_boxes_inside_images_with_positive_size_and_bounded_areas(many):
    counted = 0
    for row in many["train"]:
        for annotation in row["annotations"]:
            x, y, w, h = annotation["bbox"]
            assert w > 0 and h > 0 and x >= 0 and y >= 0
            assert x + w <= row["width"] and y + h <= row["height"]
            assert annotation["area"] > 0
            assert annotation["category_id"] in range(len(SHAPE_CATEGORIES))
            if not annotation["iscrowd"]:
                assert annotation["area"] <= w * h
                assert max(w, h) >= 10  # the smallest square is 10.6 px a side
                counted += 1
    assert counted > 800  # 1..4 shapes on most of 400 images


def test_empty_and_crowd_fractions_are_roughly_honoured(many):
    rows = many["train"]["annotations"]
    empty = sum(not annotations for annotations in rows) / len(rows)
    crowd = sum(any(a["iscrowd"] for a in annotations) for annotations in rows) / len(rows)
    assert 0.05 <= empty <= 0.15 and 0.05 <= crowd <= 0.15  # defaults: 0.1 each
    assert all(sum(a["iscrowd"] for a in annotations) <= 1 for annotations in rows)  # one crowd region at most
    counts = [sum(not a["iscrowd"] for a in annotations) for annotations in rows]
    assert max(counts) == 4 and set(counts) == {0, 1, 2, 3, 4}

    skewed = load_shapes_dataset(num_train=200, num_validation=0, num_test=0, empty_fraction=0.4, crowd_fraction=0.3)
    rows = skewed["train"]["annotations"]
    assert 0.3 <= sum(not annotations for annotations in rows) / len(rows) <= 0.5
    assert 0.2 <= sum(any(a["iscrowd"] for a in annotations) for annotations in rows) / len(rows) <= 0.4


@pytest.mark.parametrize("category", range(len(SHAPE_CATEGORIES)))
def test_a_single_drawn_shape_fills_its_box_to_all_four_sides(category):
    rng = np.random.default_rng(category)
    for _ in range(5):
        height, width = 50, 70
        size = rng.uniform(12, 30)
        cx, cy = rng.uniform(size / 2, width - size / 2), rng.uniform(size / 2, height - size / 2)
        mask = shapes_module.shape_mask(category, cx, cy, size, rng.uniform(0, 2 * np.pi), height, width)
        shape = shapes_module._Shape(category, mask, colour=np.array([255.0, 0.0, 0.0]))
        image = shapes_module.render(np.zeros((3, height, width)), [shape], noise=0.0, rng=rng)
        (annotation,) = shapes_module.annotations([shape], image_id=7)
        drawn = (image == [255, 0, 0]).all(axis=-1)
        ys, xs = np.nonzero(drawn)
        x, y, w, h = annotation["bbox"]
        assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == (x, y, x + w, y + h)  # inside, touching all sides
        assert annotation["area"] == drawn.sum() and annotation["category_id"] == category
        assert annotation["id"] == 7 * shapes_module.ANNOTATION_ID_STRIDE + 1


def test_occluded_shapes_keep_half_their_pixels_and_areas_count_what_shows():
    """Paint generated scenes in one distinct colour per shape: each annotation's area is what shows of it."""
    for index in range(30):
        rng = np.random.default_rng(index)
        shapes = shapes_module._random_shapes(rng, 80, 90, "crowd" if index % 3 == 0 else "objects", max_objects=6)
        for number, shape in enumerate(shapes):
            shape.colour = np.array([10.0 + 40 * number, 200.0, 0.0])
        image = shapes_module.render(np.zeros((3, 80, 90)), shapes, noise=0.0, rng=rng)
        for number, (shape, annotation) in enumerate(zip(shapes, shapes_module.annotations(shapes, image_id=1))):
            shows = (image == [10 + 40 * number, 200, 0]).all(axis=-1)
            assert annotation["area"] == shows.sum() >= shapes_module.MIN_VISIBLE_FRACTION * shape.mask.sum()
            assert annotation["bbox"] == shapes_module.tight_box(shape.mask)  # amodal: the whole shape
        assert sum(shape.iscrowd for shape in shapes) == (index % 3 == 0)


def test_a_shape_that_would_hide_an_earlier_one_is_not_placed():
    small_circle = shapes_module._Shape(0, shapes_module.shape_mask(0, 20, 20, 12, 0.0, 40, 40))
    shapes = [small_circle]
    cover = shapes_module._Shape(1, shapes_module.shape_mask(1, 20, 20, 36, 0.0, 40, 40))
    assert not shapes_module._place(shapes, cover)
    assert shapes == [small_circle] and small_circle.visible.sum() == small_circle.mask.sum()
    beside = shapes_module._Shape(2, shapes_module.shape_mask(2, 32, 32, 14, 0.0, 40, 40))
    assert shapes_module._place(shapes, beside) and len(shapes) == 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"image_size": (16, 40)}, "image_size"),
        ({"image_size": (80, 64)}, "image_size"),
        ({"image_size": (64, 80, 96)}, "image_size"),
        ({"max_objects": 0}, "max_objects"),
        ({"empty_fraction": 0.7, "crowd_fraction": 0.5}, "at most 1"),
        ({"crowd_fraction": -0.1}, "crowd_fraction"),
        ({"num_test": -1}, "num_test"),
        ({"seed": -3}, "seed"),
    ],
)
def test_bad_shapes_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_shapes_dataset(**kwargs)


def test_label_names_survive_disk_transforms_and_map(small, tmp_path):
    assert detection_label_names(small) == SHAPE_CATEGORIES
    small.save_to_disk(str(tmp_path / "saved"))
    reloaded = load_from_disk(str(tmp_path / "saved"))
    assert detection_label_names(reloaded) == SHAPE_CATEGORIES
    transformed = small["train"].with_transform(lambda batch: {"n": [len(a) for a in batch["annotations"]]})
    assert detection_label_names(transformed) == SHAPE_CATEGORIES
    assert detection_label_names(small["test"].map(lambda row: row)) == SHAPE_CATEGORIES
    with pytest.raises(ValueError, match="category_id"):
        detection_label_names(small["train"].remove_columns("annotations"))


# ----------------------------------------------------------------------------------------------- COCO files


def test_coco_write_then_load_gives_the_same_data(small, tmp_path):
    root = write_coco_detection(small, tmp_path / "coco")
    assert root == tmp_path / "coco"
    coco = json.loads((root / "annotations" / "instances_train.json").read_text())
    assert set(coco) >= {"images", "annotations", "categories"}
    assert coco["categories"] == [{"id": i, "name": name} for i, name in enumerate(SHAPE_CATEGORIES)]
    assert set(coco["images"][0]) == {"id", "file_name", "width", "height"}
    assert set(coco["annotations"][0]) == {"id", "image_id", "category_id", "bbox", "area", "iscrowd"}
    assert (root / "train" / coco["images"][0]["file_name"]).is_file()
    assert not [path.name for path in (root / "annotations").iterdir() if path.suffix != ".json"]  # no temp file

    loaded = load_coco_detection(root)
    assert list(loaded) == ["train", "validation", "test"]
    for name, split in small.items():
        assert loaded[name].features == split.features
        for column in ("image_id", "width", "height", "annotations"):
            assert loaded[name][column] == split[column]
        assert all(np.array_equal(a, b) for a, b in zip(_pixels(loaded[name]), _pixels(split)))
    assert detection_label_names(loaded) == SHAPE_CATEGORIES
    only = load_coco_detection(root, splits="test")
    assert list(only) == ["test"] and only["test"]["annotations"] == small["test"]["annotations"]


def test_writing_ignores_a_transform_set_on_the_dataset(small, tmp_path):
    transformed = {"train": small["train"].with_transform(lambda batch: {"x": [0] * len(batch["image_id"])})}
    root = write_coco_detection(transformed, tmp_path / "coco")
    assert load_coco_detection(root)["train"]["annotations"] == small["train"]["annotations"]


def _write_coco_files(root: Path, split: str = "val2017", **overrides) -> Path:
    """A tiny COCO split with category ids 1 and 3 (a gap at 0 and 2), two images, three annotations."""
    (root / split).mkdir(parents=True, exist_ok=True)
    (root / "annotations").mkdir(exist_ok=True)
    for name, size in (("a.jpg", (30, 20)), ("b.png", (16, 24))):
        PIL.Image.new("L", size, 128).save(root / split / name)  # a grayscale file: decoded as RGB
    coco = {
        "images": [
            {"id": 5, "file_name": "a.jpg", "width": 30, "height": 20},
            {"id": 9, "file_name": "b.png", "width": 16, "height": 24},
        ],
        "annotations": [
            {"id": 1, "image_id": 5, "category_id": 3, "bbox": [1, 2, 10.5, 8], "area": 84.0, "iscrowd": 0},
            {"id": 2, "image_id": 5, "category_id": 1, "bbox": [0, 0, 30, 20], "area": 300, "iscrowd": 1},
            {"id": 4, "image_id": 9, "category_id": 1, "bbox": [2, 2, 4, 4], "area": 16, "iscrowd": 0},
        ],
        "categories": [{"id": 1, "name": "person", "supercategory": "x"}, {"id": 3, "name": "car"}],
    }
    coco.update(overrides)
    path = root / "annotations" / f"instances_{split}.json"
    path.write_text(json.dumps(coco))
    return path


def test_coco_category_gaps_are_named_not_available(tmp_path):
    _write_coco_files(tmp_path)
    loaded = load_coco_detection(tmp_path)
    assert list(loaded) == ["val2017"]
    split = loaded["val2017"]
    assert detection_label_names(loaded) == ["N/A", "person", "N/A", "car"]  # num_classes = max id + 1
    assert split["image_id"] == [5, 9] and split["width"] == [30, 16] and split["height"] == [20, 24]
    assert [[a["category_id"] for a in row] for row in split["annotations"]] == [[3, 1], [1]]
    assert split["annotations"][0][0]["bbox"] == [1.0, 2.0, 10.5, 8.0]
    assert split["annotations"][0][1]["iscrowd"] == 1
    assert split[0]["image"].mode == "RGB" and split[1]["image"].size == (16, 24)
    rewritten = json.loads((write_coco_detection(loaded, tmp_path / "out") / "annotations" / "instances_val2017.json")
                           .read_text())  # fmt: skip
    assert rewritten["categories"] == [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}]  # the gaps stay gaps
    same = load_coco_split(tmp_path / "out" / "annotations" / "instances_val2017.json", tmp_path / "out" / "val2017")
    assert same["annotations"] == split["annotations"] and detection_label_names(same) == detection_label_names(split)


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"images": [{"id": 5, "file_name": "gone.jpg", "width": 3, "height": 3}], "annotations": []},
         FileNotFoundError, r"gone\.jpg \(image 5\)"),
        ({"annotations": [{"id": 7, "image_id": 6, "category_id": 1, "bbox": [0, 0, 1, 1], "area": 1}]},
         ValueError, "annotation 7 refers to image_id 6"),
        ({"annotations": [{"id": 7, "image_id": 5, "category_id": 2, "bbox": [0, 0, 1, 1], "area": 1}]},
         ValueError, r"annotation 7 \(image 5\) has category_id 2, not one of \[1, 3\]"),
        ({"annotations": [{"id": 7, "image_id": 5, "category_id": 1, "bbox": [0, 0, 1], "area": 1}]},
         ValueError, r"annotation 7 \(image 5\) has bbox \[0, 0, 1\]"),
        ({"annotations": [{"id": 7, "image_id": 5, "category_id": 1, "bbox": [0, "a", 1, 1], "area": 1}]},
         ValueError, "annotation 7 .* has bbox"),
        ({"annotations": [{"id": 7, "image_id": 5, "category_id": 1, "bbox": [0, 0, 1, 1]}] * 2},
         ValueError, "annotation id 7 appears twice"),
        ({"categories": [{"id": 1, "name": "a"}, {"id": 3, "name": "a"}]}, ValueError, r"name\(s\) \['a'\]"),
        ({"images": None}, ValueError, "no 'images' list"),
    ],
)  # fmt: skip
def test_bad_coco_files_name_the_problem(tmp_path, overrides, error, message):
    path = _write_coco_files(tmp_path, **overrides)
    with pytest.raises(error, match=message) as caught:
        load_coco_split(path, tmp_path / "val2017")
    assert str(path) in str(caught.value)  # which file


def test_missing_coco_files_and_splits(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.json"):
        load_coco_split(tmp_path / "nothing.json", tmp_path)
    with pytest.raises(FileNotFoundError, match="annotations"):
        load_coco_detection(tmp_path)
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "instances_broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="instances_broken.json is not valid JSON"):
        load_coco_detection(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"\['train'\]"):
        load_coco_detection(tmp_path, splits=["train"])


def test_splits_with_different_categories_are_refused(tmp_path):
    _write_coco_files(tmp_path, "train2017")
    _write_coco_files(tmp_path, "val2017", categories=[{"id": 1, "name": "person"}, {"id": 3, "name": "bus"}])
    with pytest.raises(ValueError, match="'train2017' and 'val2017' have different categories"):
        load_coco_detection(tmp_path)
    assert list(load_coco_detection(tmp_path, splits=["val2017"])) == ["val2017"]


def test_writing_refuses_what_is_not_a_detection_dataset(small, tmp_path):
    with pytest.raises(ValueError, match="no column"):
        write_coco_detection({"train": small["train"].remove_columns("annotations")}, tmp_path)
    with pytest.raises(ValueError, match="expected a DatasetDict"):
        write_coco_detection(small["train"], tmp_path)
    with pytest.raises(ValueError, match="cannot name a folder"):
        write_coco_detection({"a/b": small["train"]}, tmp_path)


# ----------------------------------------------------------------------------------------------- pictures


def test_predicted_boxes_are_drawn_in_their_class_colour():
    black = np.zeros((30, 40, 3), dtype=np.uint8)
    picture = draw_detections(black, [[5, 8, 25, 22]], [2], scale=1, line_width=1)
    assert picture.size == (40, 30) and picture.mode == "RGB"
    pixels = np.asarray(picture)
    colour = list(class_colour(2))
    assert pixels[15, 5].tolist() == colour and pixels[15, 24].tolist() == colour  # left and right edges
    assert pixels[21, 15].tolist() == colour  # bottom edge
    assert pixels[15, 15].tolist() == [0, 0, 0] and pixels[28, 35].tolist() == [0, 0, 0]  # inside and outside
    twice = np.asarray(draw_detections(torch.zeros(3, 30, 40), torch.tensor([[5.0, 8, 25, 22]]), [2], scale=2))
    assert twice.shape == (60, 80, 3) and twice[30, 10].tolist() == colour and twice[30, 30].tolist() == [0, 0, 0]


def test_captions_thresholds_and_ground_truth_style():
    black = PIL.Image.new("RGB", (64, 48))
    boxes = np.array([[4, 20, 30, 40], [34, 20, 60, 40]])
    picture = draw_detections(black, boxes, [0, 1], scores=[0.9, 0.2], label_names=["circle", "square"],
                              score_threshold=0.5, scale=1, line_width=1)  # fmt: skip
    pixels = np.asarray(picture)
    assert pixels[30, 4].tolist() == list(class_colour(0))
    assert pixels[30, 34].tolist() == [0, 0, 0]  # scored below the threshold: not drawn
    assert (pixels[8:20, 4:40] == class_colour(0)).all(axis=-1).sum() > 40  # the caption band above the box

    truth = {"boxes": [[10, 10, 50, 40]], "labels": [1], "iscrowd": [0]}
    picture = np.asarray(draw_detections(black, np.zeros((0, 4)), [], ground_truth=truth, scale=1))
    edge = picture[10, 10:50].tolist() + picture[10:40, 10].tolist()
    assert {tuple(pixel) for pixel in edge} == set(GROUND_TRUTH_COLOURS)  # dashed, alternately white and green
    assert picture[25, 30].tolist() == [0, 0, 0]
    assert not (picture == class_colour(1)).all(axis=-1).any()  # never a prediction's colour


def test_small_images_are_upscaled_by_default_and_bad_inputs_are_named():
    assert draw_detections(np.zeros((64, 80, 3), dtype=np.uint8), [], []).size == (320, 256)  # 256 px short side
    assert draw_detections(np.ones((3, 300, 400), dtype=np.float32), [], []).size == (400, 300)
    with pytest.raises(ValueError, match=r"shape \(N, 4\)"):
        draw_detections(np.zeros((8, 8, 3)), [1, 2, 3], [0])
    with pytest.raises(ValueError, match="labels has 2 entries for 1 boxes"):
        draw_detections(np.zeros((8, 8, 3)), [[0, 0, 4, 4]], [0, 1])
    with pytest.raises(ValueError, match="label 5"):
        draw_detections(np.zeros((8, 8, 3)), [[0, 0, 4, 4]], [5], label_names=["a", "b"])
    with pytest.raises(ValueError, match="scale"):
        draw_detections(np.zeros((8, 8, 3)), [], [], scale=0)


def test_grid_tiles_the_images_row_by_row():
    tiles = [PIL.Image.new("RGB", (30, 20), (255, 0, 0)), PIL.Image.new("RGB", (40, 10), (0, 0, 255))] * 2
    tiles.append(PIL.Image.new("RGB", (10, 10), (0, 255, 0)))
    grid = detection_grid(tiles, columns=2, padding=4)
    assert grid.size == (2 * 40 + 3 * 4, 3 * 20 + 4 * 4)
    pixels = np.asarray(grid)
    assert pixels[4, 4].tolist() == [255, 0, 0] and pixels[4, 48].tolist() == [0, 0, 255]
    assert pixels[52, 4].tolist() == [0, 255, 0] and pixels[52, 60].tolist() == [255, 255, 255]
    titled = detection_grid(tiles, columns=3, titles=[f"image {i}" for i in range(5)])
    assert titled.width == 3 * 40 + 4 * 4 and titled.height > 2 * 20 + 3 * 4
    assert (np.asarray(titled)[4:12, 4:40] < 100).all(axis=-1).any()  # the title's dark text
    with pytest.raises(ValueError, match="2 titles for 5 images"):
        detection_grid(tiles, titles=["a", "b"])
