"""The check of a whole dataset before a run: a real COCO folder on disk with a truncated PNG, a zero-area box, a box
outside its image, a recorded size the image does not have and a bbox of 3 numbers is refused in one error naming
every file and annotation; with dropping, those are left out and counted."""

from __future__ import annotations

import json
from pathlib import Path

import PIL.Image
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Value

from hf_xcv.data.checks import DataReport, card_line, decode
from hf_xcv.data.coco import load_coco_detection
from hf_xcv.data.detection import DROP_OPTION, check_detection_dataset
from hf_xcv.data.shapes import detection_label_names
from hf_xcv.utils.errors import UsageError


def write_png(path: Path, size: tuple[int, int] = (50, 40), truncated: bool = False) -> None:
    PIL.Image.effect_noise(size, 60).convert("RGB").save(path)  # noise: a PNG of many compressed blocks
    if truncated:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


def annotation(number: int, image_id: int, bbox: list[float], category_id: int = 1) -> dict:
    return {"id": number, "image_id": image_id, "category_id": category_id, "bbox": bbox, "area": 1.0, "iscrowd": 0}


def bad_coco_folder(root: Path) -> Path:
    """train: image 1 fine; 2 a truncated PNG; 3 a zero-area box (annotation 31) and a box outside the image (32);
    4 recorded as 60x40 but 50x40; annotation 51 of image 5 a bbox of 3 numbers. val: one good image."""
    (root / "annotations").mkdir(parents=True)
    categories = [{"id": 1, "name": "thing"}]
    train = {"images": [], "annotations": [], "categories": categories}
    for image_id in range(1, 6):
        (root / "train").mkdir(exist_ok=True)
        write_png(root / "train" / f"{image_id}.png", truncated=image_id == 2)
        width = 60 if image_id == 4 else 50
        train["images"].append({"id": image_id, "file_name": f"{image_id}.png", "width": width, "height": 40})
        train["annotations"].append(annotation(10 * image_id, image_id, [2, 3, 20, 10]))
    train["annotations"] += [
        annotation(31, 3, [5, 5, 0, 10]),  # zero area
        annotation(32, 3, [70, 5, 10, 10]),  # outside the 50x40 image
        annotation(51, 5, [1, 2, 3]),  # not [x, y, width, height]
    ]
    (root / "annotations" / "instances_train.json").write_text(json.dumps(train))
    (root / "val").mkdir()
    write_png(root / "val" / "9.png")
    val = {"images": [{"id": 9, "file_name": "9.png", "width": 50, "height": 40}], "categories": categories,
           "annotations": [annotation(90, 9, [1, 1, 10, 10])]}  # fmt: skip
    (root / "annotations" / "instances_val.json").write_text(json.dumps(val))
    return root


def load_checked(root: Path, drop: bool):
    problems: list = []
    data = load_coco_detection(root, problems=problems)
    return check_detection_dataset(
        data, detection_label_names(data), "my-coco", drop_invalid=drop, progress=False, found=problems
    )


def test_a_coco_folder_is_refused_with_every_problem_named_at_once(tmp_path):
    root = bad_coco_folder(tmp_path / "coco")
    with pytest.raises(UsageError) as caught:
        load_checked(root, drop=False)
    message = str(caught.value)
    assert message.startswith("split 'train' of my-coco has 4 bad row(s) (5 problem(s))")
    assert DROP_OPTION in message
    lines = message.split(";\n  ")
    train = root.resolve() / "train"
    expected = [
        "image_id 2: does not decode: OSError: image file is truncated",
        f"image_id 3: object 1 has bbox [5.0, 5.0, 0.0, 10.0], empty inside the 50x40 (width x height) image "
        f"(a zero-area box) [annotation 31, file {train / '3.png'}]",
        f"image_id 3: object 2 has bbox [70.0, 5.0, 10.0, 10.0], empty inside the 50x40 (width x height) image "
        f"(a box outside the image) [annotation 32, file {train / '3.png'}]",
        f"image_id 4: the dataset says 60x40 (width x height), the image decodes to 50x40 [file {train / '4.png'}]",
        "image_id 5: has bbox [1, 2, 3]: expected [x, y, width, height]",
    ]
    for text in expected:
        assert sum(text in line for line in lines) == 1, (text, message)
    assert f"[file {train / '2.png'}]" in message and f"[annotation 51, file {train / '5.png'}]" in message
    assert "split 'val'" not in message


def test_dropping_leaves_out_what_is_invalid_and_counts_it(tmp_path):
    root = bad_coco_folder(tmp_path / "coco")
    data, report = load_checked(root, drop=True)
    assert report.as_dict() == {"dropped_annotations": 3, "dropped_images": 2}  # 31, 32, 51; images 2 and 4
    assert len(report.problems) == 5
    train = data["train"]
    assert train["image_id"] == [1, 3, 5]
    assert [[a["id"] for a in row] for row in train["annotations"]] == [[10], [30], [50]]
    assert [image.size for image in train["image"]] == [(50, 40)] * 3  # what is left decodes
    assert len(data["val"]) == 1
    summary = report.summary(DROP_OPTION)
    assert summary.startswith(f"dropped 3 annotations and 2 images ({DROP_OPTION}):") and "annotation 32" in summary
    check_detection_dataset(data, detection_label_names(DatasetDict(data)), progress=False)  # now clean


def test_the_hub_layout_drops_one_object_of_a_row_and_keeps_the_others(tmp_path):
    features = Features(
        {"image_id": Value("int64"), "image": Image(), "width": Value("int32"), "height": Value("int32"),
         "objects": [{"id": Value("int64"), "bbox": [Value("float32")], "category": ClassLabel(names=["a", "b"])}]}
    )  # fmt: skip
    write_png(tmp_path / "0.png")
    objects = [{"id": 7, "bbox": [1, 1, 5, 5], "category": 0}, {"id": 8, "bbox": [1, 1, 0, 5], "category": 1}]
    rows = {"image_id": [0], "image": [str(tmp_path / "0.png")], "width": [50], "height": [40], "objects": [objects]}
    data = {"train": Dataset.from_dict(rows, features=features)}
    with pytest.raises(UsageError, match=r"image_id 0: object 1 has bbox .*zero-area.*\[annotation 8, file .*0.png\]"):
        check_detection_dataset(data, ["a", "b"], progress=False)
    kept, report = check_detection_dataset(data, ["a", "b"], drop_invalid=True, progress=False)
    assert report.as_dict() == {"dropped_annotations": 1, "dropped_images": 0}
    assert kept["train"][0]["objects"] == [{"id": 7, "bbox": [1.0, 1.0, 5.0, 5.0], "category": 0}]


def test_a_truncated_png_is_caught_by_decoding_whole(tmp_path):
    write_png(tmp_path / "cut.png", truncated=True)
    with PIL.Image.open(tmp_path / "cut.png") as image:
        assert image.size == (50, 40)  # the header alone reads fine
    size, problem = decode({"path": str(tmp_path / "cut.png"), "bytes": None})
    assert size is None and "truncated" in problem
    assert decode({"path": None, "bytes": (tmp_path / "cut.png").read_bytes()})[1] is not None
    write_png(tmp_path / "whole.png")
    assert decode(str(tmp_path / "whole.png")) == ((50, 40), None)


def test_many_problems_are_listed_then_counted_and_the_card_line_says_what_was_dropped():
    from hf_xcv.data.checks import LISTED_AT_MOST, DataProblem, refuse

    problems = [DataProblem("train", f"problem {i}", i, image_id=i) for i in range(LISTED_AT_MOST + 5)]
    with pytest.raises(UsageError) as caught:
        refuse(problems, "big", "--drop")
    assert f"problem {LISTED_AT_MOST - 1}" in str(caught.value) and f"problem {LISTED_AT_MOST}" not in str(caught.value)
    assert str(caught.value).endswith("... and 5 more")
    assert card_line(DataReport(3, 1).as_dict(), DROP_OPTION) == (
        f"Dropped before training ({DROP_OPTION}): 3 annotations, 1 image."
    )
    assert card_line(DataReport().as_dict(), DROP_OPTION) is None and card_line(None, DROP_OPTION) is None
    assert card_line({"dropped_images": 2}, "--drop_invalid_images") == (
        "Dropped before training (--drop_invalid_images): 2 images."
    )


def test_a_saved_restoration_dataset_names_every_image_that_does_not_decode(tmp_path):
    from hf_xcv.data.photos import photo_features
    from hf_xcv.data.restoration import check_restoration_dataset

    for name in ("hr-0", "hr-1", "ref-0", "ref-1"):
        write_png(tmp_path / f"{name}.png", truncated=name in ("hr-1", "ref-0"))
    rows = {"image": [str(tmp_path / f"hr-{i}.png") for i in range(2)],
            "reference": [str(tmp_path / f"ref-{i}.png") for i in range(2)], "name": ["a", "b"]}  # fmt: skip
    DatasetDict(train=Dataset.from_dict(rows, features=photo_features())).save_to_disk(str(tmp_path / "saved"))
    from datasets import load_from_disk

    with pytest.raises(UsageError) as caught:
        check_restoration_dataset(load_from_disk(str(tmp_path / "saved")), "saved", progress=False)
    message = str(caught.value)
    assert message.startswith("split 'train' of saved has 2 bad row(s) (2 problem(s)); fix them:")
    assert "hr-1.png: its image does not decode" in message and "ref-0.png: its reference does not decode" in message
    check_restoration_dataset(DatasetDict(train=Dataset.from_dict({"image": [rows["image"][0]]}, features=Features(
        {"image": Image()}))), progress=False)  # fmt: skip
