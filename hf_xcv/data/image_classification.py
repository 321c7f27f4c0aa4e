"""Turning an image-classification ``datasets.Dataset`` into model batches."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from datasets import ClassLabel, DatasetDict

from ..utils.errors import MissingColumnError, UsageError
from .checks import DataProblem, DataReport, drop_rows, image_problems, refuse

DROP_OPTION = "--drop_invalid_images"


def encode_labels(data: DatasetDict, column: str = "label") -> DatasetDict:
    """Make ``column`` a ClassLabel with one id per distinct value over *all* splits.

    Integers sort numerically (``[1, 2, 10]`` -> ids 0, 1, 2, names "1", "2", "10"), anything else as
    text; every split gets the same mapping. A column that is already a ClassLabel is left alone.
    """
    first = next(iter(data.values()))
    if column not in first.column_names:
        raise MissingColumnError(f"the dataset has no column {column!r}; columns: {first.column_names}")
    if isinstance(first.features[column], ClassLabel):
        return data
    values: set = set()
    for split in data.values():
        try:
            values.update(split.unique(column))
        except TypeError as err:
            raise UsageError(f"column {column!r} must hold one class per image (int or str values): {err}") from err
    integers = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values)
    ordered = sorted(values) if integers else sorted(values, key=str)
    index = {value: i for i, value in enumerate(ordered)}
    label = ClassLabel(names=[str(v) for v in ordered])

    def encode(split):
        features = split.features.copy()
        features[column] = label
        return split.map(lambda batch: {column: [index[v] for v in batch[column]]}, batched=True, features=features)

    return DatasetDict({name: encode(split) for name, split in data.items()})


_PIL_MODES = {1: "L", 3: "RGB"}


def image_classification_transform(
    processor: Callable[..., Any],
    image_column: str = "image",
    label_column: str = "label",
    num_channels: int | None = None,
) -> Callable[[dict[str, list]], dict[str, list]]:
    """A function for ``Dataset.with_transform``: images -> ``pixel_values``, labels -> ``labels``.

    With ``num_channels`` (the model's ``config.num_channels``, 1 or 3), PIL images are first converted to
    that many channels (grayscale -> RGB, RGBA -> RGB, ...), so that any image processor works on any images:
    transformers' own ``ViTImageProcessor`` normalises with three means and converts nothing."""
    if num_channels is not None and num_channels not in _PIL_MODES:
        raise UsageError(f"num_channels must be 1 or 3 to convert images, got {num_channels!r}")
    mode = None if num_channels is None else _PIL_MODES[num_channels]

    def transform(batch: dict[str, list]) -> dict[str, list]:
        if image_column not in batch:
            raise MissingColumnError(f"the dataset has no column {image_column!r}; columns: {sorted(batch)}")
        images = batch[image_column]
        if mode is not None:
            images = [_to_mode(image, mode) for image in images]
        pixel_values = processor(images, return_tensors="np")["pixel_values"]
        out: dict[str, list] = {"pixel_values": list(pixel_values)}
        if label_column in batch:
            out["labels"] = batch[label_column]
        return out

    return transform


def _to_mode(image: Any, mode: str) -> Any:
    """A PIL image in ``mode``; other inputs (arrays, tensors) are the caller's layout and pass unchanged."""
    from PIL import Image

    if isinstance(image, Image.Image) and image.mode != mode:
        return image.convert(mode)
    return image


class ImageClassificationCollator:
    """Stack ``pixel_values`` into (B, C, H, W) float32 and ``labels`` into a tensor.

    Integer labels become int64 (single-label), lists of floats float32 (multi-label or regression).
    A sample without pixel values, or of another shape than the first, raises a ValueError naming it.
    """

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if len(features) == 0:
            raise UsageError("cannot collate an empty batch")
        pixels = []
        for index, sample in enumerate(features):
            if "pixel_values" not in sample:
                raise UsageError(f"sample {index} of the batch has no 'pixel_values' (keys: {sorted(sample)})")
            value = torch.as_tensor(np.asarray(sample["pixel_values"]), dtype=torch.float32)
            if pixels and value.shape != pixels[0].shape:
                raise UsageError(
                    f"sample {index} has pixel_values of shape {tuple(value.shape)}, "
                    f"sample 0 has {tuple(pixels[0].shape)}: resize all images to one size"
                )
            pixels.append(value)
        batch = {"pixel_values": torch.stack(pixels)}
        label_keys = {"labels" if "labels" in sample else "label" if "label" in sample else None for sample in features}
        if len(label_keys) > 1:
            raise UsageError("some samples of the batch have labels and some do not")
        key = label_keys.pop()
        if key is not None:
            batch["labels"] = _stack_labels([sample[key] for sample in features])
        return batch


def _is_integer(label: Any) -> bool:
    if isinstance(label, bool):
        return False
    if isinstance(label, (int, np.integer)):
        return True
    if isinstance(label, (torch.Tensor, np.ndarray)) and label.ndim == 0:
        return not label.dtype.is_floating_point if isinstance(label, torch.Tensor) else label.dtype.kind in "iu"
    return False


def _stack_labels(labels: list[Any]) -> torch.Tensor:
    """Class ids -> int64 (single-label); multi-hot rows or regression targets -> float32."""
    if all(_is_integer(label) for label in labels):
        return torch.tensor([int(label) for label in labels], dtype=torch.long)
    return torch.stack([torch.as_tensor(np.asarray(label), dtype=torch.float32) for label in labels])


def random_shift(
    pixel_values: torch.Tensor,
    max_shift: int,
    fill: float | Sequence[float] | torch.Tensor = 0.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Translate each image independently by up to ``max_shift`` pixels, padding with ``fill``.

    ``fill`` is one value or one per channel (e.g. the normalised value of a black pixel).
    """
    if max_shift <= 0:
        return pixel_values
    batch, channels, height, width = pixel_values.shape
    fill = torch.as_tensor(fill, dtype=pixel_values.dtype).reshape(-1, 1, 1).expand(channels, 1, 1)  # (C, 1, 1)
    size = (batch, channels, height + 2 * max_shift, width + 2 * max_shift)
    padded = fill.expand(size).clone()  # (B, C, H+2s, W+2s), every pixel = fill of its channel
    padded[..., max_shift : max_shift + height, max_shift : max_shift + width] = pixel_values
    offsets = torch.randint(0, 2 * max_shift + 1, (batch, 2), generator=generator)
    return torch.stack([padded[i, :, dy : dy + height, dx : dx + width] for i, (dy, dx) in enumerate(offsets.tolist())])


def check_classification_dataset(
    data: DatasetDict,
    image_column: str = "image",
    label_column: str = "label",
    name: str = "the dataset",
    *,
    drop_invalid: bool = False,
    progress: bool = True,
) -> tuple[DatasetDict, DataReport]:
    """Check every row of every split before a run: its image decodes whole (a streaming pass with a progress bar
    unless ``progress`` is False), its label is an id of the ``label_column``'s ``ClassLabel``.

    Returns:
        ``data`` (with ``drop_invalid``, without the invalid rows) and what was dropped (``dropped_images``).

    Raises:
        UsageError: listing every problem (split, file or row, what is wrong), unless ``drop_invalid``.
    """
    problems = []
    for split, dataset in data.items():
        found, _, files = image_problems(dataset, split, image_column, enabled=progress)
        problems += found
        feature = dataset.features.get(label_column)
        if isinstance(feature, ClassLabel):
            for i, label in enumerate(dataset.with_format(None)[label_column]):
                if not (isinstance(label, int) and 0 <= label < feature.num_classes):
                    what = f"has label {label!r}, not an id of the {feature.num_classes} classes {feature.names[:10]}"
                    problems.append(DataProblem(split, what, i, file=files[i]))
    if not drop_invalid:
        refuse(problems, name, DROP_OPTION)
        return data, DataReport()
    rows = {(p.split, p.row) for p in problems}
    kept = DatasetDict({split: drop_rows(ds, (r for s, r in rows if s == split)) for split, ds in data.items()})
    return kept, DataReport(dropped_images=len(rows), problems=problems)
