"""Pixel reconstruction loss of the image-restoration models (TTSR's ``rec`` loss, IPT's L1)."""

from __future__ import annotations

import torch

RECONSTRUCTION_KINDS = ("l1", "l2")


def reconstruction_loss(
    prediction: torch.Tensor,
    target: torch.Tensor,
    kind: str = "l1",
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean absolute (``"l1"``, the original TTSR's and IPT's) or squared (``"l2"``) error of two images of one
    shape, in float32.

    With ``num_items_in_batch`` (Trainer's count of label values across gradient accumulation) the sum is divided
    by it instead of by this batch's element count, so that accumulated steps average as one big batch would.
    """
    if kind not in RECONSTRUCTION_KINDS:
        raise ValueError(f"kind={kind!r} is not allowed; allowed values: {list(RECONSTRUCTION_KINDS)}")
    if prediction.shape != target.shape:
        raise ValueError(
            f"labels of shape {tuple(target.shape)} do not match the reconstruction's {tuple(prediction.shape)}: "
            "labels are the high-resolution images, the input's size times the scale"
        )
    difference = prediction.float() - target.float()
    errors = difference.abs() if kind == "l1" else difference.square()
    if num_items_in_batch is None:
        return errors.mean()
    return errors.sum() / num_items_in_batch
