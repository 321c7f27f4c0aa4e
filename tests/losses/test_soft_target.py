"""The soft-target cross-entropy: the hand computation, torch's cross-entropy on class ids and one-hot rows (with and
without label smoothing), and the image classifiers (ViT, Swin) taking a probability matrix as labels."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from model_testing import tiny_config

import hf_xcv
from hf_xcv.data import MixupCutmix
from hf_xcv.losses import soft_target_cross_entropy
from hf_xcv.utils.errors import UsageError


def logits_and_targets(batch: int = 4, classes: int = 5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, classes, generator=g, dtype=torch.float64) * 3
    targets = torch.rand(batch, classes, generator=g, dtype=torch.float64)
    return logits, targets / targets.sum(1, keepdim=True)


def by_hand(logits: torch.Tensor, targets: torch.Tensor, smoothing: float = 0.0) -> float:
    """Σ_b Σ_c -t'[b, c] log(exp(z[b, c]) / Σ_k exp(z[b, k])) / B with t' = (1 - ε) t + ε / C, in Python floats."""
    total = 0.0
    rows, classes = logits.shape
    for b in range(rows):
        z = logits[b].tolist()
        norm = math.log(sum(math.exp(v) for v in z))
        for c in range(classes):
            t = (1 - smoothing) * targets[b, c].item() + smoothing / classes
            total -= t * (z[c] - norm)
    return total / rows


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_it_equals_the_hand_computation(smoothing):
    logits, targets = logits_and_targets()
    loss = soft_target_cross_entropy(logits, targets, label_smoothing=smoothing)
    assert loss.item() == pytest.approx(by_hand(logits, targets, smoothing), rel=1e-12)
    per_row = soft_target_cross_entropy(logits, targets, label_smoothing=smoothing, reduction="none")
    assert per_row.shape == (4,)
    torch.testing.assert_close(per_row.mean(), loss)
    torch.testing.assert_close(soft_target_cross_entropy(logits, targets, smoothing, reduction="sum"), per_row.sum())


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_on_one_hot_rows_it_is_torchs_cross_entropy(smoothing):
    logits, _ = logits_and_targets(batch=6, classes=7)
    labels = torch.tensor([0, 6, 3, 3, 1, 2])
    one_hot = F.one_hot(labels, 7).double()
    expected = F.cross_entropy(logits, labels, label_smoothing=smoothing)
    torch.testing.assert_close(soft_target_cross_entropy(logits, one_hot, label_smoothing=smoothing), expected)
    torch.testing.assert_close(soft_target_cross_entropy(logits, labels, label_smoothing=smoothing), expected)


def test_class_ids_go_to_torchs_cross_entropy_with_its_ignore_index():
    logits, _ = logits_and_targets(batch=4, classes=3)
    labels = torch.tensor([2, -100, 0, 1])
    torch.testing.assert_close(
        soft_target_cross_entropy(logits, labels, label_smoothing=0.1),
        F.cross_entropy(logits, labels, label_smoothing=0.1),
    )


def test_the_mixers_smoothed_matrix_equals_smoothing_in_the_loss():
    """Smoothing in MixupCutmix (timm's off = ε / C, on = 1 - ε + ε / C) equals (1 - ε) t + ε / C in the loss."""
    labels = torch.tensor([0, 3, 1, 2])
    logits = torch.randn(4, 5)
    smoothed = MixupCutmix(5, label_smoothing=0.1, prob=0.0)(torch.zeros(4, 1, 2, 2), labels)[1]
    torch.testing.assert_close(
        soft_target_cross_entropy(logits, smoothed),
        soft_target_cross_entropy(logits, F.one_hot(labels, 5).float(), label_smoothing=0.1),
    )


def test_half_precision_logits_are_computed_in_float32():
    logits, targets = logits_and_targets()
    loss = soft_target_cross_entropy(logits.bfloat16(), targets.float())
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(by_hand(logits.bfloat16().double(), targets.float().double()), rel=1e-5)


def test_bad_inputs_are_refused():
    logits, targets = logits_and_targets()
    with pytest.raises(ValueError, match="logits' shape"):
        soft_target_cross_entropy(logits, targets[:, :3])
    with pytest.raises(ValueError, match="integer class ids or a .* floating-point matrix"):
        soft_target_cross_entropy(logits, targets.long())
    with pytest.raises(ValueError, match="3 class ids for 4 rows"):
        soft_target_cross_entropy(logits, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="label_smoothing"):
        soft_target_cross_entropy(logits, targets, label_smoothing=1.5)
    with pytest.raises(ValueError, match="reduction"):
        soft_target_cross_entropy(logits, targets, reduction="max")
    with pytest.raises(ValueError, match="logits must be"):
        soft_target_cross_entropy(logits[0], targets[0])


CLASSIFIERS = [("xcv_vit", hf_xcv.ViTForImageClassification), ("xcv_swin", hf_xcv.SwinForImageClassification)]


def classifier(model_type, cls, **overrides):
    torch.manual_seed(0)
    model = cls(tiny_config(model_type, **overrides)).eval()
    size = model.config.image_size
    size = size if isinstance(size, int) else size[0]
    pixels = torch.randn(4, model.config.num_channels, size, size)
    return model, pixels


@pytest.mark.parametrize("model_type, cls", CLASSIFIERS, ids=["vit", "swin"])
def test_classifiers_take_a_probability_matrix_as_labels(model_type, cls):
    model, pixels = classifier(model_type, cls, problem_type="single_label_classification")
    labels = torch.tensor([0, 1, 2, 1])
    pixels, targets = MixupCutmix(3, generator=torch.Generator().manual_seed(0))(pixels, labels)
    out = model(pixel_values=pixels, labels=targets)
    assert out.loss.item() == pytest.approx(by_hand(out.logits.double(), targets.double()), rel=1e-5)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    # class ids are unchanged: torch's cross-entropy
    out = model(pixel_values=pixels, labels=labels)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))


@pytest.mark.parametrize("model_type, cls", CLASSIFIERS, ids=["vit", "swin"])
def test_trainers_item_count_of_a_matrix_counts_num_labels_per_row(model_type, cls):
    """Trainer passes num_items_in_batch = labels.ne(-100).sum() over the accumulated batches: B * num_labels per
    batch of soft targets; the loss divides the summed row losses by the rows that count."""
    model, pixels = classifier(model_type, cls, problem_type="single_label_classification")
    targets = torch.softmax(torch.randn(4, 3), dim=1)
    with torch.no_grad():
        mean = model(pixel_values=pixels, labels=targets).loss
        one_batch = model(pixel_values=pixels, labels=targets, num_items_in_batch=torch.tensor(4 * 3)).loss
        two_batches = model(pixel_values=pixels, labels=targets, num_items_in_batch=torch.tensor(2 * 4 * 3)).loss
    torch.testing.assert_close(one_batch, mean)
    torch.testing.assert_close(two_batches, mean / 2)


@pytest.mark.parametrize("model_type, cls", CLASSIFIERS, ids=["vit", "swin"])
def test_without_problem_type_a_float_matrix_keeps_transformers_multi_label_meaning(model_type, cls):
    model, pixels = classifier(model_type, cls)
    assert model.config.problem_type is None
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    with torch.no_grad():
        out = model(pixel_values=pixels, labels=targets)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, targets))


@pytest.mark.parametrize("model_type, cls", CLASSIFIERS, ids=["vit", "swin"])
def test_a_matrix_of_the_wrong_width_is_refused(model_type, cls):
    model, pixels = classifier(model_type, cls, problem_type="single_label_classification")
    with pytest.raises(ValueError, match="logits' shape"):
        model(pixel_values=pixels, labels=torch.full((4, 5), 0.2))
    with pytest.raises(UsageError, match="out of range"):  # class ids are still checked
        model(pixel_values=pixels, labels=torch.tensor([0, 1, 2, 3]))
