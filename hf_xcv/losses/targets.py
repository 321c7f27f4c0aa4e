"""The one validation of detection targets: what a detector's ``labels``, the Hungarian matcher's and the set
criterion's targets must be. Reads only metadata (no device synchronisation) unless class ids are checked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

TARGET_FORMAT = "'class_labels' (T,) and 'boxes' (T, 4)"
_ROUNDING = 1e-4  # a normalised coordinate may pass 1 by this much (float rounding); pixel boxes pass it by far


def check_targets(
    targets: Any,
    batch: int,
    *,
    name: str = "targets",
    queries: int | None = None,
    num_classes: int | None = None,
    normalized: bool = False,
) -> None:
    """Raise a ValueError naming the problem unless ``targets`` is one mapping per image of a batch of ``batch``
    with ``class_labels`` (T,) integer ids and ``boxes`` (T, 4).

    Args:
        name: what the message calls them (``"labels"`` for a model's argument).
        queries: when given, no image may hold more objects than there are queries (a one-to-one matching).
        num_classes: when given, every class id must lie in [0, num_classes).
        normalized: the boxes must be normalised (cxcywh relative to the image): a coordinate above 1 (boxes in
            pixels) is refused, naming the image and the box. With ``num_classes``, both values checks cost one
            device synchronisation together.
    """
    if not isinstance(targets, Sequence) or isinstance(targets, (str, bytes)):
        raise ValueError(f"{name} must be a list of one dict per image ({batch}), got {type(targets).__name__}")
    if len(targets) != batch:
        raise ValueError(f"got {len(targets)} {name} for a batch of {batch} images; pass one dict per image")
    for i, target in enumerate(targets):
        if not isinstance(target, Mapping):
            raise ValueError(f"{name}[{i}] must be a dict with {TARGET_FORMAT}, got {type(target).__name__}")
        for key in ("class_labels", "boxes"):
            if key not in target:
                raise ValueError(f"{name}[{i}] has no {key!r} (keys: {sorted(target)}); expected {TARGET_FORMAT}")
        labels, boxes = target["class_labels"], target["boxes"]
        if labels.ndim != 1 or labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
            raise ValueError(
                f"{name}[{i}]['class_labels'] must be a 1-D integer tensor, got {labels.dtype} {tuple(labels.shape)}"
            )
        if boxes.ndim != 2 or boxes.shape[1] != 4 or boxes.shape[0] != labels.shape[0]:
            raise ValueError(
                f"{name}[{i}]['boxes'] must have shape ({labels.shape[0]}, 4) (one cxcywh box per class label), "
                f"got {tuple(boxes.shape)}"
            )
        if queries is not None and labels.shape[0] > queries:
            raise ValueError(
                f"image {i} has {labels.shape[0]} targets but the model has only {queries} queries; "
                "a one-to-one matching needs num_queries >= the number of objects per image"
            )
    if (num_classes is not None or normalized) and len(targets):
        _check_values(targets, name, num_classes, normalized)


def _check_values(
    targets: Sequence[Mapping[str, torch.Tensor]], name: str, num_classes: int | None, normalized: bool
) -> None:
    """Class ids in [0, num_classes), normalised boxes at most 1; one device synchronisation for the whole batch."""
    wrong = []  # 0-d flags, read together
    if num_classes is not None:
        labels = torch.cat([target["class_labels"].reshape(-1) for target in targets])
        wrong.append(((labels < 0) | (labels >= num_classes)).any())
    if normalized:
        boxes = torch.cat([target["boxes"].reshape(-1, 4) for target in targets])
        wrong.append((boxes > 1 + _ROUNDING).any().to(wrong[0].device if wrong else boxes.device))
    if not bool(torch.stack(wrong).any()):
        return
    if num_classes is not None:
        _describe_class_ids(targets, name, num_classes)
    _describe_pixel_boxes(targets, name)


def _describe_pixel_boxes(targets: Sequence[Mapping[str, torch.Tensor]], name: str) -> None:
    for i, target in enumerate(targets):
        boxes = target["boxes"].detach().cpu()
        where = (boxes > 1 + _ROUNDING).any(-1).nonzero().flatten().tolist()
        if where:
            shown = ", ".join(f"box {k} {boxes[k].tolist()}" for k in where[:3])
            raise ValueError(
                f"{name}[{i}]['boxes'] holds {len(where)} box(es) with a coordinate above 1 ({shown}): boxes must "
                "be normalised cxcywh (relative to the image, in [0, 1]), not pixels; the image processor "
                "normalises COCO boxes"
            )


def _describe_class_ids(targets: Sequence[Mapping[str, torch.Tensor]], name: str, num_classes: int) -> None:
    for i, target in enumerate(targets):
        ids = target["class_labels"]
        wrong = ids[(ids < 0) | (ids >= num_classes)].unique().tolist()
        if wrong:
            raise ValueError(
                f"{name}[{i}]['class_labels'] holds unknown category ids {wrong}: expected ids in "
                f"[0, num_classes={num_classes}); with sparse ids such as COCO's (1..90) set "
                "num_classes = max id + 1"
            )
