"""IPT's contrastive loss on the transformer body's per-patch features (Chen et al. 2021): the supervised
contrastive loss of Khosla et al. 2020 with the patches of one image as each other's positives."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def supervised_contrastive_loss(
    features: torch.Tensor,
    labels: torch.Tensor | None = None,
    temperature: float = 0.07,
    base_temperature: float = 0.07,
) -> torch.Tensor:
    """The supervised contrastive loss of ``features`` (B, N, D): N patch features of each of B images.

    Every one of the M = B·N patch features is an anchor. With z the features L2-normalised over D, A(i) all
    patches but i itself and P(i) the patches of A(i) with the anchor's label (by default: the other patches of the
    same image, the paper's "patches from the same image"):

        loss = -(τ / τ_base) · 1/|I| · Σ_{i ∈ I} 1/|P(i)| · Σ_{p ∈ P(i)} log softmax_i(p),
        softmax_i(p) = exp(z_i·z_p / τ) / Σ_{a ∈ A(i)} exp(z_i·z_a / τ)

    where I holds the anchors with at least one positive (all of them whenever N >= 2; with labels and no positive at
    all, the loss is 0). This is the loss of the
    official MindSpore IPT (``research/cv/IPT/src/loss.py``, ``SupConLoss``: temperature = base temperature =
    0.07, ``contrast_mode="all"``, positives by image; training adds ``0.1 *`` it to the L1 loss), which is Khosla et
    al.'s ``SupConLoss`` with the N patches as the N views. Two differences, both where the original is undefined
    or approximate: the log-sum-exp is exact (the original adds 1e-8 inside the log), and anchors without positives
    are left out of the mean (the original divides by zero).

    The (M, M) similarity matrix is held in memory: B = 64, N = 256 (IPT's 48x48 inputs) is 16384² floats, 1 GiB.

    Args:
        features: (B, N, D) floating-point features; half precision is computed in float32.
        labels: optional (B,) integer labels: patches of images with equal labels are positives too. Default: each
            image its own label.
        temperature: τ, dividing the cosine similarities.
        base_temperature: τ_base; the loss is scaled by τ / τ_base (1 with the defaults).

    Returns:
        The scalar loss (float32, or float64 for float64 features).

    Raises:
        ValueError: features not (B, N, D) floating point, fewer than 2 patches in all, one patch per image without
            labels, labels not (B,), or a temperature that is not positive. Nothing depends on the values: the
            loss traces for ``torch.export`` and ``torch.compile``.
    """
    if not isinstance(features, torch.Tensor) or features.dim() != 3 or not features.is_floating_point():
        shape = tuple(features.shape) if isinstance(features, torch.Tensor) else type(features).__name__
        raise ValueError(f"features must be a (batch, patches, dim) floating-point tensor, got {shape}")
    batch, patches, _ = features.shape
    if batch * patches < 2:
        raise ValueError(f"features {tuple(features.shape)}: the loss contrasts at least 2 patch features")
    for name, value in (("temperature", temperature), ("base_temperature", base_temperature)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"{name}={value!r} must be a positive number")
    if labels is None:
        if patches < 2:
            raise ValueError(
                f"features {tuple(features.shape)}: one patch per image has no positive (another patch of its "
                "image): give each image 2 or more patches, or labels"
            )
        labels = torch.arange(batch, device=features.device)
    elif not isinstance(labels, torch.Tensor) or tuple(labels.shape) != (batch,):
        shape = tuple(labels.shape) if isinstance(labels, torch.Tensor) else type(labels).__name__
        raise ValueError(f"labels must be a ({batch},) tensor, one label per image, got {shape}")
    if features.dtype in (torch.float16, torch.bfloat16):
        features = features.float()

    z = F.normalize(features, dim=-1).reshape(batch * patches, -1)  # (M, D), image-major
    patch_labels = labels.to(features.device).repeat_interleave(patches)  # (M,)
    self_mask = torch.eye(batch * patches, dtype=torch.bool, device=z.device)
    logits = (z @ z.T / temperature).masked_fill(self_mask, float("-inf"))  # (M, M), the anchor itself left out
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    positives = (patch_labels[:, None] == patch_labels[None, :]) & ~self_mask
    counts = positives.sum(dim=1)
    mean_log_prob = torch.where(positives, log_prob, 0.0).sum(dim=1) / counts.clamp(min=1)
    anchors = (counts > 0).to(mean_log_prob.dtype)  # a mask, not an index: no branch on values (export, compile)
    return -(temperature / base_temperature) * (mean_log_prob * anchors).sum() / anchors.sum().clamp(min=1)
