"""COCO detection files (an annotation JSON per split and a folder of images) to and from a ``DatasetDict``.

The layout is COCO's own: ``root/annotations/instances_<split>.json`` beside ``root/<split>/``, so
``load_coco_detection("coco")`` reads a COCO 2017 download (``instances_train2017.json`` + ``train2017/``) as well as
what :func:`write_coco_detection` writes. The datasets have the features of
:func:`~hf_xcv.data.shapes.detection_features` (one row per image, COCO ``xywh`` boxes in pixels), the same as the
built-in shapes data, so one training script reads both. Category ids are kept as they are; the label names are
indexed by id with ``"N/A"`` at the ids no category uses (COCO 2017: 80 categories with ids up to 90, so 91 names,
``num_classes = max id + 1``), the original DETR's convention.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict

from ..utils.checks import is_integer
from .shapes import GAP_NAME, detection_features, detection_label_names

ANNOTATION_PREFIX = "instances_"
_REQUIRED_COLUMNS = ("image", "image_id", "annotations")
_SPLIT_ORDER = ("train", "validation", "val", "test")
_NAMED_AT_MOST = 5  # missing files named in an error; the rest are counted


# ----------------------------------------------------------------------------------------------- writing


def _json_float(value: float) -> float:
    """The shortest decimal that reads back as the same float32: 0.1, not 0.10000000149011612."""
    return float(str(np.float32(value)))


def _coco_annotation(annotation: Mapping[str, Any], image_id: int) -> dict[str, Any]:
    return {
        "id": int(annotation["id"]),
        "image_id": image_id,
        "category_id": int(annotation["category_id"]),
        "bbox": [_json_float(value) for value in annotation["bbox"]],
        "area": _json_float(annotation["area"]),
        "iscrowd": int(annotation["iscrowd"]),
    }


def _write_split_images(dataset: Dataset, image_dir: Path, split: str) -> tuple[list[dict], list[dict]]:
    """Save every image of ``dataset`` as PNG under ``image_dir``; its COCO ``images`` and ``annotations``."""
    image_dir.mkdir(parents=True, exist_ok=True)
    images, annotations, seen = [], [], set()
    for row in dataset.with_format(None):  # rows as stored, whatever transform or format is set
        image_id = int(row["image_id"])
        if image_id in seen:
            raise ValueError(f"split {split!r}: image_id {image_id} appears twice")
        seen.add(image_id)
        if row["image"] is None:
            raise ValueError(f"split {split!r}: image_id {image_id} has no image")
        file_name = f"{image_id:012d}.png"  # COCO's naming, so files sort by id
        image = row["image"].convert("RGB")
        image.save(image_dir / file_name, format="PNG")
        images.append({"id": image_id, "file_name": file_name, "width": image.width, "height": image.height})
        annotations += [_coco_annotation(annotation, image_id) for annotation in row["annotations"]]
    return images, annotations


def _write_json_atomically(content: dict[str, Any], path: Path) -> None:
    """Write to a temporary file beside ``path``, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(content, file)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _check_split(split: str, dataset: Any) -> None:
    if not isinstance(split, str) or not split or split in (".", "..") or "/" in split or os.sep in split:
        raise ValueError(f"split name {split!r} cannot name a folder")
    missing = [column for column in _REQUIRED_COLUMNS if column not in (getattr(dataset, "column_names", None) or [])]
    if missing:
        raise ValueError(f"split {split!r} is not a detection dataset: it has no column(s) {missing}")


def write_coco_detection(dataset_dict: DatasetDict | Mapping[str, Dataset], output_dir: str | os.PathLike) -> Path:
    """Write each split as ``output_dir/annotations/instances_<split>.json`` and ``output_dir/<split>/*.png``.

    Images are named ``<image_id, 12 digits>.png``; the categories are the dataset's label names, less the
    ``"N/A"`` gaps. Each JSON is written after its images, through a temporary file, so an annotation file that
    exists is complete.

    Returns:
        ``output_dir`` as a ``Path``.
    """
    if not isinstance(dataset_dict, Mapping):
        raise ValueError(f"expected a DatasetDict (split name -> Dataset), got {type(dataset_dict).__name__}")
    output = Path(output_dir)
    for split, dataset in dataset_dict.items():
        _check_split(split, dataset)
        categories = [
            {"id": index, "name": name} for index, name in enumerate(detection_label_names(dataset)) if name != GAP_NAME
        ]
        images, annotations = _write_split_images(dataset, output / split, split)
        content = {"images": images, "annotations": annotations, "categories": categories}
        _write_json_atomically(content, output / "annotations" / f"{ANNOTATION_PREFIX}{split}.json")
    return output


# ----------------------------------------------------------------------------------------------- reading


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"COCO annotation file {path} does not exist")
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(content, dict):
        raise ValueError(f"{path}: expected a JSON object with 'images' and 'categories', got {type(content).__name__}")
    for key in ("images", "categories"):
        if not isinstance(content.get(key), list):
            raise ValueError(f"{path}: no {key!r} list")
    if not isinstance(content.get("annotations", []), list):
        raise ValueError(f"{path}: 'annotations' is not a list")
    return content


def _label_names(categories: list[Any], path: Path) -> list[str]:
    """Names indexed by category id, ``"N/A"`` where no category has the id."""
    names: dict[int, str] = {}
    for category in categories:
        if not (isinstance(category, dict) and is_integer(category.get("id")) and category["id"] >= 0):
            raise ValueError(f"{path}: category {category!r} needs an integer 'id' >= 0")
        if not isinstance(category.get("name"), str):
            raise ValueError(f"{path}: category {category['id']} has no 'name' string")
        if category["id"] in names:
            raise ValueError(f"{path}: category id {category['id']} appears twice")
        names[category["id"]] = category["name"]
    repeated = sorted({name for name in names.values() if list(names.values()).count(name) > 1})
    if repeated:
        raise ValueError(f"{path}: category name(s) {repeated} are used by more than one category id")
    if not names:
        return []
    label_names = [GAP_NAME] * (max(names) + 1)
    for index, name in names.items():
        label_names[index] = name
    return label_names


def _image_entries(images: list[Any], image_dir: Path, path: Path) -> dict[int, dict[str, Any]]:
    """Image id -> entry (in file order), every listed file checked to exist."""
    entries: dict[int, dict[str, Any]] = {}
    for entry in images:
        if not (isinstance(entry, dict) and is_integer(entry.get("id")) and isinstance(entry.get("file_name"), str)):
            raise ValueError(f"{path}: image entry {entry!r} needs an integer 'id' and a 'file_name'")
        if not (is_integer(entry.get("width")) and is_integer(entry.get("height"))):
            raise ValueError(f"{path}: image {entry['id']} needs integer 'width' and 'height'")
        if entry["id"] in entries:
            raise ValueError(f"{path}: image id {entry['id']} appears twice")
        entries[entry["id"]] = entry
    missing = [entry for entry in entries.values() if not (image_dir / entry["file_name"]).is_file()]
    if missing:
        named = ", ".join(f"{entry['file_name']} (image {entry['id']})" for entry in missing[:_NAMED_AT_MOST])
        more = f" and {len(missing) - _NAMED_AT_MOST} more" if len(missing) > _NAMED_AT_MOST else ""
        raise FileNotFoundError(f"{len(missing)} image file(s) of {path} are not in {image_dir}: {named}{more}")
    return entries


def _check_bbox(bbox: Any, where: str) -> list[float]:
    numbers = isinstance(bbox, (list, tuple)) and len(bbox) == 4
    numbers = numbers and all(isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v) for v in bbox)
    if not numbers or bbox[2] < 0 or bbox[3] < 0:
        raise ValueError(f"{where} has bbox {bbox!r}: expected [x, y, width, height], 4 finite numbers, sizes >= 0")
    return [float(value) for value in bbox]


def _annotation_row(annotation: Any, label_names: list[str], image_ids: Mapping[int, Any], path: Path) -> dict:
    if not (isinstance(annotation, dict) and is_integer(annotation.get("id"))):
        raise ValueError(f"{path}: annotation {annotation!r} has no integer 'id'")
    where = f"{path}: annotation {annotation['id']}"
    image_id = annotation.get("image_id")
    if not is_integer(image_id) or image_id not in image_ids:
        raise ValueError(f"{where} refers to image_id {image_id!r}, which has no entry in 'images'")
    category_id = annotation.get("category_id")
    if not is_integer(category_id) or not 0 <= category_id < len(label_names) or label_names[category_id] == GAP_NAME:
        known = [index for index, name in enumerate(label_names) if name != GAP_NAME]
        raise ValueError(f"{where} (image {image_id}) has category_id {category_id!r}, not one of {known}")
    bbox = _check_bbox(annotation.get("bbox"), f"{where} (image {image_id})")
    area = annotation.get("area", bbox[2] * bbox[3])  # COCO always has one; w * h for files that do not
    iscrowd = annotation.get("iscrowd", 0)
    if not isinstance(area, Real) or isinstance(area, bool) or not area >= 0:
        raise ValueError(f"{where} (image {image_id}) has area {area!r}: expected a number >= 0")
    if iscrowd not in (0, 1) or isinstance(iscrowd, bool):
        raise ValueError(f"{where} (image {image_id}) has iscrowd {iscrowd!r}: expected 0 or 1")
    return {"id": annotation["id"], "category_id": category_id, "bbox": bbox, "area": float(area), "iscrowd": iscrowd}


def _group_annotations(
    annotations: list[Any], label_names: list[str], images: Mapping[int, Any], path: Path
) -> dict[int, list[dict]]:
    """Image id -> its annotations (as features rows), in file order."""
    per_image: dict[int, list[dict]] = {image_id: [] for image_id in images}
    seen: set[int] = set()
    for annotation in annotations:
        row = _annotation_row(annotation, label_names, images, path)
        if row["id"] in seen:
            raise ValueError(f"{path}: annotation id {row['id']} appears twice")
        seen.add(row["id"])
        per_image[annotation["image_id"]].append(row)
    return per_image


def load_coco_split(annotation_json: str | os.PathLike, image_dir: str | os.PathLike) -> Dataset:
    """One COCO annotation file and its image folder as a ``Dataset`` (one row per image, in file order).

    Images are referenced by absolute path and decoded (to RGB) when a row is read, so a COCO-sized folder is not
    loaded into memory; keep the folder in place while the dataset is in use (``save_to_disk`` embeds the images).

    Raises:
        FileNotFoundError: the JSON, the folder or an image file listed in the JSON does not exist.
        ValueError: malformed JSON; an image, annotation or category entry lacking what COCO requires; an
            annotation whose image_id has no image entry or whose category_id no category; a bbox not of 4 numbers;
            repeated ids.
    """
    path, image_dir = Path(annotation_json), Path(image_dir)
    coco = _read_json(path)
    if not image_dir.is_dir():
        raise FileNotFoundError(f"image folder {image_dir} of {path} does not exist")
    label_names = _label_names(coco["categories"], path)
    images = _image_entries(coco["images"], image_dir, path)
    per_image = _group_annotations(coco.get("annotations", []), label_names, images, path)
    columns = {
        "image": [str((image_dir / entry["file_name"]).resolve()) for entry in images.values()],
        "image_id": list(images),
        "width": [entry["width"] for entry in images.values()],
        "height": [entry["height"] for entry in images.values()],
        "annotations": list(per_image.values()),
    }
    return Dataset.from_dict(columns, features=detection_features(label_names))


def _split_files(annotations_dir: Path) -> dict[str, Path]:
    """Split name -> annotation file, train / validation / val / test first, then the others by name."""
    paths = annotations_dir.glob(f"{ANNOTATION_PREFIX}*.json")
    files = {path.name[len(ANNOTATION_PREFIX) : -len(".json")]: path for path in paths}
    rank = {name: index for index, name in enumerate(_SPLIT_ORDER)}
    return {name: files[name] for name in sorted(files, key=lambda name: (rank.get(name, len(rank)), name))}


def load_coco_detection(root: str | os.PathLike, splits: str | Iterable[str] | None = None) -> DatasetDict:
    """``root/annotations/instances_<split>.json`` with the images of ``root/<split>/`` as a ``DatasetDict``.

    Args:
        root: the dataset folder (COCO's layout, or what :func:`write_coco_detection` wrote).
        splits: the splits to read (``"val2017"``, ``["train", "test"]``); every annotation file found by default.

    Raises:
        FileNotFoundError: no annotations folder, no annotation file, or a requested split without one.
        ValueError: see :func:`load_coco_split`; splits whose categories differ.
    """
    annotations_dir = Path(root) / "annotations"
    if not annotations_dir.is_dir():
        raise FileNotFoundError(f"{annotations_dir} does not exist: expected annotations/instances_<split>.json")
    available = _split_files(annotations_dir)
    if not available:
        raise FileNotFoundError(f"no {ANNOTATION_PREFIX}<split>.json file in {annotations_dir}")
    wanted = list(available) if splits is None else [splits] if isinstance(splits, str) else list(splits)
    missing = [split for split in wanted if split not in available]
    if missing:
        raise FileNotFoundError(f"no annotation file for split(s) {missing} in {annotations_dir}: {list(available)}")
    result = DatasetDict({split: load_coco_split(available[split], Path(root) / split) for split in wanted})
    detection_label_names(result)  # one label space for the whole dataset, or a ValueError naming the splits
    return result
