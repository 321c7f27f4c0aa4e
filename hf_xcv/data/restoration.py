"""The collators of image restoration: pairs for reference-based super-resolution through its processor, clean
images that a training step degrades itself (one task per batch)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from .checks import image_problems, refuse


def check_restoration_dataset(data: Any, name: str = "the dataset", progress: bool = True) -> None:
    """Decode every ``image`` and ``reference`` of every split (a streaming pass with a progress bar unless
    ``progress`` is False) before a run.

    Raises:
        UsageError: listing every image that does not decode (split, file or row, column, what is wrong).
    """
    problems = []
    for split, dataset in data.items():
        for column in ("image", "reference"):
            if column in dataset.column_names:
                found = image_problems(dataset, split, column, enabled=progress)[0]
                problems += [replace(p, what=f"its {column} {p.what}") for p in found]
    refuse(problems, name, None)


class RestorationCollator:
    """Rows of ``image`` (HR), ``reference`` (and ``name``) -> the processor's tensors and ``labels`` (the HR
    images), with the rows' names under ``names``."""

    def __init__(self, processor: Any):
        self.processor = processor

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.processor(
            high_resolution_images=[row["image"] for row in rows],
            references=[row["reference"] for row in rows],
            return_tensors="pt",
        )
        return {**batch, "names": [str(row.get("name", index)) for index, row in enumerate(rows)]}


class CleanImageCollator:
    """Rows of ``image`` (and ``name``) -> the clean images as (3, H, W) uint8 arrays and the rows' names; the
    degradation happens in the training step (one task per batch) or the evaluation."""

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        images = [np.moveaxis(np.asarray(row["image"].convert("RGB")), -1, 0) for row in rows]
        return {"images": images, "names": [str(row.get("name", index)) for index, row in enumerate(rows)]}
