"""Hungarian matching of predictions to targets (DETR, Carion et al. 2020; Deformable DETR, Zhu et al. 2020).

The cost of assigning query q to target t is
``class_cost * C_class + bbox_cost * L1(cxcywh) + giou_cost * (-GIoU(xyxy))``, with C_class either
``-softmax(logits)[label]`` (DETR) or the focal-loss difference at the target class (Deformable DETR). The costs of
all images are computed in one batched (B, Q, T_max) computation over targets padded to the longest image
(rather than transformers' (B*Q) x sum(T) matrix, whose cross-image blocks are thrown away), moved to the CPU once,
and each image's (Q, T_i) block is solved with scipy's ``linear_sum_assignment``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from scipy.optimize import linear_sum_assignment
from torch.nn.utils.rnn import pad_sequence

from ..utils.box_ops import box_cxcywh_to_xyxy, check_boxes, generalized_box_iou, invalid_boxes
from .targets import check_targets

CLASS_COST_TYPES = ("softmax", "focal")
_PAD_BOX = 0.5  # padded target boxes are (0.5, 0.5, 0.5, 0.5) cxcywh: valid, so padding never makes a NaN
_LOG_EPS = 1e-8  # as the original focal cost: keeps log() finite at p = 0 or 1

Targets = Sequence[Mapping[str, torch.Tensor]]
Matching = list[tuple[torch.Tensor, torch.Tensor]]


class HungarianMatcher:
    """One-to-one assignment of queries to targets minimising the weighted matching cost.

    Args:
        class_cost: weight of the classification cost.
        bbox_cost: weight of the L1 distance between cxcywh boxes.
        giou_cost: weight of the negative generalized IoU.
        class_cost_type: ``"softmax"`` (DETR: logits hold a last no-object class) or ``"focal"`` (Deformable DETR:
            sigmoid logits, one per class).
        focal_alpha: alpha of the focal cost.
        focal_gamma: gamma of the focal cost.
    """

    def __init__(
        self,
        class_cost: float = 1.0,
        bbox_cost: float = 5.0,
        giou_cost: float = 2.0,
        class_cost_type: str = "softmax",
        focal_alpha: float = 0.25,
        focal_gamma: float = 2.0,
    ) -> None:
        costs = {"class_cost": class_cost, "bbox_cost": bbox_cost, "giou_cost": giou_cost}
        for name, value in costs.items():
            if not value >= 0:  # also rejects NaN
                raise ValueError(f"HungarianMatcher: {name} must be >= 0, got {value}")
        if not any(costs.values()):
            raise ValueError(
                "HungarianMatcher: class_cost, bbox_cost and giou_cost are all 0; at least one must be > 0"
            )
        if class_cost_type not in CLASS_COST_TYPES:
            raise ValueError(
                f"HungarianMatcher: class_cost_type must be one of {CLASS_COST_TYPES}, got {class_cost_type!r}"
            )
        if not 0 <= focal_alpha <= 1:
            raise ValueError(f"HungarianMatcher: focal_alpha must be in [0, 1], got {focal_alpha}")
        if not focal_gamma >= 0:
            raise ValueError(f"HungarianMatcher: focal_gamma must be >= 0, got {focal_gamma}")
        self.class_cost = float(class_cost)
        self.bbox_cost = float(bbox_cost)
        self.giou_cost = float(giou_cost)
        self.class_cost_type = class_cost_type
        self.focal_alpha = float(focal_alpha)
        self.focal_gamma = float(focal_gamma)

    def __repr__(self) -> str:
        return (
            f"HungarianMatcher(class_cost={self.class_cost}, bbox_cost={self.bbox_cost}, giou_cost={self.giou_cost}, "
            f"class_cost_type={self.class_cost_type!r}, focal_alpha={self.focal_alpha}, focal_gamma={self.focal_gamma})"
        )

    @torch.no_grad()
    def __call__(self, logits: torch.Tensor, pred_boxes: torch.Tensor, targets: Targets) -> Matching:
        """Match every image's queries to its targets.

        Args:
            logits: (B, Q, K) classification logits.
            pred_boxes: (B, Q, 4) predicted boxes, normalised cxcywh.
            targets: B mappings with ``"class_labels"`` (T_i,) integer ids in [0, K) and ``"boxes"`` (T_i, 4)
                normalised cxcywh.

        Returns:
            B pairs ``(query_indices, target_indices)``, int64 CPU tensors of length T_i each, sorted by query:
            query ``query_indices[j]`` is assigned target ``target_indices[j]``.
        """
        check_inputs(logits, pred_boxes, targets)
        sizes = [len(target["boxes"]) for target in targets]
        if max(sizes, default=0) == 0:
            empty = torch.zeros(0, dtype=torch.int64)
            return [(empty, empty) for _ in targets]
        labels, boxes = pad_targets(targets, logits.device, _cost_dtype(pred_boxes))
        _check_values(logits, pred_boxes, labels, boxes, sizes)
        cost = self.cost_matrix(logits, pred_boxes, labels, boxes).cpu()  # (B, Q, T_max), the one transfer
        return [_assign(cost[i, :, :size], i) for i, size in enumerate(sizes)]

    def cost_matrix(
        self, logits: torch.Tensor, pred_boxes: torch.Tensor, labels: torch.Tensor, boxes: torch.Tensor
    ) -> torch.Tensor:
        """The weighted matching cost of every query against every (padded) target of its own image.

        Args:
            logits: (B, Q, K) classification logits.
            pred_boxes: (B, Q, 4) predicted cxcywh boxes.
            labels: (B, T) target class ids, padded.
            boxes: (B, T, 4) target cxcywh boxes, padded with valid boxes.

        Returns:
            (B, Q, T) costs; columns past an image's own target count are padding.
        """
        dtype = _cost_dtype(pred_boxes)
        pred_boxes, boxes = pred_boxes.to(dtype), boxes.to(dtype)
        cost = self.class_cost * self._class_cost(logits.to(dtype), labels)  # (B, Q, T)
        cost = cost + self.bbox_cost * torch.cdist(pred_boxes, boxes, p=1)  # (B, Q, T)
        giou = generalized_box_iou(box_cxcywh_to_xyxy(pred_boxes), box_cxcywh_to_xyxy(boxes), check=False)
        return cost - self.giou_cost * giou  # (B, Q, T)

    def _class_cost(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(B, Q, T) classification cost of each query for each target's class."""
        batch, queries, _ = logits.shape
        at_label = labels[:, None, :].expand(batch, queries, -1)  # (B, Q, T) class index per (query, target)
        if self.class_cost_type == "softmax":
            # The original approximates the NLL by 1 - p[label]; the constant 1 does not change the matching.
            return -logits.softmax(-1).gather(2, at_label)  # (B, Q, T)
        # Focal cost evaluated only at the target classes (the original scores all K classes, then indexes).
        prob = logits.sigmoid().gather(2, at_label)  # (B, Q, T)
        alpha, gamma = self.focal_alpha, self.focal_gamma
        positive = alpha * (1 - prob) ** gamma * -(prob + _LOG_EPS).log()
        negative = (1 - alpha) * prob**gamma * -(1 - prob + _LOG_EPS).log()
        return positive - negative


def _cost_dtype(pred_boxes: torch.Tensor) -> torch.dtype:
    # Costs in fp16 would tie or overflow; float64 inputs keep float64.
    return torch.promote_types(pred_boxes.dtype, torch.float32)


def check_inputs(logits: torch.Tensor, pred_boxes: torch.Tensor, targets: Targets) -> None:
    """Raise a ValueError naming the problem if shapes, dtypes or keys are not what the matcher expects (the targets
    by :func:`.targets.check_targets`).

    Only metadata is read: no device synchronisation.
    """
    if logits.ndim != 3:
        raise ValueError(f"logits must have shape (batch, queries, classes), got {tuple(logits.shape)}")
    batch, queries, _ = logits.shape
    if pred_boxes.shape != (batch, queries, 4):
        raise ValueError(
            f"pred_boxes must have shape {(batch, queries, 4)} to match logits, got {tuple(pred_boxes.shape)}"
        )
    check_targets(targets, batch, queries=queries)


def pad_targets(targets: Targets, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack the targets of all images, padded to the longest: labels (B, T_max) int64, boxes (B, T_max, 4)."""
    labels = pad_sequence([t["class_labels"].to(device, torch.int64) for t in targets], batch_first=True)
    boxes = [t["boxes"].to(device, dtype) for t in targets]
    return labels, pad_sequence(boxes, batch_first=True, padding_value=_PAD_BOX)  # (B, T), (B, T, 4)


def _check_values(
    logits: torch.Tensor, pred_boxes: torch.Tensor, labels: torch.Tensor, boxes: torch.Tensor, sizes: list[int]
) -> None:
    """Validate label ids and boxes with one device synchronisation; name the culprit only when one fails."""
    real = torch.arange(labels.shape[1], device=labels.device) < torch.tensor(sizes, device=labels.device)[:, None]
    bad_labels = ((labels < 0) | (labels >= logits.shape[-1])) & real  # (B, T)
    bad_boxes = invalid_boxes(box_cxcywh_to_xyxy(boxes)) & real  # (B, T)
    bad_preds = invalid_boxes(box_cxcywh_to_xyxy(pred_boxes))  # (B, Q)
    if not bool(bad_labels.any() | bad_boxes.any() | bad_preds.any()):
        return
    for i, size in enumerate(sizes):
        wrong = labels[i, :size][bad_labels[i, :size]]
        if wrong.numel():
            raise ValueError(
                f"targets[{i}]['class_labels'] holds ids {wrong.unique().tolist()} outside [0, {logits.shape[-1]}) "
                f"(the logits have {logits.shape[-1]} classes)"
            )
    for i, size in enumerate(sizes):
        check_boxes(box_cxcywh_to_xyxy(boxes[i, :size]), f"targets[{i}]['boxes'] (cxcywh, shown as xyxy)")
    check_boxes(box_cxcywh_to_xyxy(pred_boxes), "pred_boxes (cxcywh, shown as xyxy; indices are (image, query))")


def _assign(cost: torch.Tensor, image: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Solve one image's (Q, T) assignment problem."""
    if cost.shape[1] == 0:
        empty = torch.zeros(0, dtype=torch.int64)
        return empty, empty
    if not bool(torch.isfinite(cost).all()):
        raise ValueError(
            f"the matching cost of image {image} holds {int((~torch.isfinite(cost)).sum())} non-finite values "
            "(NaN/inf in its logits); the model has likely diverged or overflowed in fp16"
        )
    queries, targets = linear_sum_assignment(cost.numpy())
    return torch.as_tensor(queries, dtype=torch.int64), torch.as_tensor(targets, dtype=torch.int64)
