"""IPT's supervised contrastive loss on per-patch features: a hand computation anchor by anchor, the official
MindSpore layout, invariances, gradients and bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from hf_xcv.losses import supervised_contrastive_loss


def features(batch: int, patches: int, dim: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(batch, patches, dim, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def by_hand(feats: torch.Tensor, labels: list[int], temperature: float, base_temperature: float) -> float:
    """The loss anchor by anchor: for each patch, minus the mean over its positives of the log of
    exp(cos / T) over the sum of exp(cos / T) over every other patch; anchors without positives left out."""
    batch, patches, _ = feats.shape
    items = [(b, n) for b in range(batch) for n in range(patches)]
    vectors = {item: feats[item].tolist() for item in items}

    def cosine(u, v):
        return sum(a * b for a, b in zip(u, v)) / math.sqrt(sum(a * a for a in u) * sum(b * b for b in v))

    losses = []
    for anchor in items:
        others = [item for item in items if item != anchor]
        denominator = sum(math.exp(cosine(vectors[anchor], vectors[o]) / temperature) for o in others)
        positives = [o for o in others if labels[o[0]] == labels[anchor[0]]]
        if not positives:
            continue
        logs = [math.log(math.exp(cosine(vectors[anchor], vectors[p]) / temperature) / denominator) for p in positives]
        losses.append(-(temperature / base_temperature) * sum(logs) / len(logs))
    return sum(losses) / len(losses)


@pytest.mark.parametrize(
    "batch, patches, labels, temperature, base",
    [
        (2, 3, None, 0.07, 0.07),  # the paper's: patches of one image are positives
        (3, 2, [0, 1, 0], 0.5, 0.07),  # images 0 and 2 share a label
        (3, 1, [4, 4, 7], 0.2, 0.2),  # one patch each: the last image has no positive and is left out
        (1, 4, None, 0.1, 0.07),  # one image: no negatives
    ],
)
def test_equals_a_hand_computation_over_anchors(batch, patches, labels, temperature, base):
    feats = features(batch, patches, 5)
    label_list = list(range(batch)) if labels is None else labels
    label_tensor = None if labels is None else torch.tensor(labels)
    loss = supervised_contrastive_loss(feats, label_tensor, temperature=temperature, base_temperature=base)
    assert loss.dim() == 0 and loss.dtype == torch.float64
    assert loss.item() == pytest.approx(by_hand(feats, label_list, temperature, base), rel=1e-10)


def test_matches_the_official_patch_major_layout():
    """MindSpore's SupConLoss stacks the patches patch-major (index n * B + b), tiles an identity over images as
    the positive mask, subtracts each row's maximum and adds 1e-8 inside the log."""
    feats = features(4, 6, 8, seed=1)
    batch, patches, _ = feats.shape
    z = torch.nn.functional.normalize(feats, dim=2).transpose(0, 1).reshape(batch * patches, -1)  # patch-major
    logits = z @ z.T / 0.07
    logits = logits - logits.max(dim=1, keepdim=True).values
    not_self = 1 - torch.eye(batch * patches, dtype=feats.dtype)
    positives = torch.eye(batch, dtype=feats.dtype).repeat(patches, patches) * not_self
    log_prob = logits - torch.log((logits.exp() * not_self).sum(1, keepdim=True) + 1e-8)
    official = -((positives * log_prob).sum(1) / positives.sum(1)).mean()
    torch.testing.assert_close(supervised_contrastive_loss(feats), official, rtol=1e-6, atol=0)


def test_invariant_to_feature_scale_and_patch_or_image_order():
    feats = features(3, 4, 6, seed=2)
    loss = supervised_contrastive_loss(feats)
    scales = torch.rand(3, 4, 1, generator=torch.Generator().manual_seed(0), dtype=feats.dtype) * 10 + 0.1
    torch.testing.assert_close(supervised_contrastive_loss(feats * scales), loss)
    torch.testing.assert_close(supervised_contrastive_loss(feats * 1e3), loss)
    torch.testing.assert_close(supervised_contrastive_loss(feats[[2, 0, 1]][:, [3, 1, 0, 2]]), loss)


def test_the_temperature_ratio_scales_the_loss_and_aligned_images_score_lower():
    feats = features(2, 3, 4, seed=3)
    torch.testing.assert_close(
        supervised_contrastive_loss(feats, base_temperature=0.14), 0.5 * supervised_contrastive_loss(feats)
    )
    aligned = torch.stack([torch.eye(4)[0].expand(3, 4), torch.eye(4)[1].expand(3, 4)]).double()  # (2, 3, 4)
    assert supervised_contrastive_loss(aligned) < supervised_contrastive_loss(feats)


def test_gradients_flow_and_match_finite_differences():
    feats = features(2, 3, 4, seed=4).requires_grad_()
    supervised_contrastive_loss(feats).backward()
    assert torch.isfinite(feats.grad).all() and feats.grad.abs().sum() > 0
    probe = feats.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: supervised_contrastive_loss(x, temperature=0.5), (probe,))


def test_half_precision_is_computed_in_float32():
    feats = features(2, 4, 8, seed=5, dtype=torch.float32)
    loss = supervised_contrastive_loss(feats.to(torch.bfloat16))
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, supervised_contrastive_loss(feats), rtol=2e-2, atol=0)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: supervised_contrastive_loss(torch.randn(4, 8)), r"\(batch, patches, dim\).*got \(4, 8\)"),
        (lambda: supervised_contrastive_loss(torch.ones(2, 3, 4, dtype=torch.long)), "floating-point"),
        (lambda: supervised_contrastive_loss([[[1.0]]]), "got list"),
        (lambda: supervised_contrastive_loss(torch.randn(1, 1, 4)), "at least 2 patch features"),
        (lambda: supervised_contrastive_loss(torch.randn(2, 3, 4), torch.tensor([0, 1, 2])), r"a \(2,\) tensor"),
        (lambda: supervised_contrastive_loss(torch.randn(2, 3, 4), temperature=0), "temperature=0 must be a positive"),
        (lambda: supervised_contrastive_loss(torch.randn(2, 3, 4), base_temperature=-1), "base_temperature=-1"),
        (lambda: supervised_contrastive_loss(torch.randn(3, 1, 4)), "one patch per image has no positive"),
    ],
)
def test_bad_inputs_are_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_no_positive_with_labels_gives_zero_and_the_loss_exports():
    """Nothing branches on values: with labels that leave every anchor without a positive the loss is 0, and the
    loss traces with torch.export (dynamic values, fixed shapes) to the eager result."""
    lonely = supervised_contrastive_loss(torch.randn(3, 1, 4), torch.tensor([0, 1, 2]))
    assert lonely.item() == 0.0

    class Loss(torch.nn.Module):
        def forward(self, features: torch.Tensor) -> torch.Tensor:
            return supervised_contrastive_loss(features)

    features = torch.randn(2, 5, 8)
    program = torch.export.export(Loss(), (features,))
    other = torch.randn(2, 5, 8)
    torch.testing.assert_close(program.module()(other), supervised_contrastive_loss(other))
