"""Detection datasets as users have them: the Hub's layout (``objects`` with a ``ClassLabel`` category, cppe-5's and
transformers' object-detection guide's), image folders with a ``metadata.jsonl``, COCO folders whose validation split
is ``val``, category ids with gaps; through the loaders, the processor, the transform and the collator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, List, Sequence, Value, load_from_disk

from hf_xcv.data import detection_label_names, load_coco_detection, write_coco_detection
from hf_xcv.data.coco import find_split, load_detection_dataset, load_detection_folder, split_role
from hf_xcv.data.detection import DetectionCollator, check_detection_dataset, detection_transform, row_annotations
from hf_xcv.data.shapes import detection_label_maps
from hf_xcv.models.deformable_detr.image_processing_deformable_detr import XcvDeformableDetrImageProcessor
from hf_xcv.models.detr.image_processing_detr import XcvDetrImageProcessor
from hf_xcv.utils.errors import UsageError

NAMES = ["Coverall", "Face_Shield", "Gloves"]
SMALL = {"shortest_edge": 48, "longest_edge": 64}


def hub_features(names: list[str] = NAMES, list_of_dicts: bool = False, fixed_length: bool = True) -> Features:
    """cppe-5's features: ``objects`` a ``Sequence`` of a dict (stored as a dict of lists), or a ``List`` of dicts."""
    bbox = Sequence(Value("float32"), length=4 if fixed_length else -1)
    box = {"id": Value("int64"), "area": Value("int64"), "bbox": bbox, "category": ClassLabel(names=names)}
    objects = List(box) if list_of_dicts else Sequence(box)
    return Features(
        {"image_id": Value("int64"), "image": Image(), "width": Value("int32"), "height": Value("int32"),
         "objects": objects}
    )  # fmt: skip


def hub_rows(count: int, first_id: int = 0, list_of_dicts: bool = False) -> dict[str, list]:
    """``count`` images 40x50 (height x width) with two boxes each: categories 0 and 2."""
    rng = np.random.default_rng(first_id)
    rows: dict[str, list] = {"image_id": [], "image": [], "width": [], "height": [], "objects": []}
    for i in range(count):
        image_id = first_id + i
        boxes = {"id": [10 * image_id + 1, 10 * image_id + 2], "area": [120, 64],
                 "bbox": [[2, 3, 12, 10], [30, 20, 8, 8]], "category": [0, 2]}  # fmt: skip
        if list_of_dicts:
            boxes = [dict(zip(boxes, values)) for values in zip(*boxes.values())]
        rows["image_id"].append(image_id)
        rows["image"].append(PIL.Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)))
        rows["width"].append(50)
        rows["height"].append(40)
        rows["objects"].append(boxes)
    return rows


def hub_dataset(list_of_dicts: bool = False, **splits: int) -> DatasetDict:
    """A DatasetDict in the Hub's layout; ``splits`` maps a split name to its number of images (train 3, test 2)."""
    splits = splits or {"train": 3, "test": 2}
    features = hub_features(list_of_dicts=list_of_dicts)
    return DatasetDict(
        {
            name: Dataset.from_dict(hub_rows(count, 100 * k, list_of_dicts), features=features)
            for k, (name, count) in enumerate(splits.items())
        }
    )


def _image(height: int = 40, width: int = 50) -> PIL.Image.Image:
    return PIL.Image.fromarray(np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8))


# ----------------------------------------------------------------------------------------------- the Hub's layout


@pytest.mark.parametrize("list_of_dicts", [False, True], ids=["dict-of-lists", "list-of-dicts"])
def test_label_names_come_from_the_objects_classlabel(list_of_dicts, tmp_path):
    data = hub_dataset(list_of_dicts)
    assert detection_label_names(data) == NAMES
    data.save_to_disk(str(tmp_path / "saved"))
    assert load_detection_dataset(tmp_path / "saved")["train"].features == data["train"].features
    assert detection_label_names(load_from_disk(str(tmp_path / "saved"))) == NAMES
    assert [a["category_id"] for a in row_annotations(data["train"][0])] == [0, 2]


def test_the_processor_takes_a_hub_row_as_transformers_guide_converts_it():
    """``{"image_id", "objects"}`` (both sequence forms) gives the labels of the COCO form transformers' guide builds
    from it (``{"image_id", "annotations": [{"image_id", "category_id", "bbox", "iscrowd", "area"}]}``)."""
    row = hub_dataset(train=1)["train"][0]
    objects = row["objects"]
    guide = {
        "image_id": row["image_id"],
        "annotations": [
            {"image_id": row["image_id"], "category_id": c, "bbox": b, "iscrowd": 0, "area": a}
            for c, b, a in zip(objects["category"], objects["bbox"], objects["area"])
        ],
    }
    as_list = [dict(zip(objects, values)) for values in zip(*objects.values())]
    for processor in (XcvDetrImageProcessor(size=SMALL, num_labels=3), XcvDeformableDetrImageProcessor(size=SMALL)):
        expected = processor(row["image"], annotations=guide, return_tensors="pt")["labels"][0]
        for form in (objects, as_list):
            found = processor(row["image"], annotations={"image_id": row["image_id"], "objects": form},
                              return_tensors="pt")["labels"][0]  # fmt: skip
            assert found.keys() == expected.keys()
            for key in expected:
                assert torch.equal(found[key], expected[key]), key
        assert expected["class_labels"].tolist() == [0, 2]


@pytest.mark.parametrize(
    "objects, message",
    [
        ({"bbox": [[1, 2, 3]], "category": [0]}, r"image_id 7, annotation 0: 'bbox' must be 4 finite numbers"),
        ({"bbox": [[1, 2, 3, 4]], "category": ["Gloves"]}, r"image_id 7, object 0 has category 'Gloves', a name"),
        ({"bbox": [[1, 2, 3, 4]], "category": [-1]}, r"image_id 7, annotation 0: 'category_id' must be an integer"),
        ({"bbox": [[1, 2, 3, 4]], "category": [3]}, r"image_id 7: category ids \[3\] are outside \[0, 3\)"),
        ({"bbox": [[1, 2, 3, 4], [0, 0, 1, 1]], "category": [0]},
         r"image_id 7: 'objects' as a dict must hold lists of one"),
        ({"category": [0]}, r"image_id 7, object 0 needs a 'bbox'"),
    ],
)  # fmt: skip
def test_the_processor_refuses_bad_objects_naming_the_image(objects, message):
    with pytest.raises(UsageError, match=message):
        XcvDetrImageProcessor(size=SMALL, num_labels=3)(_image(), annotations={"image_id": 7, "objects": objects})


def test_transform_and_collator_read_a_hub_layout_dataset():
    data = hub_dataset(train=3)
    processor = XcvDetrImageProcessor(size=SMALL, num_labels=3)
    train = data["train"].with_transform(detection_transform(processor, augment=True, seed=0))
    batch = DetectionCollator(processor)([train[i] for i in range(3)])
    assert batch["pixel_values"].shape[:2] == (3, 3) and batch["pixel_mask"].shape[0] == 3
    assert [label["class_labels"].tolist() for label in batch["labels"]] == [[0, 2]] * 3
    assert [label["image_id"].item() for label in batch["labels"]] == [0, 1, 2]
    with pytest.raises(UsageError, match=r"no column\(s\) \['annotations or objects'\]"):
        data["train"].remove_columns("objects").with_transform(detection_transform(processor))[0]


def test_a_hub_layout_dataset_writes_as_a_coco_folder(tmp_path):
    data = hub_dataset(train=2, test=1)
    loaded = load_coco_detection(write_coco_detection(data, tmp_path / "coco"))
    assert detection_label_names(loaded) == NAMES
    row = loaded["train"][1]
    assert [a["category_id"] for a in row["annotations"]] == [0, 2]
    assert [a["bbox"] for a in row["annotations"]] == [[2, 3, 12, 10], [30, 20, 8, 8]]
    assert [a["id"] for a in row["annotations"]] == [11, 12] and row["annotations"][0]["area"] == 120
    rows = hub_rows(2)
    rows["objects"] = [{"bbox": [[1, 1, 4, 4]], "category": [1], "id": [1], "area": [16]}] * 2  # ids repeat
    features = hub_features()
    repeated = DatasetDict(train=Dataset.from_dict(rows, features=features), test=data["test"])
    reloaded = load_coco_detection(write_coco_detection(repeated, tmp_path / "repeated"))["train"]
    assert [a["id"] for row in reloaded["annotations"] for a in row] == [1, 2]


# ----------------------------------------------------------------------------------------------- checking every row


def test_malformed_rows_are_refused_naming_the_split_and_the_image():
    """What ``datasets`` lets through: a box of 3 numbers (a bbox feature without a fixed length), a category of -1
    (a ClassLabel's "no label"), a box outside its image, a repeated image id."""
    features = hub_features(fixed_length=False)
    rows = hub_rows(4, first_id=5)
    rows["objects"][1] = {"id": [1], "area": [1], "bbox": [[1.0, 2.0, 3.0]], "category": [0]}
    rows["objects"][2] = {"id": [2], "area": [1], "bbox": [[1.0, 2.0, 3.0, 4.0]], "category": [-1]}
    rows["objects"][3] = {"id": [3], "area": [1], "bbox": [[60.0, 2.0, 3.0, 4.0]], "category": [1]}
    data = DatasetDict(train=Dataset.from_dict(rows, features=features))
    with pytest.raises(UsageError) as caught:
        check_detection_dataset(data, NAMES, "my-data")
    message = str(caught.value)
    assert message.startswith("split 'train' of my-data has 3 bad row(s)")
    assert "image_id 6: object 0 has bbox [1.0, 2.0, 3.0]: expected [x, y, width, height]" in message
    assert "image_id 7: object 0 has category -1, not one of the dataset's 3 categories" in message
    assert "image_id 8: object 0 has bbox [60.0, 2.0, 3.0, 4.0], empty inside the 50x40" in message
    rows = hub_rows(2)
    rows["image_id"] = [4, 4]
    with pytest.raises(UsageError, match="image_id 4 is not unique in the split"):
        check_detection_dataset(DatasetDict(val=Dataset.from_dict(rows, features=hub_features())), NAMES)
    check_detection_dataset(hub_dataset(), NAMES)  # a good one passes


def test_a_category_that_is_no_classlabel_is_refused_with_what_to_do():
    features = hub_features()
    features["objects"]["category"] = List(Value("string"))
    rows = hub_rows(1)
    rows["objects"][0]["category"] = ["Coverall", "Gloves"]
    with pytest.raises(UsageError, match=r"objects.category is Value\('string'\), not a ClassLabel"):
        detection_label_names(Dataset.from_dict(rows, features=features))


# ----------------------------------------------------------------------------------------------- metadata.jsonl


def _write_folder(root: Path, lines: list[dict], sizes: dict[str, tuple[int, int]] | None = None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for line in lines:
        width, height = (sizes or {}).get(line["file_name"], (50, 40))
        PIL.Image.new("RGB", (width, height), "white").save(root / line["file_name"])
    (root / "metadata.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_an_image_folder_with_metadata_jsonl_and_category_names(tmp_path):
    _write_folder(tmp_path / "train", [
        {"file_name": "a.png", "objects": {"bbox": [[1, 2, 10, 8]], "category": ["dog"]}},
        {"file_name": "b.jpg", "objects": {"bbox": [[0, 0, 5, 5], [3, 3, 4, 4]], "categories": ["cat", "dog"]}},
    ], sizes={"b.jpg": (30, 20)})  # fmt: skip
    _write_folder(tmp_path / "val", [{"file_name": "c.png", "objects": {"bbox": [], "category": []}}])
    data = load_detection_dataset(tmp_path)
    assert list(data) == ["train", "val"] and detection_label_names(data) == ["cat", "dog"]  # sorted names
    train = data["train"]
    assert train["image_id"] == [0, 1] and train["width"] == [50, 30] and train["height"] == [40, 20]
    assert [[a["category_id"] for a in row] for row in train["annotations"]] == [[1], [0, 1]]
    assert train["annotations"][0][0]["bbox"] == [1, 2, 10, 8] and train["annotations"][0][0]["area"] == 80
    assert train[1]["image"].size == (30, 20) and data["val"]["image_id"] == [2]
    assert find_split(data, "validation") == "val"


def test_an_image_folder_with_integer_categories_at_its_top(tmp_path):
    _write_folder(tmp_path, [
        {"file_name": "a.png", "image_id": 40, "objects": [{"bbox": [1, 2, 10, 8], "category": 3}]},
        {"file_name": "b.png", "objects": {"bbox": [[1, 1, 2, 2]], "category": [1], "area": [3.5]}},
    ])  # fmt: skip
    data = load_detection_folder(tmp_path)
    assert list(data) == ["train"] and data["train"]["image_id"] == [40, 41]
    assert detection_label_names(data) == ["N/A", "1", "N/A", "3"]  # ids kept: class index = category id
    assert data["train"]["annotations"][1][0]["area"] == 3.5


@pytest.mark.parametrize(
    "line, error, message",
    [
        ({"file_name": "a.png", "objects": {"bbox": [[1, 2, 3]], "category": [0]}}, UsageError,
         r"metadata.jsonl: line 1 \(a.png\), object 0 has bbox \[1, 2, 3\]"),
        ({"file_name": "a.png", "objects": {"bbox": [[1, 2, 3, 4]], "category": [-2]}}, UsageError,
         r"line 1 \(a.png\), object 0 has category -2"),
        ({"file_name": "a.png", "objects": {"bbox": [[1, 2, 3, 4]], "category": [0], "area": ["big"]}}, UsageError,
         r"line 1 \(a.png\), object 0 has area 'big'"),
        ({"file_name": "a.png"}, UsageError, r"line 1 must be an object with a 'file_name' and 'objects'"),
        ({"file_name": "gone.png", "objects": {"bbox": [], "category": []}}, FileNotFoundError, r"gone.png"),
    ],
)  # fmt: skip
def test_bad_metadata_lines_name_the_file_line_and_image(tmp_path, line, error, message):
    PIL.Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    (tmp_path / "metadata.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(error, match=message):
        load_detection_dataset(tmp_path)


def test_names_and_ids_mixed_and_folders_without_data_are_refused(tmp_path):
    _write_folder(tmp_path / "mixed", [
        {"file_name": "a.png", "objects": {"bbox": [[1, 2, 3, 4]], "category": ["cat"]}},
        {"file_name": "b.png", "objects": {"bbox": [[1, 2, 3, 4]], "category": [0]}},
    ])  # fmt: skip
    with pytest.raises(UsageError, match="both as names and as ids"):
        load_detection_dataset(tmp_path / "mixed")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="holds no detection dataset"):
        load_detection_dataset(tmp_path / "empty")
    with pytest.raises(UsageError, match="is not a dataset folder"):
        load_detection_dataset(tmp_path / "nothing-here")


# ----------------------------------------------------------------------------------------------- split names, ids


def test_val_valid_and_validation_name_the_same_role():
    assert [split_role(name) for name in ("val", "valid", "validation", "Validation", "val2017", "dev")] == [
        "validation"
    ] * 6
    assert [split_role(name) for name in ("train", "train2017", "test", "extra")] == ["train", "train", "test", None]
    data = {"train": 0, "valid": 0, "test": 0}
    assert find_split(data, "validation") == "valid" and find_split(data, "test") == "test"
    assert find_split({"train": 0}, "validation") is None
    with pytest.raises(UsageError, match=r"has no split 'dev'; its splits: \['train'\]"):
        find_split({"train": 0}, "validation", "dev")


def test_a_coco_folder_with_a_val_split_loads_every_split(tmp_path):
    write_coco_detection(hub_dataset(train=2, val=1, test=1), tmp_path / "coco")
    data = load_detection_dataset(tmp_path / "coco")
    assert list(data) == ["train", "val", "test"] and find_split(data, "validation") == "val"


def test_category_ids_with_gaps_give_a_label2id_over_the_real_categories_only():
    id2label, label2id = detection_label_maps(["N/A", "person", "N/A", "car"])
    assert id2label == {0: "N/A (0)", 1: "person", 2: "N/A (2)", 3: "car"}  # every class index named, once
    assert label2id == {"person": 1, "car": 3}
    assert all(id2label[index] == name for name, index in label2id.items())
    assert detection_label_maps(NAMES) == (dict(enumerate(NAMES)), {name: i for i, name in enumerate(NAMES)})
