"""The collators of image restoration: pairs for reference-based super-resolution through its processor, clean
images that a training step degrades itself (one task per batch)."""

from __future__ import annotations

from typing import Any

import numpy as np


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
