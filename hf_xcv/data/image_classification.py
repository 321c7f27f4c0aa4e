"""Turning an image-classification ``datasets.Dataset`` into model batches."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch


def image_classification_transform(
    processor: Callable[..., Any], image_column: str = "image", label_column: str = "label"
) -> Callable[[dict[str, list]], dict[str, list]]:
    """A function for ``Dataset.with_transform``: images -> ``pixel_values``, labels -> ``labels``."""

    def transform(batch: dict[str, list]) -> dict[str, list]:
        if image_column not in batch:
            raise KeyError(f"the dataset has no column {image_column!r}; columns: {sorted(batch)}")
        pixel_values = processor(batch[image_column], return_tensors="np")["pixel_values"]
        out: dict[str, list] = {"pixel_values": list(pixel_values)}
        if label_column in batch:
            out["labels"] = batch[label_column]
        return out

    return transform


class ImageClassificationCollator:
    """Stack ``pixel_values`` into (B, C, H, W) float32 and ``labels`` into a tensor.

    Integer labels become int64 (single-label), lists of floats float32 (multi-label or regression).
    A sample without pixel values, or of another shape than the first, raises a ValueError naming it.
    """

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if len(features) == 0:
            raise ValueError("cannot collate an empty batch")
        pixels = []
        for index, sample in enumerate(features):
            if "pixel_values" not in sample:
                raise ValueError(f"sample {index} of the batch has no 'pixel_values' (keys: {sorted(sample)})")
            value = torch.as_tensor(np.asarray(sample["pixel_values"]), dtype=torch.float32)
            if pixels and value.shape != pixels[0].shape:
                raise ValueError(
                    f"sample {index} has pixel_values of shape {tuple(value.shape)}, "
                    f"sample 0 has {tuple(pixels[0].shape)}: resize all images to one size"
                )
            pixels.append(value)
        batch = {"pixel_values": torch.stack(pixels)}
        key = "labels" if "labels" in features[0] else "label" if "label" in features[0] else None
        if key is not None:
            labels = [sample[key] for sample in features]
            is_int = all(isinstance(label, (int, np.integer)) for label in labels)
            batch["labels"] = torch.tensor(labels, dtype=torch.long if is_int else torch.float32)
        return batch


def random_shift(pixel_values: torch.Tensor, max_shift: int, fill: float, generator: torch.Generator | None = None):
    """Translate each image independently by up to ``max_shift`` pixels (pad with ``fill``, random crop)."""
    if max_shift <= 0:
        return pixel_values
    batch, _, height, width = pixel_values.shape
    padded = torch.nn.functional.pad(pixel_values, (max_shift,) * 4, value=fill)  # (B, C, H+2s, W+2s)
    offsets = torch.randint(0, 2 * max_shift + 1, (batch, 2), generator=generator)
    return torch.stack([padded[i, :, dy : dy + height, dx : dx + width] for i, (dy, dx) in enumerate(offsets.tolist())])
