"""Object-detection data: ``datasets`` rows in COCO's layout (``annotations``) or the Hub's (``objects``) -> DETR
examples, a check of every row before training, and a collator that pads the examples.

Boxes in the labels are relative to each image's unpadded size (see ``XcvDetrImageProcessor``), so padding a
batch changes the pixels and the mask, never the labels.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..processing.detection import coco_annotations
from ..utils.errors import UsageError
from .checks import DataProblem, DataReport, drop_rows, image_problems, refuse
from .coco import bbox_problem
from .shapes import annotation_column, is_category, real_categories

Processor = Callable[..., Any]


def _pad_hw(pad_size: Any) -> tuple[int, int] | None:
    """None, (height, width) or {"height", "width"} (a dict or transformers' SizeDict) -> (height, width)."""
    if pad_size is None:
        return None
    if isinstance(pad_size, (tuple, list)) and len(pad_size) == 2:
        return int(pad_size[0]), int(pad_size[1])
    height, width = (getattr(pad_size, "get", lambda key: None)(key) for key in ("height", "width"))
    if height is None or width is None:
        raise ValueError(f'pad_size must be (height, width) or {{"height": int, "width": int}}, got {pad_size!r}')
    return int(height), int(width)


def _pixel_values(sample: Mapping[str, Any], index: int) -> torch.Tensor:
    if "pixel_values" not in sample:
        raise ValueError(f"sample {index} of the batch has no 'pixel_values' (keys: {sorted(sample)})")
    value = torch.as_tensor(np.asarray(sample["pixel_values"]), dtype=torch.float32)
    if value.ndim != 3:
        raise ValueError(f"sample {index}: pixel_values must be (channels, height, width), got {tuple(value.shape)}")
    return value


def _labels(labels: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    return {key: torch.as_tensor(np.asarray(value)) for key, value in labels.items()}


class DetectionCollator:
    """Pad ``pixel_values`` of different sizes at the bottom/right into one batch with a ``pixel_mask``.

    Args:
        image_processor: optional; its ``pad_size`` is used when ``pad_size`` is not given.
        pad_size: pad every batch to this (height, width) (or ``{"height", "width"}``) instead of its largest
            image, e.g. for fixed shapes on accelerators.

    ``__call__(features)`` takes dicts with ``pixel_values`` ((C, H, W) tensor or array) and optionally ``labels``
    (a dict per image) and returns ``pixel_values`` (B, C, H, W) float32, ``pixel_mask`` (B, H, W) int64
    (1 = image, 0 = padding) and ``labels`` (a list of dicts of tensors, unchanged).
    """

    def __init__(self, image_processor: Processor | None = None, pad_size: Any = None) -> None:
        if pad_size is None and image_processor is not None:
            pad_size = getattr(image_processor, "pad_size", None)
        self.pad_size = _pad_hw(pad_size)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if len(features) == 0:
            raise ValueError("cannot collate an empty batch: got no features")
        images = [_pixel_values(sample, index) for index, sample in enumerate(features)]
        if len({image.shape[0] for image in images}) > 1:
            raise ValueError(f"the samples have different channel counts {[image.shape[0] for image in images]}")
        height, width = self.pad_size or (max(i.shape[1] for i in images), max(i.shape[2] for i in images))
        pixel_values = images[0].new_zeros((len(images), images[0].shape[0], height, width))  # (B, C, H, W)
        pixel_mask = torch.zeros((len(images), height, width), dtype=torch.long)  # (B, H, W)
        for index, image in enumerate(images):
            h, w = image.shape[1:]
            if h > height or w > width:
                raise ValueError(f"sample {index} is {h}x{w} (height x width), larger than pad_size {height}x{width}")
            pixel_values[index, :, :h, :w] = image
            pixel_mask[index, :h, :w] = 1
        batch: dict[str, Any] = {"pixel_values": pixel_values, "pixel_mask": pixel_mask}
        with_labels = ["labels" in sample for sample in features]
        if any(with_labels) and not all(with_labels):
            raise ValueError(f"samples {[i for i, x in enumerate(with_labels) if not x]} have no 'labels'; others do")
        if all(with_labels):
            batch["labels"] = [_labels(sample["labels"]) for sample in features]
        return batch


def _seed_key(image_id: Any) -> int:
    """A non-negative int for ``numpy.random.SeedSequence`` from any image id."""
    if isinstance(image_id, (int, np.integer)) and image_id >= 0:
        return int(image_id)
    return zlib.crc32(repr(image_id).encode())


class DetectionTransform:
    """What :func:`detection_transform` returns: a callable for ``Dataset.with_transform``.

    With ``augment`` and a ``seed``, image ``image_id`` seen for the ``n``-th time (by this object) in epoch ``e``
    is augmented with ``numpy.random.default_rng([seed, e, image_id, n])``: a rerun with the same data order gives
    the same augmentations, and every pass over the data new ones. In the main process the visit counter ``n``
    advances by itself; DataLoader workers work on copies, so with ``num_workers > 0`` call ``set_epoch`` before
    each epoch (it also resets the counters) to get new augmentations per epoch.
    """

    def __init__(self, image_processor: Processor, augment: bool = False, seed: int | None = None) -> None:
        if seed is not None and not (isinstance(seed, (int, np.integer)) and seed >= 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
        self.image_processor = image_processor
        self.augment = augment
        self.seed = seed
        self.epoch = 0
        self._visits: Counter = Counter()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self._visits.clear()

    def _generator(self, image_id: Any) -> np.random.Generator | None:
        if not self.augment or self.seed is None:
            return None  # the processor draws fresh entropy when augmenting
        key = _seed_key(image_id)
        visit = self._visits[key]
        self._visits[key] += 1
        return np.random.default_rng([self.seed, self.epoch, key, visit])

    def __call__(self, batch: Mapping[str, list]) -> dict[str, list]:
        column = next((c for c in ("annotations", "objects") if c in batch), None)
        missing = [c for c in ("image", "image_id") if c not in batch] + ([] if column else ["annotations or objects"])
        if missing:
            raise UsageError(
                f"the dataset has no column(s) {missing}; columns: {sorted(batch)} (with Trainer, set "
                "remove_unused_columns=False: the transform needs the raw columns)"
            )
        pixel_values, labels = [], []
        for image, image_id, objects in zip(batch["image"], batch["image_id"], batch[column]):
            out = self.image_processor(
                image,
                annotations={"image_id": image_id, column: objects},
                return_tensors="pt",
                do_augment=self.augment,
                do_pad=False,  # the collator pads the batch
                generator=self._generator(image_id),
            )
            pixel_values.append(out["pixel_values"][0])
            labels.append(out["labels"][0])
        return {"pixel_values": pixel_values, "labels": labels}


def detection_transform(
    image_processor: Processor, augment: bool = False, seed: int | None = None
) -> DetectionTransform:
    """A function for ``datasets.Dataset.with_transform`` turning detection rows into DETR examples.

    Rows have ``image`` (PIL image, array or tensor), ``image_id`` (int) and either ``annotations`` (COCO's
    layout: a list of dicts or a dict of lists with ``bbox`` ([x, y, width, height] pixels), ``category_id``,
    ``area``, ``iscrowd`` and ``id``) or ``objects`` (the Hub's detection datasets', e.g. cppe-5: ``bbox``,
    ``category`` (the ``ClassLabel``'s ids), ``area``, ``id``). Each row becomes ``pixel_values`` ((3, H, W)
    float32, unpadded: :class:`DetectionCollator` pads) and ``labels`` (the processor's dict of tensors).

    Args:
        image_processor: an ``XcvDetrImageProcessor`` (anything with its call signature).
        augment: apply the processor's DETR training augmentations (for the training split).
        seed: make the augmentations reproducible (see :class:`DetectionTransform` for how seeds are derived).

    With ``Trainer``, set ``remove_unused_columns=False``: the transform needs the raw columns.
    """
    return DetectionTransform(image_processor, augment=augment, seed=seed)


# ----------------------------------------------------------------------------------------------- checking rows


def row_annotations(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A detection row's boxes as COCO annotation dicts (``bbox`` ``[x, y, w, h]``, ``category_id``, ...), from its
    ``annotations`` or its ``objects``."""
    column = "annotations" if "annotations" in row else "objects"
    return coco_annotations({"image_id": row.get("image_id", -1), column: row.get(column)})[1]


DROP_OPTION = "--drop_invalid_annotations"


def _row_problems(row: Mapping[str, Any], column: str, label_names: list[str]) -> list[tuple[int | None, Any, str]]:
    """Everything wrong with one row's boxes: (position in the row or None for the whole row, annotation id, what)."""
    try:
        annotations = coco_annotations({"image_id": row["image_id"], column: row[column]})[1]
    except UsageError as err:
        return [(None, None, str(err))]
    size = (row.get("width"), row.get("height"))
    found = []
    for k, obj in enumerate(annotations):
        box, category = obj.get("bbox"), obj.get("category_id")
        problem = bbox_problem(box)
        if problem is None and not is_category(category, label_names):
            real = len(real_categories(label_names))
            problem = f"has category {category!r}, not one of the dataset's {real} categories (its ClassLabel)"
        if problem is None and all(isinstance(v, int) for v in size):  # empty once clipped: the processor refuses it
            x0, y0 = max(box[0], 0), max(box[1], 0)
            if min(box[0] + box[2], size[0]) <= x0 or min(box[1] + box[3], size[1]) <= y0:
                kind = "a zero-area box" if box[2] * box[3] == 0 else "a box outside the image"
                problem = f"has bbox {list(box)}, empty inside the {size[0]}x{size[1]} (width x height) image ({kind})"
        if problem is not None:
            found.append((k, obj.get("id"), f"object {k} {problem}"))
    return found


def _split_problems(
    dataset: Any, split: str, column: str, label_names: list[str], decode_images: bool, progress: bool
) -> list[DataProblem]:
    """Every problem of one split: its ids, its boxes, its images (decoded) and their recorded sizes."""
    wanted = [c for c in ("image_id", column, "width", "height") if c in dataset.column_names]
    rows = dataset.with_format(None).select_columns(wanted)
    image_ids = rows["image_id"]
    problems, files = [], [None] * len(rows)
    sizes: list[tuple[int, int] | None] = [None] * len(rows)
    if decode_images and "image" in dataset.column_names:
        found, sizes, files = image_problems(dataset, split, "image", image_ids, progress)
        problems += found
    seen: set[int] = set()
    for i, row in enumerate(rows):
        image_id, file = row["image_id"], files[i]
        if not isinstance(image_id, int) or image_id in seen:
            what = "is not an integer" if not isinstance(image_id, int) else "is not unique in the split"
            problems.append(DataProblem(split, f"image_id {image_id!r} {what}", i, image_id, file))
            continue
        seen.add(image_id)
        recorded = (row.get("width"), row.get("height"))
        if sizes[i] is not None and all(isinstance(v, int) for v in recorded) and tuple(recorded) != sizes[i]:
            what = f"the dataset says {recorded[0]}x{recorded[1]} (width x height), the image decodes to "
            problems.append(DataProblem(split, what + f"{sizes[i][0]}x{sizes[i][1]}", i, image_id, file))
        for k, annotation, what in _row_problems(row, column, label_names):
            problems.append(DataProblem(split, what, i, image_id, file, annotation, k))
    return problems


def check_detection_dataset(
    data: Mapping[str, Any],
    label_names: list[str],
    name: str = "the dataset",
    *,
    drop_invalid: bool = False,
    decode_images: bool = True,
    progress: bool = True,
    found: Sequence[DataProblem] = (),
) -> tuple[dict[str, Any], DataReport]:
    """Check a whole detection ``DatasetDict`` before anything starts; refuse it, or drop what is invalid.

    Every row of every split: ``image_id`` an integer, unique in its split; its boxes 4 finite numbers
    ``[x, y, width, height]`` not empty inside the image (zero-area, or outside it; when the row has ``width`` and
    ``height``); categories ids of ``label_names`` (the dataset's ``ClassLabel``, ``"N/A"`` marking unused ids).
    With ``decode_images``, every image is decoded (a streaming pass with a progress bar unless ``progress`` is
    False): it must decode whole, at the ``width`` x ``height`` its row records.

    Args:
        drop_invalid: drop the invalid annotations, and the images that do not decode, whose size disagrees or whose
            image_id is repeated (with their annotations), instead of refusing the dataset.
        found: problems found earlier (by a loader: annotations it could not even store), reported with the rest;
            with ``drop_invalid`` counted as dropped.

    Returns:
        The splits (with ``drop_invalid``, without what was dropped) and what was dropped.

    Raises:
        UsageError: listing every problem (split, image_id, file, annotation id, what is wrong), unless
            ``drop_invalid``.
    """
    problems = list(found)
    for split, dataset in data.items():
        if "image_id" not in dataset.column_names:
            raise UsageError(f"split {split!r} of {name} has no 'image_id' column: each image needs an integer id")
        column = annotation_column(dataset)
        problems += _split_problems(dataset, split, column, label_names, decode_images, progress)
    if not drop_invalid:
        refuse(problems, name, DROP_OPTION)
        return dict(data), DataReport()
    return _drop(data, problems)


def _drop(data: Mapping[str, Any], problems: list[DataProblem]) -> tuple[dict[str, Any], DataReport]:
    """``data`` without the rows of the image problems and the annotations of the others."""
    report = DataReport(problems=problems)
    whole = {(p.split, p.row) for p in problems if p.index is None and p.row >= 0}
    report.dropped_images = len(whole)
    report.dropped_annotations = sum(1 for p in problems if p.index is not None and (p.split, p.row) not in whole)
    report.dropped_annotations += sum(1 for p in problems if p.row < 0)  # a loader's, of no row
    kept = {}
    for split, dataset in data.items():
        positions: dict[int, set[int]] = {}
        for p in problems:
            if p.split == split and p.index is not None and (split, p.row) not in whole and p.row >= 0:
                positions.setdefault(p.row, set()).add(p.index)
        if positions:
            dataset = _drop_annotations(dataset, positions)
        kept[split] = drop_rows(dataset, (row for s, row in whole if s == split))
    return kept, report


def _drop_annotations(dataset: Any, positions: dict[int, set[int]]) -> Any:
    """``dataset`` with the annotations at ``positions`` (row -> positions in the row) removed, images untouched."""
    column = annotation_column(dataset)

    def remove(objects: Any, row: int) -> dict[str, Any]:
        gone = positions.get(row)
        if not gone:
            return {column: objects}
        if isinstance(objects, Mapping):  # the Hub's dict of lists
            kept = {key: [v for k, v in enumerate(values) if k not in gone] for key, values in objects.items()}
            return {column: kept}
        return {column: [obj for k, obj in enumerate(objects) if k not in gone]}

    return dataset.with_format(None).map(
        remove, input_columns=[column], with_indices=True, features=dataset.features, keep_in_memory=True
    )
