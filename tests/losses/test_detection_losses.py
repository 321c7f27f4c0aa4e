"""Box ops, Hungarian matcher and set criterion of DETR / Deformable DETR: hand-computed values, brute-force optima,
invariants (batched == per image, crowd == removed), bad inputs, parity with transformers 5.24, and the box count
averaged over two gloo processes."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import textwrap
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from helpers import REPO_ROOT
from transformers.loss.loss_deformable_detr import DeformableDetrForObjectDetectionLoss
from transformers.loss.loss_for_object_detection import ForObjectDetectionLoss

from hf_xcv.losses import (
    HungarianMatcher,
    SetCriterion,
    average_box_count,
    box_area,
    box_cxcywh_to_xyxy,
    box_iou,
    box_xywh_to_xyxy,
    box_xyxy_to_cxcywh,
    box_xyxy_to_xywh,
    check_boxes,
    generalized_box_iou,
    paired_generalized_box_iou,
    sigmoid_focal_loss,
)

# ---------------------------------------------------------------------------------------------------------- helpers


def random_boxes(count: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """(count, 4) normalised cxcywh boxes inside the unit square."""
    centre = torch.rand(count, 2, generator=generator, dtype=dtype) * 0.6 + 0.2
    size = torch.rand(count, 2, generator=generator, dtype=dtype) * 0.3 + 0.05
    return torch.cat([centre, size], dim=1)


def random_targets(
    sizes: list[int], num_classes: int, generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> list[dict[str, torch.Tensor]]:
    return [
        {
            "class_labels": torch.randint(0, num_classes, (size,), generator=generator),
            "boxes": random_boxes(size, generator, dtype),
        }
        for size in sizes
    ]


def random_outputs(
    batch: int,
    queries: int,
    classes: int,
    generator: torch.Generator,
    layers: int = 1,
    dtype: torch.dtype = torch.float64,
) -> dict:
    """Model-like outputs; the first of ``layers`` is the final layer, the others are auxiliary."""

    def layer() -> dict[str, torch.Tensor]:
        logits = torch.randn(batch, queries, classes, generator=generator, dtype=dtype) * 2
        boxes = random_boxes(batch * queries, generator, dtype).reshape(batch, queries, 4)  # (B, Q, 4)
        return {"logits": logits, "pred_boxes": boxes}

    outputs = layer()
    if layers > 1:
        outputs["auxiliary_outputs"] = [layer() for _ in range(layers - 1)]
    return outputs


def plain_giou(a: list[float], b: list[float]) -> float:
    """GIoU of two xyxy boxes with Python floats (an independent reference)."""
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    hull = (max(a[2], b[2]) - min(a[0], b[0])) * (max(a[3], b[3]) - min(a[1], b[1]))
    return inter / union - (hull - union) / hull


def plain_cxcywh_to_xyxy(box: list[float]) -> list[float]:
    cx, cy, w, h = box
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


def reference_cost(matcher: HungarianMatcher, logits, pred_boxes, labels, boxes) -> list[list[float]]:
    """One image's (Q, T) matching cost computed element by element with Python floats."""
    if matcher.class_cost_type == "softmax":
        probabilities = logits.softmax(-1).tolist()
    else:
        probabilities = logits.sigmoid().tolist()
    alpha, gamma = matcher.focal_alpha, matcher.focal_gamma
    cost = []
    for q, pred in enumerate(pred_boxes.tolist()):
        row = []
        for label, box in zip(labels.tolist(), boxes.tolist()):
            p = probabilities[q][label]
            if matcher.class_cost_type == "softmax":
                class_cost = -p
            else:
                class_cost = alpha * (1 - p) ** gamma * -math.log(p + 1e-8) - (1 - alpha) * p**gamma * -math.log(
                    1 - p + 1e-8
                )
            l1 = sum(abs(x - y) for x, y in zip(pred, box))
            giou = plain_giou(plain_cxcywh_to_xyxy(pred), plain_cxcywh_to_xyxy(box))
            row.append(matcher.class_cost * class_cost + matcher.bbox_cost * l1 - matcher.giou_cost * giou)
        cost.append(row)
    return cost


def hf_config(num_labels: int, decoder_layers: int, **extra) -> SimpleNamespace:
    return SimpleNamespace(
        class_cost=1.0,
        bbox_cost=5.0,
        giou_cost=2.0,
        eos_coefficient=0.1,
        num_labels=num_labels,
        auxiliary_loss=decoder_layers > 1,
        decoder_layers=decoder_layers,
        bbox_loss_coefficient=5.0,
        giou_loss_coefficient=2.0,
        **extra,
    )


def stacked(outputs: dict, key: str) -> torch.Tensor:
    """transformers' (L, B, Q, .) layout: auxiliary layers first, the final layer last."""
    return torch.stack([aux[key] for aux in outputs.get("auxiliary_outputs", [])] + [outputs[key]])


# --------------------------------------------------------------------------------------------------------- box ops


def test_box_conversions_round_trip():
    boxes = random_boxes(20, torch.Generator().manual_seed(0))
    xyxy = box_cxcywh_to_xyxy(boxes)
    torch.testing.assert_close(box_xyxy_to_cxcywh(xyxy), boxes)
    torch.testing.assert_close(box_xywh_to_xyxy(box_xyxy_to_xywh(xyxy)), xyxy)
    # Leading dimensions are kept and the values are the definitions.
    assert box_cxcywh_to_xyxy(boxes.reshape(4, 5, 4)).shape == (4, 5, 4)
    assert box_cxcywh_to_xyxy(torch.tensor([0.5, 0.5, 0.2, 0.4])).tolist() == pytest.approx([0.4, 0.3, 0.6, 0.7])
    assert box_xywh_to_xyxy(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist() == [1.0, 2.0, 4.0, 6.0]


def test_iou_and_giou_hand_computed():
    unit = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    shifted = torch.tensor([[0.5, 0.0, 1.5, 1.0]])  # overlap 0.5, union 1.5
    far = torch.tensor([[2.0, 0.0, 3.0, 1.0]])  # disjoint: hull 3, union 2
    inner = torch.tensor([[0.25, 0.25, 0.75, 0.75]])  # inside unit: area 0.25
    assert box_area(unit).item() == 1.0
    iou, union = box_iou(unit, shifted)
    assert iou.item() == pytest.approx(1 / 3) and union.item() == pytest.approx(1.5)
    assert generalized_box_iou(unit, unit).item() == pytest.approx(1.0)
    assert generalized_box_iou(unit, shifted).item() == pytest.approx(1 / 3)  # hull == union: no penalty
    assert generalized_box_iou(unit, far).item() == pytest.approx(0 - (3 - 2) / 3)
    assert generalized_box_iou(unit, inner).item() == pytest.approx(0.25)  # containment: hull == union
    pairwise = generalized_box_iou(torch.cat([unit, far]), torch.cat([shifted, inner, far]))
    assert pairwise.shape == (2, 3)
    assert pairwise[1, 2].item() == pytest.approx(1.0)


def test_paired_giou_is_the_diagonal():
    generator = torch.Generator().manual_seed(1)
    boxes1 = box_cxcywh_to_xyxy(random_boxes(12, generator))
    boxes2 = box_cxcywh_to_xyxy(random_boxes(12, generator))
    torch.testing.assert_close(paired_generalized_box_iou(boxes1, boxes2), generalized_box_iou(boxes1, boxes2).diag())
    with pytest.raises(ValueError, match="equal shapes"):
        paired_generalized_box_iou(boxes1, boxes2[:3])


def test_batched_giou_equals_per_image():
    generator = torch.Generator().manual_seed(2)
    boxes1 = box_cxcywh_to_xyxy(random_boxes(15, generator)).reshape(3, 5, 4)  # (B, N, 4)
    boxes2 = box_cxcywh_to_xyxy(random_boxes(6, generator)).reshape(3, 2, 4)  # (B, M, 4)
    batched = generalized_box_iou(boxes1, boxes2)  # (B, N, M)
    assert batched.shape == (3, 5, 2)
    for i in range(3):
        torch.testing.assert_close(batched[i], generalized_box_iou(boxes1[i], boxes2[i]))


def test_zero_area_boxes_are_finite_with_finite_gradients():
    point = torch.tensor([[0.5, 0.5, 0.5, 0.5]], requires_grad=True)  # zero width and height
    line = torch.tensor([[0.5, 0.2, 0.5, 0.8]])  # zero width, on the same vertical line as point
    iou, _ = box_iou(point, point)
    assert iou.item() == 0.0
    giou = generalized_box_iou(torch.cat([point, line]), torch.cat([point, line]))
    assert torch.isfinite(giou).all() and giou.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    paired_generalized_box_iou(point.expand(2, 4), line.expand(2, 4)).sum().backward()
    assert torch.isfinite(point.grad).all()


def test_degenerate_and_non_finite_boxes_raise_a_clear_error():
    good = torch.tensor([[0.0, 0.0, 1.0, 1.0]] * 4)
    flipped = good.clone()
    flipped[2] = torch.tensor([0.8, 0.0, 0.2, 1.0])  # x1 < x0
    with pytest.raises(ValueError, match=r"boxes2 contain 1 degenerate boxes .* indices \[\[2\]\]"):
        generalized_box_iou(good, flipped)
    diverged = good.clone()
    diverged[1, 0] = float("nan")
    diverged[3, 2:] = float("inf")
    with pytest.raises(ValueError, match=r"pred_boxes contain 3 non-finite values .* \[\[1\], \[3\]\].*diverged"):
        check_boxes(diverged, "pred_boxes")
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 4\)"):
        check_boxes(torch.zeros(3, 5), "pred_boxes")
    check_boxes(torch.tensor([[0.3, 0.3, 0.3, 0.3]]), "zero-area boxes are valid")


# --------------------------------------------------------------------------------------------------------- matcher


@pytest.mark.parametrize("cost_type", ["softmax", "focal"])
def test_batched_matching_equals_per_image(cost_type):
    generator = torch.Generator().manual_seed(3)
    sizes = [3, 0, 5, 1]
    outputs = random_outputs(len(sizes), 8, 6, generator)
    targets = random_targets(sizes, 6, generator)
    matcher = HungarianMatcher(class_cost_type=cost_type)
    batched = matcher(outputs["logits"], outputs["pred_boxes"], targets)
    for i, (queries, matched) in enumerate(batched):
        alone = matcher(outputs["logits"][i : i + 1], outputs["pred_boxes"][i : i + 1], targets[i : i + 1])[0]
        assert queries.dtype == matched.dtype == torch.int64 and queries.device.type == "cpu"
        assert len(queries) == sizes[i]
        assert torch.equal(queries, alone[0]) and torch.equal(matched, alone[1])


@pytest.mark.parametrize("cost_type", ["softmax", "focal"])
def test_matching_is_the_brute_force_optimum(cost_type):
    generator = torch.Generator().manual_seed(4)
    matcher = HungarianMatcher(class_cost=1.5, bbox_cost=5.0, giou_cost=2.0, class_cost_type=cost_type)
    for _ in range(6):
        sizes = torch.randint(1, 4, (2,), generator=generator).tolist()
        outputs = random_outputs(2, 4, 3, generator)
        targets = random_targets(sizes, 3, generator)
        indices = matcher(outputs["logits"], outputs["pred_boxes"], targets)
        for i, (target, (queries, matched)) in enumerate(zip(targets, indices)):
            cost = reference_cost(
                matcher, outputs["logits"][i], outputs["pred_boxes"][i], target["class_labels"], target["boxes"]
            )
            found = sum(cost[q][t] for q, t in zip(queries.tolist(), matched.tolist()))
            # Every injective assignment of the T targets to distinct queries.
            best = min(
                sum(cost[q][t] for t, q in enumerate(chosen)) for chosen in itertools.permutations(range(4), sizes[i])
            )
            assert sorted(matched.tolist()) == list(range(sizes[i]))
            assert found == pytest.approx(best, abs=1e-9)


def test_matching_without_targets():
    generator = torch.Generator().manual_seed(5)
    outputs = random_outputs(2, 5, 4, generator)
    matcher = HungarianMatcher()
    empty = {"class_labels": torch.zeros(0, dtype=torch.int64), "boxes": torch.zeros(0, 4)}
    all_empty = matcher(outputs["logits"], outputs["pred_boxes"], [empty, empty])
    one_empty = matcher(outputs["logits"], outputs["pred_boxes"], [empty, random_targets([2], 4, generator)[0]])
    assert all(len(q) == len(t) == 0 for q, t in all_empty)
    assert len(one_empty[0][0]) == 0 and len(one_empty[1][0]) == 2


def test_matcher_rejects_bad_inputs():
    generator = torch.Generator().manual_seed(6)
    outputs = random_outputs(2, 3, 4, generator)
    matcher = HungarianMatcher()
    too_many = random_targets([1, 4], 4, generator)
    with pytest.raises(ValueError, match="image 1 has 4 targets but the model has only 3 queries"):
        matcher(outputs["logits"], outputs["pred_boxes"], too_many)
    nan_logits = outputs["logits"].clone()
    nan_logits[1, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="matching cost of image 1 holds 2 non-finite"):
        matcher(nan_logits, outputs["pred_boxes"], random_targets([1, 2], 4, generator))
    nan_boxes = outputs["pred_boxes"].clone()
    nan_boxes[0, 2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"pred_boxes .* non-finite .* indices \[\[0, 2\]\]"):
        matcher(outputs["logits"], nan_boxes, random_targets([1, 2], 4, generator))
    flipped = random_targets([1, 2], 4, generator)
    flipped[1]["boxes"][0, 2] = -0.1  # negative width
    with pytest.raises(ValueError, match=r"targets\[1\]\['boxes'\].*1 degenerate"):
        matcher(outputs["logits"], outputs["pred_boxes"], flipped)
    with pytest.raises(ValueError, match="got 1 targets for a batch of 2"):
        matcher(outputs["logits"], outputs["pred_boxes"], too_many[:1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bbox_cost": -1.0}, "bbox_cost must be >= 0"),
        ({"class_cost": 0, "bbox_cost": 0, "giou_cost": 0}, "all 0"),
        ({"class_cost_type": "sigmoid"}, "class_cost_type must be one of"),
        ({"focal_alpha": 1.5}, "focal_alpha"),
    ],
)
def test_matcher_validates_its_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HungarianMatcher(**kwargs)


# ------------------------------------------------------------------------------------------------------- criterion


def tiny_case() -> tuple[dict, list[dict]]:
    """2 queries, 3 logits (2 classes + no-object), 1 target of class 1 that query 0 matches clearly."""
    logits = torch.tensor([[[0.2, 1.5, -0.3], [0.1, -0.2, 0.9]]], dtype=torch.float64)
    boxes = torch.tensor([[[0.5, 0.5, 0.4, 0.4], [0.2, 0.2, 0.1, 0.1]]], dtype=torch.float64)
    target = {"class_labels": torch.tensor([1]), "boxes": torch.tensor([[0.55, 0.45, 0.3, 0.5]], dtype=torch.float64)}
    return {"logits": logits, "pred_boxes": boxes}, [target]


def test_softmax_components_by_hand():
    outputs, targets = tiny_case()
    criterion = SetCriterion(num_classes=2, matcher=HungarianMatcher(), eos_coefficient=0.1)
    assert [q.tolist() for q in criterion.match(outputs, targets)[0]] == [[0], [0]]
    loss, parts = criterion(outputs, targets)
    log_p = outputs["logits"][0].log_softmax(-1)
    # Query 0 -> class 1 (weight 1), query 1 -> no-object (weight 0.1): a weighted mean.
    expected_ce = (-log_p[0, 1] - 0.1 * log_p[1, 2]) / (1 + 0.1)
    expected_l1 = 0.05 + 0.05 + 0.1 + 0.1
    expected_giou = 1 - plain_giou([0.3, 0.3, 0.7, 0.7], [0.4, 0.2, 0.7, 0.7])
    assert parts["loss_ce"].item() == pytest.approx(expected_ce.item())
    assert parts["loss_bbox"].item() == pytest.approx(expected_l1)
    assert parts["loss_giou"].item() == pytest.approx(expected_giou)
    # Query 0 predicts class 1, query 1 no-object: one predicted object, one target; query 0 is right.
    assert parts["cardinality_error"].item() == 0.0 and parts["class_error"].item() == 0.0
    assert loss.item() == pytest.approx(expected_ce.item() + 5 * expected_l1 + 2 * expected_giou)
    assert not parts["cardinality_error"].requires_grad and not parts["class_error"].requires_grad


def test_focal_components_by_hand():
    outputs, targets = tiny_case()
    outputs["logits"] = outputs["logits"][..., :2]  # focal: one logit per class, no no-object column
    matcher = HungarianMatcher(class_cost=2.0, class_cost_type="focal")
    criterion = SetCriterion(2, matcher, class_loss_coefficient=2.0, class_loss="focal")
    loss, parts = criterion(outputs, targets)
    one_hot = [[0.0, 1.0], [0.0, 0.0]]
    expected_ce = 0.0
    for q in range(2):
        for k in range(2):
            p, y = torch.sigmoid(outputs["logits"][0, q, k]).item(), one_hot[q][k]
            p_t = p * y + (1 - p) * (1 - y)
            alpha_t = 0.25 * y + 0.75 * (1 - y)
            expected_ce += alpha_t * (1 - p_t) ** 2 * -math.log(p_t)  # summed over queries, / 1 target box
    assert parts["loss_ce"].item() == pytest.approx(expected_ce)
    assert parts["loss_bbox"].item() == pytest.approx(0.3)
    assert loss.item() == pytest.approx(2 * expected_ce + 5 * parts["loss_bbox"].item() + 2 * parts["loss_giou"].item())
    # Both queries have a positive logit (sigmoid > 0.5): two predicted objects for one target.
    assert parts["cardinality_error"].item() == 1.0


def test_sigmoid_focal_loss_reduction():
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(2, 5, 3, generator=generator, dtype=torch.float64)
    targets = (torch.rand(2, 5, 3, generator=generator) > 0.7).double()
    per_element = sigmoid_focal_loss(logits, targets, num_boxes=1.0, alpha=0.25, gamma=2.0) * 5
    p = logits.sigmoid()
    p_t = p * targets + (1 - p) * (1 - targets)
    manual = ((0.25 * targets + 0.75 * (1 - targets)) * (1 - p_t) ** 2 * -p_t.log()).sum()
    torch.testing.assert_close(per_element, manual)  # mean over queries x Q == sum over all elements
    torch.testing.assert_close(sigmoid_focal_loss(logits, targets, 4.0) * 4, sigmoid_focal_loss(logits, targets, 1.0))


def test_crowd_targets_are_ignored():
    generator = torch.Generator().manual_seed(8)
    outputs = random_outputs(2, 6, 4, generator, layers=2)
    targets = random_targets([4, 2], 3, generator)
    crowd = [torch.tensor([0, 1, 0, 1]), torch.tensor([False, False])]
    with_crowd = [dict(target, iscrowd=flags) for target, flags in zip(targets, crowd)]
    removed = [{key: value[flags == 0] for key, value in target.items()} for target, flags in zip(targets, crowd)]
    criterion = SetCriterion(3, HungarianMatcher())
    loss, parts = criterion(outputs, with_crowd)
    loss_removed, parts_removed = criterion(outputs, removed)
    assert loss.item() == pytest.approx(loss_removed.item())
    assert parts.keys() == parts_removed.keys()
    for key in parts:
        assert parts[key].item() == pytest.approx(parts_removed[key].item()), key
    # match() points into the targets as given, crowd ones included.
    (queries, matched), (queries_removed, matched_removed) = (
        criterion.match(outputs, with_crowd)[0],
        criterion.match(outputs, removed)[0],
    )
    assert torch.equal(queries, queries_removed)
    assert matched.tolist() == [[0, 2][j] for j in matched_removed.tolist()]  # non-crowd targets 0 and 2


def test_unknown_category_ids_raise_naming_the_image():
    generator = torch.Generator().manual_seed(9)
    outputs = random_outputs(3, 4, 3, generator)
    targets = random_targets([1, 1, 2], 2, generator)
    targets[2]["class_labels"] = torch.tensor([1, 2])  # 2 is the no-object index, not a category
    criterion = SetCriterion(2, HungarianMatcher())
    with pytest.raises(ValueError, match=r"targets\[2\]\['class_labels'\] holds unknown category ids \[2\]"):
        criterion(outputs, targets)
    targets[2]["class_labels"] = torch.tensor([1, -1])
    with pytest.raises(ValueError, match=r"targets\[2\].*\[-1\].*num_classes=2"):
        criterion(outputs, targets)


def test_boxes_in_pixels_are_refused_naming_the_image_and_the_box():
    generator = torch.Generator().manual_seed(10)
    outputs = random_outputs(2, 4, 3, generator)
    targets = random_targets([2, 2], 2, generator)
    targets[1]["boxes"] = torch.tensor([[0.5, 0.5, 0.2, 0.2], [120.0, 80.0, 40.0, 30.0]], dtype=torch.float64)
    criterion = SetCriterion(2, HungarianMatcher())
    with pytest.raises(ValueError, match=r"targets\[1\]\['boxes'\] holds 1 box\(es\) with a coordinate above 1 "
                       r"\(box 1 \[120.0, 80.0, 40.0, 30.0\]\): boxes must be normalised cxcywh"):  # fmt: skip
        criterion(outputs, targets)
    with pytest.raises(ValueError, match=r"targets\[1\]\['boxes'\] holds 1 box"):
        criterion.match(outputs, targets)
    targets[1]["boxes"][1] = torch.tensor([0.5, 0.5, 1.0, 1.0], dtype=torch.float64)  # the whole image: valid
    criterion(outputs, targets)


def test_criterion_rejects_bad_settings_and_outputs():
    with pytest.raises(ValueError, match="class_loss must be one of"):
        SetCriterion(2, HungarianMatcher(), class_loss="bce")
    with pytest.raises(ValueError, match="num_classes must be a positive integer"):
        SetCriterion(0, HungarianMatcher())
    with pytest.raises(ValueError, match="eos_coefficient must be >= 0"):
        SetCriterion(2, HungarianMatcher(), eos_coefficient=-0.1)
    with pytest.raises(ValueError, match="focal_alpha must be <= 1"):
        SetCriterion(2, HungarianMatcher(), class_loss="focal", focal_alpha=2.0)
    with pytest.raises(ValueError, match="coefficient of loss_giou must be >= 0"):
        SetCriterion(2, HungarianMatcher(), giou_loss_coefficient=-1)
    outputs, targets = tiny_case()
    with pytest.raises(ValueError, match=r"logits'\] must have shape \(batch, queries, 2\) for a focal"):
        SetCriterion(2, HungarianMatcher(), class_loss="focal")(outputs, targets)
    with pytest.raises(ValueError, match=r"auxiliary_outputs\[0\] has no 'pred_boxes'"):
        SetCriterion(2, HungarianMatcher())(dict(outputs, auxiliary_outputs=[{"logits": outputs["logits"]}]), targets)


def test_auxiliary_layers_use_their_own_matching():
    outputs, targets = tiny_case()  # the final layer matches query 0
    aux_boxes = outputs["pred_boxes"].flip(1)  # the auxiliary layer's query 1 now holds the close box
    aux_logits = outputs["logits"].flip(1)
    outputs["auxiliary_outputs"] = [{"logits": aux_logits, "pred_boxes": aux_boxes}]
    criterion = SetCriterion(2, HungarianMatcher())
    loss, parts = criterion(outputs, targets)
    # Its own matching (query 1) makes the auxiliary losses equal to the final layer's; reusing the final
    # layer's matching (query 0) would pair the target with the far box.
    for name in ("loss_ce", "loss_bbox", "loss_giou", "cardinality_error"):
        assert parts[f"{name}_0"].item() == pytest.approx(parts[name].item()), name
    assert "class_error_0" not in parts
    assert loss.item() == pytest.approx(
        2 * sum(criterion.weight_dict[k] * parts[k].item() for k in criterion.weight_dict)
    )


def test_images_without_objects():
    generator = torch.Generator().manual_seed(10)
    outputs = random_outputs(2, 4, 3, generator, layers=2)
    for leaf in (outputs["logits"], outputs["pred_boxes"]):
        leaf.requires_grad_(True)
    empty = {"class_labels": torch.zeros(0, dtype=torch.int64), "boxes": torch.zeros(0, 4, dtype=torch.float64)}
    loss, parts = SetCriterion(2, HungarianMatcher())(outputs, [empty, empty])
    assert parts["loss_ce"].item() > 0 and torch.isfinite(loss)
    assert parts["loss_bbox"].item() == parts["loss_giou"].item() == parts["class_error"].item() == 0.0
    loss.backward()
    assert torch.isfinite(outputs["logits"].grad).all() and outputs["logits"].grad.abs().sum() > 0
    # Every query should predict no-object: the error counts those that do not.
    predicted = (outputs["logits"].argmax(-1) != 2).sum(1).double()
    assert parts["cardinality_error"].item() == pytest.approx(predicted.mean().item())
    # One empty image next to a non-empty one.
    loss, parts = SetCriterion(2, HungarianMatcher())(outputs, [empty, random_targets([2], 2, generator)[0]])
    assert parts["loss_bbox"].item() > 0 and torch.isfinite(loss)


def test_no_object_weight_is_a_non_persistent_buffer():
    criterion = SetCriterion(3, HungarianMatcher(), eos_coefficient=0.2)
    assert criterion.class_weight.tolist() == pytest.approx([1, 1, 1, 0.2])
    assert "class_weight" not in criterion.state_dict()
    assert criterion.to(torch.float64).class_weight.dtype == torch.float64  # moves with .to()


def test_half_precision_inputs_are_computed_in_float32():
    generator = torch.Generator().manual_seed(13)
    outputs = random_outputs(2, 5, 3, generator, layers=2, dtype=torch.bfloat16)
    targets = random_targets([2, 1], 2, generator)
    widened = {
        "logits": outputs["logits"].float(),
        "pred_boxes": outputs["pred_boxes"].float(),
        "auxiliary_outputs": [{k: v.float() for k, v in aux.items()} for aux in outputs["auxiliary_outputs"]],
    }
    criterion = SetCriterion(2, HungarianMatcher())
    loss, parts = criterion(outputs, targets)
    loss_float, parts_float = criterion(widened, targets)
    assert loss.dtype == torch.float32
    # The same (bf16-representable) values give the same losses: nothing is computed in bf16.
    assert loss.item() == pytest.approx(loss_float.item(), rel=1e-6)
    assert parts["loss_giou_0"].item() == pytest.approx(parts_float["loss_giou_0"].item(), rel=1e-6)


# ----------------------------------------------------------------------------------------- parity with transformers


def assert_components_equal(ours: dict, theirs: dict, names: list[str]) -> None:
    for name in names:
        assert ours[name].item() == pytest.approx(theirs[name].item(), abs=1e-6, rel=1e-6), name


def test_parity_with_transformers_detr_loss():
    generator = torch.Generator().manual_seed(11)
    sizes, num_labels, decoder_layers = [3, 0, 5], 5, 3
    # float32, the dtype of a real model: both implementations must agree to 1e-6 there.
    outputs = random_outputs(len(sizes), 10, num_labels + 1, generator, layers=decoder_layers, dtype=torch.float32)
    targets = random_targets(sizes, num_labels, generator, dtype=torch.float32)
    leaves = [layer[key] for layer in [outputs, *outputs["auxiliary_outputs"]] for key in ("logits", "pred_boxes")]
    for leaf in leaves:
        leaf.requires_grad_(True)
    theirs_loss, theirs, _ = ForObjectDetectionLoss(
        outputs["logits"],
        targets,
        "cpu",
        outputs["pred_boxes"],
        hf_config(num_labels, decoder_layers),
        outputs_class=stacked(outputs, "logits"),
        outputs_coord=stacked(outputs, "pred_boxes"),
    )
    loss, ours = SetCriterion(num_labels, HungarianMatcher())(outputs, targets)
    names = [f"{n}{s}" for s in ["", "_0", "_1"] for n in ("loss_ce", "loss_bbox", "loss_giou", "cardinality_error")]
    assert set(names) <= set(theirs)
    assert_components_equal(ours, theirs, names)
    assert loss.item() == pytest.approx(theirs_loss.item(), abs=1e-6, rel=1e-6)  # both weigh loss_ce by 1
    # The gradients too, through every layer's class and box losses (the zero-division guards included).
    their_grads = torch.autograd.grad(theirs_loss, leaves)
    for ours_grad, their_grad in zip(torch.autograd.grad(loss, leaves), their_grads):
        assert their_grad.abs().sum() > 0
        torch.testing.assert_close(ours_grad, their_grad, atol=1e-6, rtol=1e-5)


def test_parity_with_transformers_deformable_detr_loss():
    generator = torch.Generator().manual_seed(12)
    sizes, num_labels, decoder_layers = [2, 4], 4, 2
    outputs = random_outputs(len(sizes), 8, num_labels, generator, layers=decoder_layers, dtype=torch.float32)
    targets = random_targets(sizes, num_labels, generator, dtype=torch.float32)
    config = hf_config(num_labels, decoder_layers, focal_alpha=0.25)
    config.class_cost = 2.0  # the original's matcher weight (transformers' default is 1)
    _, theirs, _ = DeformableDetrForObjectDetectionLoss(
        outputs["logits"],
        targets,
        "cpu",
        outputs["pred_boxes"],
        config,
        outputs_class=stacked(outputs, "logits"),
        outputs_coord=stacked(outputs, "pred_boxes"),
    )
    matcher = HungarianMatcher(class_cost=2.0, class_cost_type="focal")
    _, ours = SetCriterion(num_labels, matcher, class_loss_coefficient=2.0, class_loss="focal")(outputs, targets)
    # Components only: transformers weighs loss_ce by a hard-coded 1 in the total, the original Deformable DETR
    # (and this criterion, as configured) by 2, so the totals differ by design.
    names = [f"{n}{s}" for s in ["", "_0"] for n in ("loss_ce", "loss_bbox", "loss_giou", "cardinality_error")]
    assert_components_equal(ours, theirs, names)


# -------------------------------------------------------------------------------------------------- distributed

# Rank 1 runs in a subprocess, rank 0 in this one (one torch start-up instead of two). The subprocess loads
# hf_xcv.losses under a bare package stub: hf_xcv/__init__ registers every model and imports transformers, which
# costs seconds this test does not need.
_RANK1 = textwrap.dedent(
    """
    import datetime, sys, types
    import torch.distributed as dist

    root, init_file = sys.argv[1], sys.argv[2]
    package = types.ModuleType("hf_xcv")
    package.__path__ = [root + "/hf_xcv"]
    sys.modules["hf_xcv"] = package
    from hf_xcv.losses.detection import average_box_count

    dist.init_process_group("gloo", init_method="file://" + init_file, rank=1, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    print([average_box_count(count, "cpu").item() for count in (6, 1)])
    dist.destroy_process_group()
    """
)


def test_average_box_count_over_two_processes(tmp_path):
    assert average_box_count(0, "cpu").item() == 1.0  # clamped, single process
    assert average_box_count(torch.tensor(7), "cpu").item() == 7.0
    init_file = tmp_path / "rendezvous"
    rank1 = subprocess.Popen(
        [sys.executable, "-c", _RANK1, str(REPO_ROOT), str(init_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=0, world_size=2, timeout=timedelta(seconds=120)
        )
        ours = [average_box_count(count, "cpu").item() for count in (3, 0)]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        stdout, stderr = rank1.communicate(timeout=120)
    assert rank1.returncode == 0, stderr
    # (3 + 6) / 2 = 4.5; then (0 + 1) / 2 = 0.5, clamped to 1; both processes agree.
    assert ours == [4.5, 1.0]
    assert stdout.strip() == "[4.5, 1.0]"
