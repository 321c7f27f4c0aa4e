"""Pure operations on bounding boxes stored as (..., 4) tensors.

Formats: ``cxcywh`` (centre x, centre y, width, height; DETR's normalised targets and predictions), ``xyxy``
(corners x0, y0, x1, y1; what IoU needs) and ``xywh`` (top-left corner, width, height; COCO annotations).

IoU and GIoU never divide by zero: zero-area boxes are valid and give an IoU of 0. Boxes that are degenerate
(x1 < x0 or y1 < y0) or non-finite are rejected by :func:`check_boxes` with a message that says which tensor holds
them and where, instead of the bare ``assert`` of the original DETR.
"""

from __future__ import annotations

import torch

_SHOWN = 5  # how many offending boxes an error message lists


def box_cxcywh_to_xyxy(boxes: torch.Tensor) -> torch.Tensor:
    """(cx, cy, w, h) -> (x0, y0, x1, y1)."""
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def box_xyxy_to_cxcywh(boxes: torch.Tensor) -> torch.Tensor:
    """(x0, y0, x1, y1) -> (cx, cy, w, h)."""
    x0, y0, x1, y1 = boxes.unbind(-1)
    return torch.stack([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0], dim=-1)


def box_xywh_to_xyxy(boxes: torch.Tensor) -> torch.Tensor:
    """(x, y, w, h) with (x, y) the top-left corner (COCO) -> (x0, y0, x1, y1)."""
    x, y, w, h = boxes.unbind(-1)
    return torch.stack([x, y, x + w, y + h], dim=-1)


def box_xyxy_to_xywh(boxes: torch.Tensor) -> torch.Tensor:
    """(x0, y0, x1, y1) -> (x, y, w, h) with (x, y) the top-left corner (COCO)."""
    x0, y0, x1, y1 = boxes.unbind(-1)
    return torch.stack([x0, y0, x1 - x0, y1 - y0], dim=-1)


def _upcast(boxes: torch.Tensor) -> torch.Tensor:
    # Products of coordinates overflow or lose most of their digits in fp16/bf16.
    return boxes if boxes.dtype in (torch.float32, torch.float64) else boxes.float()


def box_area(boxes: torch.Tensor) -> torch.Tensor:
    """Areas of (..., 4) xyxy boxes, shape (...); computed in float32 at least."""
    boxes = _upcast(boxes)
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def _safe_divide(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, and 0 where the denominator is 0.

    The denominator is replaced by 1 before dividing, so neither the value nor the gradient of the unused branch
    can be NaN (``torch.where`` alone would still back-propagate the NaN of 0 / 0).
    """
    nonzero = denominator != 0
    quotient = numerator / torch.where(nonzero, denominator, torch.ones_like(denominator))
    return torch.where(nonzero, quotient, torch.zeros_like(quotient))


def _broadcast_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """IoU and union of xyxy boxes whose shapes broadcast against each other; both (broadcast shape without the 4)."""
    boxes1, boxes2 = _upcast(boxes1), _upcast(boxes2)
    top_left = torch.maximum(boxes1[..., :2], boxes2[..., :2])  # (..., 2)
    bottom_right = torch.minimum(boxes1[..., 2:], boxes2[..., 2:])  # (..., 2)
    overlap = (bottom_right - top_left).clamp(min=0)  # (..., 2)
    inter = overlap[..., 0] * overlap[..., 1]
    union = box_area(boxes1) + box_area(boxes2) - inter
    return _safe_divide(inter, union), union


def _broadcast_giou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """Generalized IoU of xyxy boxes whose shapes broadcast against each other."""
    boxes1, boxes2 = _upcast(boxes1), _upcast(boxes2)
    iou, union = _broadcast_iou(boxes1, boxes2)
    top_left = torch.minimum(boxes1[..., :2], boxes2[..., :2])  # (..., 2)
    bottom_right = torch.maximum(boxes1[..., 2:], boxes2[..., 2:])  # (..., 2)
    extent = (bottom_right - top_left).clamp(min=0)  # (..., 2)
    enclosing = extent[..., 0] * extent[..., 1]
    # The enclosing box is empty only when both boxes lie on one line; the penalty is then 0.
    return iou - _safe_divide(enclosing - union, enclosing)


def box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor, check: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairwise IoU of xyxy boxes.

    Args:
        boxes1: (..., N, 4) boxes.
        boxes2: (..., M, 4) boxes; leading dimensions broadcast with those of ``boxes1``.
        check: validate both inputs with :func:`check_boxes` (callers that validated already pass False).

    Returns:
        ``(iou, union)``, both (..., N, M).
    """
    if check:
        check_boxes(boxes1, "boxes1")
        check_boxes(boxes2, "boxes2")
    return _broadcast_iou(boxes1[..., :, None, :], boxes2[..., None, :, :])  # pairs as (..., N, M, 4)


def generalized_box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor, check: bool = True) -> torch.Tensor:
    """Pairwise generalized IoU (Rezatofighi et al. 2019) of xyxy boxes, in [-1, 1].

    Args:
        boxes1: (..., N, 4) boxes.
        boxes2: (..., M, 4) boxes; leading dimensions broadcast with those of ``boxes1``.
        check: validate both inputs with :func:`check_boxes` (callers that validated already pass False).

    Returns:
        (..., N, M) GIoU matrix.
    """
    if check:
        check_boxes(boxes1, "boxes1")
        check_boxes(boxes2, "boxes2")
    return _broadcast_giou(boxes1[..., :, None, :], boxes2[..., None, :, :])  # pairs as (..., N, M, 4)


def paired_generalized_box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor, check: bool = True) -> torch.Tensor:
    """Generalized IoU of the i-th box of ``boxes1`` with the i-th box of ``boxes2``.

    The set loss needs only the matched pairs: this is the diagonal of :func:`generalized_box_iou` without
    computing the N x N matrix.

    Args:
        boxes1: (N, 4) xyxy boxes (any leading shape equal to that of ``boxes2``).
        boxes2: (N, 4) xyxy boxes.
        check: validate both inputs with :func:`check_boxes`.

    Returns:
        (N,) GIoU values.
    """
    if boxes1.shape != boxes2.shape:
        raise ValueError(
            f"paired GIoU needs boxes of equal shapes, got {tuple(boxes1.shape)} and {tuple(boxes2.shape)}"
        )
    if check:
        check_boxes(boxes1, "boxes1")
        check_boxes(boxes2, "boxes2")
    return _broadcast_giou(boxes1, boxes2)


def invalid_boxes(boxes: torch.Tensor) -> torch.Tensor:
    """(...) mask of the xyxy boxes that are non-finite or degenerate (x1 < x0 or y1 < y0)."""
    non_finite = ~torch.isfinite(boxes).all(-1)
    degenerate = (boxes[..., 2] < boxes[..., 0]) | (boxes[..., 3] < boxes[..., 1])
    return non_finite | degenerate


def check_boxes(boxes: torch.Tensor, name: str) -> None:
    """Raise a ValueError if ``boxes`` is not a (..., 4) tensor of finite, non-degenerate xyxy boxes.

    Costs one device synchronisation when the boxes are valid. The message names the tensor, counts the bad boxes
    and lists the first few with their indices.

    Args:
        boxes: (..., 4) xyxy boxes; zero width or height is allowed.
        name: how the message refers to the tensor, e.g. ``"pred_boxes"`` or ``"targets[2]['boxes']"``.
    """
    if boxes.ndim == 0 or boxes.shape[-1] != 4:
        raise ValueError(f"{name} must have shape (..., 4), got {tuple(boxes.shape)}")
    if not boxes.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {boxes.dtype}")
    if not bool(invalid_boxes(boxes).any()):
        return
    raise ValueError(_describe_invalid_boxes(boxes, name))


def _describe_invalid_boxes(boxes: torch.Tensor, name: str) -> str:
    """The error message of :func:`check_boxes` (only built when something is wrong)."""
    boxes = boxes.detach().cpu()
    non_finite = ~torch.isfinite(boxes)  # (..., 4)
    if non_finite.any():
        where = non_finite.any(-1).nonzero()[:_SHOWN].tolist()
        shown = [boxes[tuple(i)].tolist() for i in where]
        return (
            f"{name} contain {int(non_finite.sum())} non-finite values (NaN/inf) in "
            f"{int(non_finite.any(-1).sum())} boxes, first at indices {where}: {shown}; this is typical of a "
            "diverged or fp16-overflowed model (lower the learning rate, clip gradients or compute the heads in fp32)"
        )
    degenerate = (boxes[..., 2] < boxes[..., 0]) | (boxes[..., 3] < boxes[..., 1])
    where = degenerate.nonzero()[:_SHOWN].tolist()
    shown = [boxes[tuple(i)].tolist() for i in where]
    return (
        f"{name} contain {int(degenerate.sum())} degenerate boxes (x1 < x0 or y1 < y0 in corner format, i.e. a "
        f"negative width or height), first at indices {where}: {shown}; check the box format (cxcywh, xyxy, xywh)"
    )
