"""The set prediction loss of DETR (Carion et al. 2020) and Deformable DETR (Zhu et al. 2020).

Each decoder layer's predictions are matched one-to-one to the targets by a :class:`HungarianMatcher`; matched
queries are supervised with their target's class and box (L1 + GIoU), unmatched queries with "no object". DETR
classifies with a softmax over K + 1 classes (the last is no-object, down-weighted by ``eos_coefficient``);
Deformable DETR with a sigmoid focal loss over K classes, where no-object is the all-zero target.

Box losses are normalised by the number of target boxes averaged over processes, so that every process's
gradient has the same scale whatever its share of the objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from ..utils.box_ops import box_cxcywh_to_xyxy, paired_generalized_box_iou
from .matcher import HungarianMatcher, Matching, Targets, check_inputs
from .targets import check_targets

CLASS_LOSSES = ("softmax", "focal")
LOSS_NAMES = ("loss_ce", "loss_bbox", "loss_giou")


def sigmoid_focal_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    num_boxes: float | torch.Tensor,
    alpha: float = 0.25,
    gamma: float = 2.0,
) -> torch.Tensor:
    """Sigmoid focal loss (Lin et al. 2017) as Deformable DETR reduces it: ``loss.mean(1).sum() / num_boxes``.

    Args:
        logits: (B, Q, K) logits.
        targets: (B, Q, K) binary targets (one-hot per matched query, all zeros for no-object).
        num_boxes: the normaliser (target boxes per process).
        alpha: weight of the positives, ``1 - alpha`` that of the negatives; a negative alpha disables weighting.
        gamma: focusing exponent on ``1 - p_t``.

    Returns:
        The scalar loss. Averaging over the queries (dim 1) is the original's; :class:`SetCriterion` multiplies
        by Q again, which makes it a sum over queries per target box.
    """
    prob = logits.sigmoid()
    cross_entropy = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")  # (B, Q, K)
    p_t = prob * targets + (1 - prob) * (1 - targets)
    loss = cross_entropy * (1 - p_t) ** gamma
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    return loss.mean(1).sum() / num_boxes  # (B, Q, K) -> (B, K) -> ()


def average_box_count(count: int | torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """The number of target boxes per process, averaged over all processes and clamped to >= 1.

    Sums ``count`` over the processes of an initialised torch.distributed group (world size > 1; this includes
    accelerate's launchers) and divides by the world size, as the original DETR. Stays a tensor on ``device`` so
    that no device synchronisation is needed.

    Args:
        count: this process's number of (non-crowd) target boxes.
        device: where the result lives (for NCCL, this process's GPU).
    """
    total = torch.as_tensor(count, dtype=torch.float32, device=device).clone()  # all_reduce works in place
    world_size = 1
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(total)
        world_size = dist.get_world_size()
    return (total / world_size).clamp(min=1)


def _upcast(tensor: torch.Tensor) -> torch.Tensor:
    # Softmax/sigmoid losses in fp16/bf16 lose the small probabilities that carry the gradient.
    return tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.float()


class SetCriterion(nn.Module):
    """Hungarian-matched set loss over the final and every auxiliary decoder layer.

    Args:
        num_classes: the number of object classes K (class ids 0 .. K-1; for COCO's sparse ids, max id + 1).
        matcher: the matcher run on each layer's predictions.
        eos_coefficient: cross-entropy weight of the no-object class (softmax only).
        class_loss_coefficient: weight of ``loss_ce`` in the total (DETR 1, Deformable DETR 2).
        bbox_loss_coefficient: weight of ``loss_bbox``.
        giou_loss_coefficient: weight of ``loss_giou``.
        class_loss: ``"softmax"`` (logits have K + 1 classes, the last is no-object) or ``"focal"`` (K classes).
        focal_alpha: alpha of the focal loss.
        focal_gamma: gamma of the focal loss.
    """

    def __init__(
        self,
        num_classes: int,
        matcher: HungarianMatcher,
        eos_coefficient: float = 0.1,
        class_loss_coefficient: float = 1.0,
        bbox_loss_coefficient: float = 5.0,
        giou_loss_coefficient: float = 2.0,
        class_loss: str = "softmax",
        focal_alpha: float = 0.25,
        focal_gamma: float = 2.0,
    ) -> None:
        super().__init__()
        _validate_settings(num_classes, eos_coefficient, class_loss, focal_alpha, focal_gamma)
        coefficients = (class_loss_coefficient, bbox_loss_coefficient, giou_loss_coefficient)
        for name, value in zip(LOSS_NAMES, coefficients):
            if not value >= 0:
                raise ValueError(f"SetCriterion: the coefficient of {name} must be >= 0, got {value}")
        self.num_classes = num_classes
        self.matcher = matcher
        self.class_loss = class_loss
        self.focal_alpha = focal_alpha
        self.focal_gamma = focal_gamma
        self.weight_dict = {name: float(value) for name, value in zip(LOSS_NAMES, coefficients)}
        class_weight = torch.ones(num_classes + 1)
        class_weight[-1] = eos_coefficient
        # Not persistent: derived from the settings, and it should follow .to() without entering checkpoints.
        self.register_buffer("class_weight", class_weight, persistent=False)

    @property
    def num_logits(self) -> int:
        """The K of the (B, Q, K) logits this criterion expects."""
        return self.num_classes + 1 if self.class_loss == "softmax" else self.num_classes

    def forward(self, outputs: Mapping[str, object], targets: Targets) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Compute the weighted total loss and its components.

        Args:
            outputs: ``"logits"`` (B, Q, K), ``"pred_boxes"`` (B, Q, 4) normalised cxcywh, and optionally
                ``"auxiliary_outputs"``: one mapping with ``"logits"``/``"pred_boxes"`` per earlier decoder layer.
            targets: B mappings with ``"class_labels"`` (T_i,), ``"boxes"`` (T_i, 4) normalised cxcywh (a coordinate
                above 1, a box in pixels, is refused naming the image and the box) and optionally ``"iscrowd"``
                (T_i,); crowd targets are dropped (they are COCO evaluation ignore regions).

        Returns:
            ``(loss, loss_dict)``: loss_dict holds ``loss_ce``, ``loss_bbox``, ``loss_giou`` and the logging-only
            ``cardinality_error`` and ``class_error`` for the final layer, and the first four suffixed ``_0``,
            ``_1``, ... for the auxiliary layers.
        """
        layers = self._layers(outputs)
        targets, _ = self._prepare_targets(targets, *layers[0])
        device = layers[0][0].device
        sizes = [len(target["class_labels"]) for target in targets]
        num_boxes = average_box_count(sum(sizes), device)
        target_labels = torch.cat([target["class_labels"] for target in targets])  # (sum T,)
        target_boxes = torch.cat([target["boxes"] for target in targets])  # (sum T, 4)
        total, loss_dict = None, {}
        for depth, (logits, pred_boxes) in enumerate(layers):
            pairs = _flatten_matching(self.matcher(logits, pred_boxes, targets), sizes, device)
            losses = self._class_losses(logits, target_labels, pairs, num_boxes, sizes, with_class_error=depth == 0)
            losses.update(self._box_losses(pred_boxes, target_boxes, pairs, num_boxes))
            layer_total = sum(self.weight_dict[name] * losses[name] for name in LOSS_NAMES)
            total = layer_total if total is None else total + layer_total
            suffix = "" if depth == 0 else f"_{depth - 1}"
            loss_dict.update({name + suffix: value for name, value in losses.items()})
        return total, loss_dict

    @torch.no_grad()
    def match(self, outputs: Mapping[str, object], targets: Targets) -> Matching:
        """The matching of the final layer, with target indices into the targets as given (crowd ones included).

        Returns:
            B pairs ``(query_indices, target_indices)`` of int64 CPU tensors.
        """
        layers = self._layers(outputs)
        cleaned, kept = self._prepare_targets(targets, *layers[0])
        indices = self.matcher(*layers[0], cleaned)
        return [
            (queries, matched if keep is None else keep[matched]) for (queries, matched), keep in zip(indices, kept)
        ]

    def _layers(self, outputs: Mapping[str, object]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(logits, pred_boxes) of the final layer, then of each auxiliary layer, with their shapes checked."""
        auxiliary = outputs.get("auxiliary_outputs") or []
        named = [("outputs", outputs), *((f"auxiliary_outputs[{i}]", aux) for i, aux in enumerate(auxiliary))]
        layers = []
        for name, layer in named:
            for key in ("logits", "pred_boxes"):
                if key not in layer:
                    raise ValueError(f"{name} has no {key!r} (keys: {sorted(layer)})")
            logits, pred_boxes = layer["logits"], layer["pred_boxes"]
            if logits.ndim != 3 or logits.shape[-1] != self.num_logits:
                expected = "num_classes + 1 (the last is no-object)" if self.class_loss == "softmax" else "num_classes"
                raise ValueError(
                    f"{name}['logits'] must have shape (batch, queries, {self.num_logits}) for a {self.class_loss} "
                    f"class loss over {self.num_classes} classes ({expected}), got {tuple(logits.shape)}"
                )
            if layers and logits.shape != layers[0][0].shape:
                raise ValueError(
                    f"{name}['logits'] has shape {tuple(logits.shape)}, the final layer's {tuple(layers[0][0].shape)}"
                )
            layers.append((logits, pred_boxes))
        return layers

    def _prepare_targets(
        self, targets: Targets, logits: torch.Tensor, pred_boxes: torch.Tensor
    ) -> tuple[list[dict[str, torch.Tensor]], list[torch.Tensor | None]]:
        """Drop crowd targets, move the rest to the logits' device and check them.

        Returns:
            The cleaned targets and, per image, the original indices of the kept targets on the CPU (None when
            the image has no ``iscrowd``).
        """
        check_targets(targets, logits.shape[0])  # the keys and shapes the cleaning reads
        cleaned, kept = [], []
        for i, target in enumerate(targets):
            labels, boxes, keep = target["class_labels"], target["boxes"], None
            if target.get("iscrowd") is not None:
                keep = _non_crowd(target["iscrowd"], labels.shape[0], i).to(labels.device)
                labels, boxes = labels[keep], boxes[keep]
                keep = keep.nonzero().squeeze(1).cpu()  # (T_kept,) original positions
            cleaned.append({"class_labels": labels.to(logits.device, torch.int64), "boxes": boxes.to(logits.device)})
            kept.append(keep)
        check_inputs(logits, pred_boxes, cleaned)
        check_targets(cleaned, logits.shape[0], num_classes=self.num_classes, normalized=True)  # one synchronisation
        return cleaned, kept

    def _class_losses(
        self,
        logits: torch.Tensor,
        target_labels: torch.Tensor,
        pairs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        num_boxes: torch.Tensor,
        sizes: list[int],
        with_class_error: bool,
    ) -> dict[str, torch.Tensor]:
        """loss_ce over all queries, and the logging-only cardinality and class errors."""
        batch_index, query_index, target_index = pairs
        logits = _upcast(logits)
        matched_labels = target_labels[target_index]  # (N,)
        if self.class_loss == "softmax":
            classes = torch.full(logits.shape[:2], self.num_classes, dtype=torch.int64, device=logits.device)  # (B, Q)
            classes[batch_index, query_index] = matched_labels
            weight = self.class_weight.to(logits.dtype)
            loss_ce = F.cross_entropy(logits.transpose(1, 2), classes, weight=weight)  # over (B, K+1, Q)
        else:
            one_hot = torch.zeros_like(logits)  # (B, Q, K); no-object queries stay all zeros
            one_hot[batch_index, query_index, matched_labels] = 1
            focal = sigmoid_focal_loss(logits, one_hot, num_boxes, self.focal_alpha, self.focal_gamma)
            loss_ce = focal * logits.shape[1]  # the original's x num_queries undoes the mean over queries
        losses = {"loss_ce": loss_ce, "cardinality_error": self._cardinality_error(logits, sizes)}
        if with_class_error:
            losses["class_error"] = _class_error(logits[batch_index, query_index], matched_labels)
        return losses

    @torch.no_grad()
    def _cardinality_error(self, logits: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        """Mean over images of |number of queries predicting an object - number of targets|.

        Softmax: a query predicts an object when its argmax is not no-object (the original). Focal has no
        no-object logit: a query counts when some class has a sigmoid probability above 0.5 (as transformers).
        """
        if self.class_loss == "softmax":
            predicted = (logits.argmax(-1) != logits.shape[-1] - 1).sum(1)  # (B,)
        else:
            predicted = (logits.sigmoid().amax(-1) > 0.5).sum(1)  # (B,)
        expected = torch.tensor(sizes, dtype=logits.dtype, device=logits.device)
        return F.l1_loss(predicted.to(logits.dtype), expected)

    def _box_losses(
        self,
        pred_boxes: torch.Tensor,
        target_boxes: torch.Tensor,
        pairs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        num_boxes: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """L1 and GIoU losses summed over the matched pairs, per target box."""
        batch_index, query_index, target_index = pairs
        predicted = _upcast(pred_boxes[batch_index, query_index])  # (N, 4)
        expected = target_boxes[target_index].to(predicted.dtype)  # (N, 4)
        loss_bbox = F.l1_loss(predicted, expected, reduction="sum") / num_boxes
        # The matcher has validated both sets of boxes for this layer already.
        giou = paired_generalized_box_iou(box_cxcywh_to_xyxy(predicted), box_cxcywh_to_xyxy(expected), check=False)
        return {"loss_bbox": loss_bbox, "loss_giou": (1 - giou).sum() / num_boxes}


def _validate_settings(
    num_classes: int, eos_coefficient: float, class_loss: str, focal_alpha: float, focal_gamma: float
) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"SetCriterion: num_classes must be a positive integer, got {num_classes!r}")
    if class_loss not in CLASS_LOSSES:
        raise ValueError(f"SetCriterion: class_loss must be one of {CLASS_LOSSES}, got {class_loss!r}")
    if not eos_coefficient >= 0:
        raise ValueError(f"SetCriterion: eos_coefficient must be >= 0, got {eos_coefficient}")
    if not focal_alpha <= 1:
        raise ValueError(f"SetCriterion: focal_alpha must be <= 1 (a negative value disables it), got {focal_alpha}")
    if not focal_gamma >= 0:
        raise ValueError(f"SetCriterion: focal_gamma must be >= 0, got {focal_gamma}")


def _non_crowd(iscrowd: torch.Tensor, count: int, image: int) -> torch.Tensor:
    """(T,) boolean mask of the targets that are not crowd regions."""
    if iscrowd.shape != (count,):
        raise ValueError(
            f"targets[{image}]['iscrowd'] must have shape ({count},) like its class_labels, got {tuple(iscrowd.shape)}"
        )
    return iscrowd == 0


def _flatten_matching(
    indices: Matching, sizes: Sequence[int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-image matchings -> (image, query, flat target) index vectors on ``device``, moved in one copy.

    The flat target index points into the targets of all images concatenated.
    """
    offsets = [0]
    for size in sizes[:-1]:
        offsets.append(offsets[-1] + size)
    rows = [
        torch.stack([torch.full_like(queries, image), queries, matched + offset])  # (3, T_i)
        for image, ((queries, matched), offset) in enumerate(zip(indices, offsets))
    ]
    flat = torch.cat(rows, dim=1).to(device) if rows else torch.zeros(3, 0, dtype=torch.int64, device=device)  # (3, N)
    return flat[0], flat[1], flat[2]


@torch.no_grad()
def _class_error(matched_logits: torch.Tensor, matched_labels: torch.Tensor) -> torch.Tensor:
    """100 - top-1 accuracy (%) of the matched queries; 0 when nothing was matched (no error to report)."""
    if matched_labels.numel() == 0:
        return matched_logits.new_zeros(())
    accuracy = (matched_logits.argmax(-1) == matched_labels).to(matched_logits.dtype).mean() * 100
    return 100 - accuracy
