"""Cross-entropy against soft targets: the loss of DeiT's and Swin's Mixup / CutMix training (Touvron et al. 2021,
Liu et al. 2021, both after timm's ``SoftTargetCrossEntropy``), which also takes class ids."""

from __future__ import annotations

import torch
import torch.nn.functional as F

_REDUCTIONS = ("mean", "sum", "none")


def soft_target_cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy of ``logits`` (B, C) against class ids (B,) or a (B, C) matrix of class probabilities.

    * Class ids (an integer (B,) tensor): ``F.cross_entropy(logits, targets, label_smoothing=label_smoothing)``
      exactly (ids of -100 are ignored, as there).
    * A floating (B, C) matrix ``t`` (Mixup / CutMix targets, see :class:`hf_xcv.data.MixupCutmix`): with
      ε = ``label_smoothing`` the matrix becomes ``(1 - ε) t + ε / C`` and the loss of row b is
      ``-Σ_c t[b, c] log_softmax(logits)[b, c]``, averaged over the rows. On one-hot rows this is plain
      cross-entropy, and with smoothing torch's label-smoothed cross-entropy. Rows are used as given: they are
      not checked to sum to one (that would cost a device synchronisation).

    A matrix from :class:`~hf_xcv.data.MixupCutmix` is smoothed already (its ``label_smoothing``, 0.1 by
    default): pass ``label_smoothing=0`` here, or the targets are smoothed twice.

    Args:
        logits: (B, C) floating-point scores; half precision is computed in float32.
        targets: (B,) integer class ids, or a (B, C) floating-point matrix of class probabilities.
        label_smoothing: ε in [0, 1].
        reduction: ``"mean"`` over the rows (over the counted rows for ids, as torch), ``"sum"``, or ``"none"``
            (the (B,) per-row losses).

    Returns:
        The loss: a scalar, or (B,) with ``reduction="none"`` (float32 for half-precision logits).

    Raises:
        ValueError: logits not (B, C) floating point, targets neither (B,) integers nor a floating matrix of the
            logits' shape, ε outside [0, 1], or an unknown reduction.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits must be a (batch, num_classes) floating-point tensor, got {shape}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1], got {label_smoothing}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    batch, classes = logits.shape
    if not isinstance(targets, torch.Tensor):
        raise ValueError(f"targets must be a tensor, got {type(targets).__name__}")
    if targets.dim() == 1 and not targets.is_floating_point() and targets.dtype != torch.bool:
        if targets.shape[0] != batch:
            raise ValueError(f"{targets.shape[0]} class ids for {batch} rows of logits")
        return F.cross_entropy(logits, targets, label_smoothing=label_smoothing, reduction=reduction)
    if targets.dim() != 2 or not targets.is_floating_point():
        raise ValueError(
            "targets must be (batch,) integer class ids or a (batch, num_classes) floating-point matrix of class "
            f"probabilities, got {targets.dtype} of shape {tuple(targets.shape)}"
        )
    if tuple(targets.shape) != (batch, classes):
        raise ValueError(f"a target matrix must have the logits' shape {(batch, classes)}, got {tuple(targets.shape)}")
    targets = targets.to(logits.dtype)
    if label_smoothing > 0:
        targets = targets * (1.0 - label_smoothing) + label_smoothing / classes
    losses = -(targets * F.log_softmax(logits, dim=-1)).sum(dim=-1)
    if reduction == "none":
        return losses
    return losses.sum() if reduction == "sum" else losses.mean()
