"""Detection datasets as users have them -> a ``DatasetDict``: COCO files (an annotation JSON per split and a folder
of images, also written back), an image folder with a ``metadata.jsonl`` of boxes, a ``save_to_disk`` folder or a Hub
dataset (:func:`load_detection_dataset`); and the split names they use (:func:`find_split`).

The layout is COCO's own: ``root/annotations/instances_<split>.json`` beside ``root/<split>/``, so
``load_coco_detection("coco")`` reads a COCO 2017 download (``instances_train2017.json`` + ``train2017/``) as well as
what :func:`write_coco_detection` writes. The datasets have the features of
:func:`~hf_xcv.data.shapes.detection_features` (one row per image, COCO ``xywh`` boxes in pixels), the same as the
built-in shapes data, so one training script reads both. Category ids are kept as they are; the label names are
indexed by id with ``"N/A"`` at the ids no category uses (COCO 2017: 80 categories with ids up to 90, so 91 names,
``num_classes = max id + 1``), the original DETR's convention.

The Hub's detection datasets (cppe-5, and the layout of transformers' object-detection guide) have one row per image
with ``image``, ``image_id``, ``width``, ``height`` and ``objects = {"id", "area", "bbox", "category"}`` (COCO
``[x, y, width, height]`` boxes in pixels, ``category`` a ``ClassLabel``); they are used as they are, every function
of :mod:`hf_xcv.data.detection` reads both layouts.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

from ..processing.detection import coco_annotations, objects_to_coco
from ..utils.checks import is_integer
from ..utils.errors import UsageError
from .checks import DataProblem, refuse
from .shapes import (
    GAP_NAME,
    annotation_column,
    detection_features,
    detection_label_names,
    is_category,
    real_categories,
)

ANNOTATION_PREFIX = "instances_"
_SPLIT_ORDER = ("train", "validation", "val", "valid", "test")
# The names datasets give their splits, per role: "val2017" and "valid" are validation splits as "validation" is.
SPLIT_NAMES = {
    "train": ("train", "training"),
    "validation": ("validation", "val", "valid", "dev"),
    "test": ("test", "testing"),
}
METADATA_FILE = "metadata.jsonl"
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
    column = annotation_column(dataset)
    used: set[int] = set()  # annotation ids: the Hub's objects may have none, or repeat them from image to image
    for row in dataset.with_format(None):  # rows as stored, whatever transform or format is set
        image_id = int(row["image_id"])
        if image_id in seen:
            raise UsageError(f"split {split!r}: image_id {image_id} appears twice")
        seen.add(image_id)
        if row["image"] is None:
            raise UsageError(f"split {split!r}: image_id {image_id} has no image")
        file_name = f"{image_id:012d}.png"  # COCO's naming, so files sort by id
        image = row["image"].convert("RGB")
        image.save(image_dir / file_name, format="PNG")
        images.append({"id": image_id, "file_name": file_name, "width": image.width, "height": image.height})
        for annotation in coco_annotations({"image_id": image_id, column: row[column]})[1]:
            bbox = _check_bbox(annotation.get("bbox"), f"split {split!r}: image_id {image_id}")
            annotation = {"iscrowd": 0, "area": bbox[2] * bbox[3], **annotation}
            if not is_integer(annotation.get("id")) or annotation["id"] in used:
                annotation["id"] = max(used, default=0) + 1
            used.add(int(annotation["id"]))
            annotations.append(_coco_annotation(annotation, image_id))
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
        raise UsageError(f"split name {split!r} cannot name a folder")
    columns = getattr(dataset, "column_names", None) or []
    missing = [column for column in ("image", "image_id") if column not in columns]
    if missing or not {"annotations", "objects"} & set(columns):
        missing += [] if {"annotations", "objects"} & set(columns) else ["annotations (or objects)"]
        raise UsageError(f"split {split!r} is not a detection dataset: it has no column(s) {missing}")


def write_coco_detection(dataset_dict: DatasetDict | Mapping[str, Dataset], output_dir: str | os.PathLike) -> Path:
    """Write each split as ``output_dir/annotations/instances_<split>.json`` and ``output_dir/<split>/*.png``.

    Splits in COCO's layout (``annotations``) or the Hub's (``objects``; an object without an id, or with one
    already used in the split, gets a new one; crowd flags are 0 and missing areas the box's). Images are named
    ``<image_id, 12 digits>.png``; the categories are the dataset's label names, less the ``"N/A"`` gaps. Each JSON
    is written after its images, through a temporary file, so an annotation file that exists is complete.

    Returns:
        ``output_dir`` as a ``Path``.
    """
    if not isinstance(dataset_dict, Mapping):
        raise UsageError(f"expected a DatasetDict (split name -> Dataset), got {type(dataset_dict).__name__}")
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
        raise UsageError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(content, dict):
        raise UsageError(f"{path}: expected a JSON object with 'images' and 'categories', got {type(content).__name__}")
    for key in ("images", "categories"):
        if not isinstance(content.get(key), list):
            raise UsageError(f"{path}: no {key!r} list")
    if not isinstance(content.get("annotations", []), list):
        raise UsageError(f"{path}: 'annotations' is not a list")
    return content


def _label_names(categories: list[Any], path: Path) -> list[str]:
    """Names indexed by category id, ``"N/A"`` where no category has the id."""
    names: dict[int, str] = {}
    for category in categories:
        if not (isinstance(category, dict) and is_integer(category.get("id")) and category["id"] >= 0):
            raise UsageError(f"{path}: category {category!r} needs an integer 'id' >= 0")
        if not isinstance(category.get("name"), str):
            raise UsageError(f"{path}: category {category['id']} has no 'name' string")
        if category["id"] in names:
            raise UsageError(f"{path}: category id {category['id']} appears twice")
        names[category["id"]] = category["name"]
    repeated = sorted({name for name in names.values() if list(names.values()).count(name) > 1})
    if repeated:
        raise UsageError(f"{path}: category name(s) {repeated} are used by more than one category id")
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
            raise UsageError(f"{path}: image entry {entry!r} needs an integer 'id' and a 'file_name'")
        if not (is_integer(entry.get("width")) and is_integer(entry.get("height"))):
            raise UsageError(f"{path}: image {entry['id']} needs integer 'width' and 'height'")
        if entry["id"] in entries:
            raise UsageError(f"{path}: image id {entry['id']} appears twice")
        entries[entry["id"]] = entry
    missing = [entry for entry in entries.values() if not (image_dir / entry["file_name"]).is_file()]
    if missing:
        named = ", ".join(f"{entry['file_name']} (image {entry['id']})" for entry in missing[:_NAMED_AT_MOST])
        more = f" and {len(missing) - _NAMED_AT_MOST} more" if len(missing) > _NAMED_AT_MOST else ""
        raise FileNotFoundError(f"{len(missing)} image file(s) of {path} are not in {image_dir}: {named}{more}")
    return entries


def bbox_problem(bbox: Any) -> str | None:
    """What is wrong with a COCO ``[x, y, width, height]`` box (``"has bbox ...: expected ..."``), or None."""
    numbers = isinstance(bbox, (list, tuple)) and len(bbox) == 4
    numbers = numbers and all(isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v) for v in bbox)
    if not numbers or bbox[2] < 0 or bbox[3] < 0:
        return f"has bbox {bbox!r}: expected [x, y, width, height], 4 finite numbers, sizes >= 0"
    return None


def _check_bbox(bbox: Any, where: str) -> list[float]:
    problem = bbox_problem(bbox)
    if problem is not None:
        raise UsageError(f"{where} {problem}")
    return [float(value) for value in bbox]


def _annotation_problem(annotation: dict, label_names: list[str]) -> str | None:
    """What is wrong with a COCO annotation whose ids are right (bbox, category, area, crowd flag), or None."""
    category_id = annotation.get("category_id")
    if not is_category(category_id, label_names):
        return f"has category_id {category_id!r}, not one of {real_categories(label_names)}"
    problem = bbox_problem(annotation.get("bbox"))
    if problem is not None:
        return problem
    area = annotation.get("area", annotation["bbox"][2] * annotation["bbox"][3])  # w * h for files without one
    if not isinstance(area, Real) or isinstance(area, bool) or not area >= 0:
        return f"has area {area!r}: expected a number >= 0"
    iscrowd = annotation.get("iscrowd", 0)
    if iscrowd not in (0, 1) or isinstance(iscrowd, bool):
        return f"has iscrowd {iscrowd!r}: expected 0 or 1"
    return None


def _annotation_row(annotation: dict) -> dict:
    bbox = [float(value) for value in annotation["bbox"]]
    area = float(annotation.get("area", bbox[2] * bbox[3]))
    iscrowd = annotation.get("iscrowd", 0)
    return {"id": annotation["id"], "category_id": annotation["category_id"], "bbox": bbox, "area": area,
            "iscrowd": iscrowd}  # fmt: skip


_TWICE = "has an id that appears twice"


def _annotation_line(problem: DataProblem) -> str:
    """A problem of an annotation file as its reader words it: ``annotation 7 (image 5) has bbox ...``."""
    if problem.annotation is None:
        return problem.what
    if problem.what == _TWICE:
        return f"annotation id {problem.annotation} appears twice"
    image = "" if problem.image_id is None else f" (image {problem.image_id})"
    return f"annotation {problem.annotation}{image} {problem.what}"


def _group_annotations(
    annotations: list[Any], label_names: list[str], images: Mapping[int, Any], image_dir: Path, split: str
) -> tuple[dict[int, list[dict]], list[DataProblem]]:
    """Image id -> its valid annotations (as features rows), in file order; and every invalid one's problem."""
    per_image: dict[int, list[dict]] = {image_id: [] for image_id in images}
    seen: set[int] = set()
    problems = []
    for annotation in annotations:
        if not (isinstance(annotation, dict) and is_integer(annotation.get("id"))):
            problems.append(DataProblem(split, f"annotation {annotation!r:.200} has no integer 'id'", -1))
            continue
        image_id, number = annotation.get("image_id"), annotation["id"]
        entry = images.get(image_id) if is_integer(image_id) else None
        if entry is None:
            what = f"refers to image_id {image_id!r}, which has no entry in 'images'"
            problems.append(DataProblem(split, what, -1, annotation=number))
            continue
        file = str((image_dir / entry["file_name"]).resolve())  # as the dataset's rows name it
        problem = _TWICE if number in seen else _annotation_problem(annotation, label_names)
        seen.add(number)
        if problem is not None:
            problems.append(DataProblem(split, problem, -1, image_id, file, number))
        else:
            per_image[image_id].append(_annotation_row(annotation))
    return per_image, problems


def load_coco_split(
    annotation_json: str | os.PathLike,
    image_dir: str | os.PathLike,
    problems: list[DataProblem] | None = None,
    split: str | None = None,
) -> Dataset:
    """One COCO annotation file and its image folder as a ``Dataset`` (one row per image, in file order).

    Images are referenced by absolute path and decoded (to RGB) when a row is read, so a COCO-sized folder is not
    loaded into memory; keep the folder in place while the dataset is in use (``save_to_disk`` embeds the images).

    An annotation the dataset cannot hold (a bbox not of 4 finite numbers or of a negative size, a category_id of no
    category, a bad area or crowd flag, an image_id of no image, a repeated id) is an error listing every such
    annotation; or, when ``problems`` is given, it is left out and its :class:`~hf_xcv.data.checks.DataProblem` added
    to ``problems`` (named by ``split``, the folder's name by default): the caller refuses or drops them with the rest
    (:func:`~hf_xcv.data.detection.check_detection_dataset`).

    Raises:
        FileNotFoundError: the JSON, the folder or an image file listed in the JSON does not exist.
        ValueError: malformed JSON; an image or category entry lacking what COCO requires; repeated image or
            category ids; without ``problems``, the invalid annotations (all of them).
    """
    path, image_dir = Path(annotation_json), Path(image_dir)
    split = image_dir.name if split is None else split
    coco = _read_json(path)
    if not image_dir.is_dir():
        raise FileNotFoundError(f"image folder {image_dir} of {path} does not exist")
    label_names = _label_names(coco["categories"], path)
    images = _image_entries(coco["images"], image_dir, path)
    per_image, found = _group_annotations(coco.get("annotations", []), label_names, images, image_dir, split)
    if problems is None:
        refuse(found, str(path), "--drop_invalid_annotations (hf-xcv-train object-detection)", _annotation_line)
    else:
        problems += found
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


def load_coco_detection(
    root: str | os.PathLike, splits: str | Iterable[str] | None = None, problems: list[DataProblem] | None = None
) -> DatasetDict:
    """``root/annotations/instances_<split>.json`` with the images of ``root/<split>/`` as a ``DatasetDict``.

    Args:
        root: the dataset folder (COCO's layout, or what :func:`write_coco_detection` wrote).
        splits: the splits to read (``"val2017"``, ``["train", "test"]``); every annotation file found by default.
        problems: collects the invalid annotations, left out (see :func:`load_coco_split`); without it they are an
            error.

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
    result = DatasetDict(
        {split: load_coco_split(available[split], Path(root) / split, problems, split) for split in wanted}
    )
    detection_label_names(result)  # one label space for the whole dataset, or a ValueError naming the splits
    return result


# ----------------------------------------------------------------------------------------------- split names


def split_role(name: str) -> str | None:
    """``"train"``, ``"validation"`` or ``"test"`` for a split name that says it (:data:`SPLIT_NAMES`, any case, with
    or without a year: ``val``, ``valid``, ``val2017``, ``Validation``); None for any other name."""
    stem = name.lower().rstrip("0123456789").rstrip("-_")
    return next((role for role, names in SPLIT_NAMES.items() if stem in names), None)


def find_split(data: Mapping[str, Any], role: str, name: str | None = None, dataset: str = "the dataset") -> str | None:
    """The name of ``data``'s split for ``role`` (a key of :data:`SPLIT_NAMES`): ``name`` when given (it must exist),
    else the first split whose name says ``role``; None when none does.

    Raises:
        UsageError: ``name`` is not a split of ``data``.
    """
    if name is not None:
        if name not in data:
            raise UsageError(f"{dataset} has no split {name!r}; its splits: {list(data)}")
        return name
    return next((split for split in data if split_role(split) == role), None)


# ----------------------------------------------------------------------------------------------- image folders


def _read_metadata(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``metadata.jsonl``, each with ``file_name`` and ``objects``; its line number as ``_line``."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise UsageError(f"{path}: line {number} is not valid JSON: {err}") from None
        if not (isinstance(row, dict) and isinstance(row.get("file_name"), str) and "objects" in row):
            raise UsageError(
                f"{path}: line {number} must be an object with a 'file_name' and 'objects' "
                f'({{"bbox": [[x, y, width, height], ...], "category": [...]}}), got {line[:200]}'
            )
        rows.append({**row, "_line": number})
    return rows


def _metadata_objects(row: dict[str, Any], path: Path, image_id: int) -> list[dict[str, Any]]:
    """One metadata row's objects as COCO annotation dicts (categories still ids or names), each box checked."""
    where = f"{path}: line {row['_line']} ({row['file_name']})"
    try:
        objects = objects_to_coco(row["objects"], image_id, names=True)
    except UsageError as err:
        raise UsageError(f"{where}: {err}") from None
    for k, obj in enumerate(objects):
        bbox = obj["bbox"] = _check_bbox(obj.get("bbox"), f"{where}, object {k}")
        category, area = obj["category_id"], obj.setdefault("area", bbox[2] * bbox[3])
        if not (isinstance(category, str) or (is_integer(category) and category >= 0)):
            raise UsageError(f"{where}, object {k} has category {category!r}: expected a name or an id >= 0")
        if not isinstance(area, Real) or isinstance(area, bool) or not area >= 0:
            raise UsageError(f"{where}, object {k} has area {area!r}: expected a number >= 0")
        if obj.setdefault("iscrowd", 0) not in (0, 1) or isinstance(obj["iscrowd"], bool):
            raise UsageError(f"{where}, object {k} has iscrowd {obj['iscrowd']!r}: expected 0 or 1")
    return objects


def _folder_label_names(categories: set[Any], root: Path) -> list[str]:
    """Names indexed by id: the sorted names, or for integer ids their digits (``"N/A"`` at ids no object has)."""
    if all(isinstance(category, str) for category in categories):
        return sorted(categories)
    if any(isinstance(category, str) for category in categories):
        raise UsageError(f"the {METADATA_FILE} files of {root} give categories both as names and as ids: use one")
    top = max(categories, default=-1)
    return [str(i) if i in categories else GAP_NAME for i in range(top + 1)]


def _folder_splits(root: Path) -> dict[str, Path]:
    """Split name -> folder holding its images and ``metadata.jsonl``: ``root`` itself (one split, ``train``) or
    its subfolders (``train/``, ``validation/``, ...)."""
    if (root / METADATA_FILE).is_file():
        return {"train": root}
    folders = sorted(path for path in root.iterdir() if (path / METADATA_FILE).is_file())
    rank = {name: index for index, name in enumerate(_SPLIT_ORDER)}
    return {path.name: path for path in sorted(folders, key=lambda p: (rank.get(p.name, len(rank)), p.name))}


def load_detection_folder(root: str | os.PathLike) -> DatasetDict:
    """An image folder with a ``metadata.jsonl`` (``datasets``' imagefolder layout for detection) as a
    ``DatasetDict`` with the features of :func:`load_coco_detection`.

    Each line is ``{"file_name": "a.jpg", "objects": {"bbox": [[x, y, width, height], ...], "category": [...]}}``
    (``categories`` also reads, boxes in pixels, categories all names or all ids; ``area`` and ``iscrowd`` per
    object and an ``image_id`` per line are optional; annotations are numbered 1, 2, ... in each split).
    ``root/metadata.jsonl`` makes one ``train`` split; a ``metadata.jsonl`` in each of ``root``'s subfolders makes a
    split per folder (``train/``, ``val/``, ...). Names become class ids in sorted order; integer ids are kept and
    named by their digits, ``"N/A"`` at the ids no object has.

    Raises:
        UsageError: no metadata, a line that is not JSON or lacks ``file_name`` / ``objects``, a bad box or
            category (the message names the file, the line and the image), a file listed twice.
        FileNotFoundError: a listed image file does not exist.
    """
    root = Path(root)
    folders = _folder_splits(root)
    if not folders:
        raise UsageError(f"{root} has no {METADATA_FILE}, neither at its top nor in a split folder (train/, val/, ...)")
    rows = {split: _read_metadata(folder / METADATA_FILE) for split, folder in folders.items()}
    objects, next_id = {}, 0
    for split, split_rows in rows.items():
        path = folders[split] / METADATA_FILE
        for row in split_rows:
            row.setdefault("image_id", next_id)
            if not is_integer(row["image_id"]):
                raise UsageError(f"{path}: line {row['_line']} has image_id {row['image_id']!r}: expected an integer")
            next_id = max(next_id, int(row["image_id"])) + 1
            objects[split, row["_line"]] = _metadata_objects(row, path, row["image_id"])
    label_names = _folder_label_names({o["category_id"] for found in objects.values() for o in found}, root)
    ids = {name: index for index, name in enumerate(label_names)}
    splits = {}
    for split, split_rows in rows.items():
        per_row = [objects[split, row["_line"]] for row in split_rows]
        splits[split] = _folder_split(folders[split], split_rows, per_row, ids, label_names)
    return DatasetDict(splits)


def _folder_split(
    folder: Path, rows: list[dict], objects: list[list[dict]], ids: dict[Any, int], label_names: list[str]
) -> Dataset:
    path = folder / METADATA_FILE
    missing = [row["file_name"] for row in rows if not (folder / row["file_name"]).is_file()]
    if missing:
        more = f" and {len(missing) - _NAMED_AT_MOST} more" if len(missing) > _NAMED_AT_MOST else ""
        named = ", ".join(missing[:_NAMED_AT_MOST])
        raise FileNotFoundError(f"{len(missing)} image file(s) of {path} are not in {folder}: {named}{more}")
    for key in ("file_name", "image_id"):
        repeated = sorted(str(value) for value, count in Counter(row[key] for row in rows).items() if count > 1)
        if repeated:
            raise UsageError(f"{path}: {key} {repeated[:_NAMED_AT_MOST]} listed more than once")
    sizes = []
    for row in rows:
        with PIL.Image.open(folder / row["file_name"]) as image:  # reads the header only
            sizes.append(image.size)
    numbers = itertools.count(1)  # annotation ids, unique in the split as COCO's
    annotations = [
        [
            {
                "id": next(numbers),
                "category_id": obj["category_id"] if is_integer(obj["category_id"]) else ids[obj["category_id"]],
                "bbox": obj["bbox"],
                "area": float(obj["area"]),
                "iscrowd": int(obj["iscrowd"]),
            }
            for obj in found
        ]
        for found in objects
    ]
    columns = {
        "image": [str((folder / row["file_name"]).resolve()) for row in rows],
        "image_id": [int(row["image_id"]) for row in rows],
        "width": [width for width, _ in sizes],
        "height": [height for _, height in sizes],
        "annotations": annotations,
    }
    return Dataset.from_dict(columns, features=detection_features(label_names))


# ----------------------------------------------------------------------------------------------- any source


def load_detection_dataset(source: str | os.PathLike, problems: list[DataProblem] | None = None) -> DatasetDict:
    """A detection ``DatasetDict`` from where users keep one:

    - a ``save_to_disk`` folder (``dataset_dict.json``), in COCO's layout or the Hub's (``objects``);
    - a COCO folder (``annotations/instances_<split>.json`` beside ``<split>/``, :func:`load_coco_detection`);
    - an image folder with a ``metadata.jsonl`` (:func:`load_detection_folder`);
    - a Hub dataset id (``cppe-5``), read by ``datasets.load_dataset`` (its cache when offline).

    ``problems``: see :func:`load_coco_detection` (a COCO folder's annotations that a dataset cannot hold).

    Raises:
        UsageError: a folder in none of these layouts, or a name that is neither a folder nor a Hub dataset.
    """
    path = Path(source)
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            return load_from_disk(str(path))
        if (path / "annotations").is_dir():
            return load_coco_detection(path, problems=problems)
        if _folder_splits(path):
            return load_detection_folder(path)
        raise UsageError(
            f"{path} holds no detection dataset: expected a save_to_disk DatasetDict (dataset_dict.json), a COCO "
            f"folder (annotations/instances_<split>.json) or images with a {METADATA_FILE}"
        )
    if path.exists() or path.is_absolute() or str(source).startswith("."):
        raise UsageError(f"{source} is not a dataset folder")
    try:
        data = load_dataset(str(source))
    except Exception as err:  # datasets raises many kinds: not found, offline, no access
        raise UsageError(f"{source} is no local folder, and datasets could not load it from the Hub: {err}") from err
    if not isinstance(data, Mapping):
        raise UsageError(f"{source} loaded as {type(data).__name__}, not a DatasetDict of splits")
    return data
