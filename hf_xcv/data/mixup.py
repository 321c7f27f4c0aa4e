"""Mixup (Zhang et al. 2018) and CutMix (Yun et al. 2019) on image-classification batches, as DeiT and Swin train.

The recipe of both papers (timm's ``Mixup``, which this follows): Mixup α = 0.8, CutMix α = 1.0, one of the two per
batch (``switch_prob`` 0.5), every batch mixed (``prob`` 1.0), labels smoothed by 0.1, the loss a cross-entropy
against the resulting soft targets (:func:`hf_xcv.losses.soft_target_cross_entropy`, or any hf_xcv image classifier
with ``problem_type="single_label_classification"`` given the matrix as ``labels``).

Every image is mixed with its mirror in the batch, image ``B - 1 - i`` (``x.flip(0)``, as timm does), with a
weight λ drawn from Beta(α, α):

* Mixup: ``λ x + (1 - λ) x.flip(0)``;
* CutMix: ``x`` with a box pasted from ``x.flip(0)``: its centre uniform over the image, its sides
  ``sqrt(1 - λ)`` times the image's, clipped to the image; with ``correct_lam`` λ becomes the share of the image
  left unpasted, ``1 - box_area / image_area``;
* targets: ``λ y + (1 - λ) y.flip(0)`` of the smoothed one-hot labels ``y`` (``label_smoothing / num_labels``
  off the label, ``1 - label_smoothing + label_smoothing / num_labels`` on it), so every row sums to one.

Randomness: each call takes one number from a ``torch.Generator`` (the one given, else torch's global RNG) and makes
every draw of the batch from it, so the same seed gives the same batch. hf_xcv's training loop reseeds the global
RNG before every micro-batch (:func:`hf_xcv.training.runner.train_loop`): mix there, in the loss function
(``pixels, targets = mixer(batch["pixel_values"], batch["labels"])``), and a resumed run mixes exactly as the
uninterrupted one. As a DataLoader's ``collate_fn`` (transformers' ``Trainer``: ``data_collator``) use
:class:`MixupCutmixCollator`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..utils.errors import UsageError
from .image_classification import ImageClassificationCollator

MIX_MODES = ("batch", "elem", "pair")


@dataclass(frozen=True)
class MixDraw:
    """The random choices that mix one batch (:meth:`MixupCutmix.draw`); :meth:`MixupCutmix.apply` uses them.

    Attributes:
        lam: (B,) float64, the weight of each row's own image and label (1: the row is not mixed); for CutMix rows
            with ``correct_lam`` already the unpasted share of the image.
        cutmix: (B,) bool, the rows mixed by CutMix (the others with λ < 1 by Mixup).
        boxes: (B, 4) int64 ``(y0, y1, x0, x1)``, the region ``[y0, y1) x [x0, x1)`` a CutMix row takes from its
            partner (``y0 == y1 == x0 == x1 == 0`` for the other rows).
    """

    lam: torch.Tensor
    cutmix: torch.Tensor
    boxes: torch.Tensor

    @property
    def partner(self) -> torch.Tensor:
        """(B,) the row each row is mixed with: ``B - 1 - i``."""
        return torch.arange(len(self.lam) - 1, -1, -1)


class MixupCutmix:
    """Mixup / CutMix of a batch of images and class ids into mixed images and soft targets (see the module).

    ``mixer(pixel_values, labels)`` returns ``(mixed pixel_values, targets)``: new tensors, the inputs are left as
    they are. ``pixel_values`` is (B, C, H, W) (any (B, ..., H, W)), ``labels`` (B,) class ids in
    [0, num_labels); the targets are a float32 (B, num_labels) matrix whose rows sum to one.

    Args:
        num_labels: the number of classes (the targets' columns).
        mixup_alpha: α of Mixup's Beta(α, α); 0 turns Mixup off.
        cutmix_alpha: α of CutMix's Beta(α, α); 0 turns CutMix off (unless ``cutmix_minmax``).
        prob: the probability that a batch (``mode="batch"``) or a row is mixed at all.
        switch_prob: with both on, the probability of CutMix rather than Mixup.
        mode: ``"batch"``: one λ (and one box) for the whole batch; ``"elem"``: every row its own λ, method and
            box; ``"pair"``: rows i and B - 1 - i share theirs (the batch must be even).
        label_smoothing: ε of the smoothed one-hot labels, in [0, 1).
        correct_lam: make CutMix's λ the unpasted share of the image (the drawn box is clipped at the borders).
        cutmix_minmax: ``(lo, hi)``: CutMix boxes with sides drawn uniformly between ``lo`` and ``hi`` times the
            image's, placed wholly inside it, instead of from λ (λ is then always the unpasted share); turns CutMix
            on, as in timm.
        generator: the ``torch.Generator`` each batch's draws come from; default torch's global RNG. A generator is
            copied into every DataLoader worker process (and again each epoch, unless the workers persist), which
            would repeat its draws: in a worker process the worker's own RNG (which the DataLoader seeds per worker
            and epoch) is used instead, with a warning.

    Raises:
        UsageError: a setting out of range, both methods off, labels that are not class ids in [0, num_labels),
            images and labels of different batch sizes, or an odd batch in ``"pair"`` mode.
    """

    def __init__(
        self,
        num_labels: int,
        mixup_alpha: float = 0.8,
        cutmix_alpha: float = 1.0,
        prob: float = 1.0,
        switch_prob: float = 0.5,
        mode: str = "batch",
        label_smoothing: float = 0.1,
        correct_lam: bool = True,
        cutmix_minmax: Sequence[float] | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if isinstance(num_labels, bool) or not isinstance(num_labels, (int, np.integer)) or num_labels < 1:
            raise UsageError(f"num_labels must be a positive number of classes, got {num_labels!r}")
        for name, value in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise UsageError(f"{name} must be a finite number >= 0 (0 turns it off), got {value!r}")
        for name, value in (("prob", prob), ("switch_prob", switch_prob)):
            if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
                raise UsageError(f"{name} is a probability and must lie in [0, 1], got {value!r}")
        if not (isinstance(label_smoothing, (int, float)) and 0.0 <= label_smoothing < 1.0):
            raise UsageError(f"label_smoothing must lie in [0, 1), got {label_smoothing!r}")
        if mode not in MIX_MODES:
            raise UsageError(
                f"mode must be one of {MIX_MODES} (one λ per batch, per row, per mirrored pair), got {mode!r}"
            )
        if cutmix_minmax is not None:
            cutmix_minmax = tuple(float(v) for v in cutmix_minmax)
            if len(cutmix_minmax) != 2 or not 0.0 < cutmix_minmax[0] < cutmix_minmax[1] <= 1.0:
                raise UsageError(
                    f"cutmix_minmax must be (lo, hi) with 0 < lo < hi <= 1 (box sides as shares of the image's), "
                    f"got {cutmix_minmax!r}"
                )
            cutmix_alpha = 1.0  # timm: the box comes from minmax, the alpha only has to switch CutMix on
        if mixup_alpha == 0 and cutmix_alpha == 0:
            raise UsageError("mixup_alpha and cutmix_alpha are both 0 (and no cutmix_minmax): nothing would mix")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise UsageError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.num_labels = int(num_labels)
        self.mixup_alpha = float(mixup_alpha)
        self.cutmix_alpha = float(cutmix_alpha)
        self.prob = float(prob)
        self.switch_prob = float(switch_prob)
        self.mode = mode
        self.label_smoothing = float(label_smoothing)
        self.correct_lam = bool(correct_lam)
        self.cutmix_minmax = cutmix_minmax
        self.generator = generator
        self._warned_worker = False

    def __call__(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mixed pixel_values, (B, num_labels) float32 targets)``: :meth:`draw`, then :meth:`apply`."""
        self._check(pixel_values, labels)
        draw = self.draw(pixel_values.shape[0], pixel_values.shape[-2], pixel_values.shape[-1])
        return self.apply(pixel_values, labels, draw)

    # -- the draws -------------------------------------------------------------------------------------------------

    def draw(self, batch_size: int, height: int, width: int) -> MixDraw:
        """The random choices for a batch of ``batch_size`` images of ``height`` x ``width`` pixels."""
        if batch_size < 1:
            raise UsageError("cannot mix an empty batch")
        if self.mode == "pair" and batch_size % 2:
            raise UsageError(
                f"mode='pair' mixes rows i and B - 1 - i both ways and needs an even batch, got {batch_size} "
                "(use mode='elem', or drop the last incomplete batch: DataLoader(drop_last=True))"
            )
        rng = np.random.default_rng(self._seed())
        lam = np.ones(batch_size)
        cutmix = np.zeros(batch_size, dtype=bool)
        boxes = np.zeros((batch_size, 4), dtype=np.int64)
        if self.mode == "batch":
            if rng.random() < self.prob:
                use_cutmix = self._use_cutmix(rng, 1)[0]
                alpha = self.cutmix_alpha if use_cutmix else self.mixup_alpha
                lam[:] = rng.beta(alpha, alpha)
                if use_cutmix:
                    box, lam[:] = self._box(rng, lam[0], height, width)
                    boxes[:] = box
                    cutmix[:] = True
        else:
            rows = batch_size if self.mode == "elem" else batch_size // 2
            use_cutmix = self._use_cutmix(rng, rows)
            if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
                cut = rng.beta(self.cutmix_alpha, self.cutmix_alpha, size=rows)
                lam_mix = np.where(use_cutmix, cut, rng.beta(self.mixup_alpha, self.mixup_alpha, size=rows))
            else:
                alpha = self.cutmix_alpha if self.cutmix_alpha > 0 else self.mixup_alpha
                lam_mix = rng.beta(alpha, alpha, size=rows)
            mixed = rng.random(rows) < self.prob
            for i in range(rows):
                if not mixed[i]:
                    continue
                lam[i] = lam_mix[i]
                if use_cutmix[i]:
                    boxes[i], lam[i] = self._box(rng, lam[i], height, width)
                    cutmix[i] = True
            if self.mode == "pair":  # row B - 1 - i shares row i's draw
                lam[rows:] = lam[:rows][::-1]
                cutmix[rows:] = cutmix[:rows][::-1]
                boxes[rows:] = boxes[:rows][::-1]
        cutmix &= lam < 1.0  # a box of no area mixes nothing
        boxes[~cutmix] = 0
        return MixDraw(lam=torch.from_numpy(lam), cutmix=torch.from_numpy(cutmix), boxes=torch.from_numpy(boxes))

    def _seed(self) -> int:
        generator = self.generator
        if generator is not None and torch.utils.data.get_worker_info() is not None:
            if not self._warned_worker:
                warnings.warn(
                    "MixupCutmix: an explicit generator is copied into every DataLoader worker and would repeat its "
                    "draws across workers and epochs; this worker mixes with its own RNG (seeded by the DataLoader)",
                    stacklevel=3,
                )
                self._warned_worker = True
            generator = None
        device = generator.device if generator is not None else "cpu"
        return int(torch.randint(0, 2**63 - 1, (1,), generator=generator, device=device))

    def _use_cutmix(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
            return rng.random(rows) < self.switch_prob
        return np.full(rows, self.cutmix_alpha > 0)

    def _box(self, rng: np.random.Generator, lam: float, height: int, width: int) -> tuple[np.ndarray, float]:
        """A CutMix box ``(y0, y1, x0, x1)`` and the λ that goes with it."""
        if self.cutmix_minmax is not None:
            lo, hi = self.cutmix_minmax
            cut_h = int(rng.integers(int(height * lo), max(int(height * hi), int(height * lo) + 1)))
            cut_w = int(rng.integers(int(width * lo), max(int(width * hi), int(width * lo) + 1)))
            y0 = int(rng.integers(0, height - cut_h + 1))
            x0 = int(rng.integers(0, width - cut_w + 1))
            y1, x1 = y0 + cut_h, x0 + cut_w
        else:  # timm's rand_bbox: a centre anywhere, sides sqrt(1 - λ) of the image's, clipped to it
            ratio = math.sqrt(1.0 - lam)
            cut_h, cut_w = int(height * ratio), int(width * ratio)
            cy, cx = int(rng.integers(0, height)), int(rng.integers(0, width))
            y0, y1 = min(max(cy - cut_h // 2, 0), height), min(max(cy + cut_h // 2, 0), height)
            x0, x1 = min(max(cx - cut_w // 2, 0), width), min(max(cx + cut_w // 2, 0), width)
        if self.correct_lam or self.cutmix_minmax is not None:
            lam = 1.0 - (y1 - y0) * (x1 - x0) / float(height * width)
        return np.array([y0, y1, x0, x1], dtype=np.int64), lam

    # -- the mixing ------------------------------------------------------------------------------------------------

    def apply(
        self, pixel_values: torch.Tensor, labels: torch.Tensor, draw: MixDraw
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mix ``pixel_values`` and ``labels`` by ``draw`` (deterministic): ``(mixed pixel_values, targets)``."""
        self._check(pixel_values, labels)
        batch = pixel_values.shape[0]
        if len(draw.lam) != batch:
            raise UsageError(f"a draw for {len(draw.lam)} rows cannot mix a batch of {batch}")
        device = pixel_values.device
        mixup_rows = (draw.lam < 1.0) & ~draw.cutmix  # decided on the draw's (CPU) tensors: no device sync
        lam = draw.lam.to(device)
        targets = self.smoothed_one_hot(labels)
        lam_rows = lam.to(targets.dtype).unsqueeze(1)
        targets = targets * lam_rows + targets.flip(0) * (1.0 - lam_rows)
        if not bool((draw.lam < 1.0).any()):
            return pixel_values.clone(), targets
        flipped = pixel_values.flip(0)
        shape = (batch,) + (1,) * (pixel_values.dim() - 1)
        mixed = pixel_values.clone()
        if bool(mixup_rows.any()):
            weight = lam.to(pixel_values.dtype).view(shape)
            blend = pixel_values * weight + flipped * (1.0 - weight)
            mixed = torch.where(mixup_rows.to(device).view(shape), blend, mixed)
        if bool(draw.cutmix.any()):
            mixed = torch.where(self.box_mask(draw, pixel_values), flipped, mixed)
        return mixed, targets

    def smoothed_one_hot(self, labels: torch.Tensor) -> torch.Tensor:
        """(B, num_labels) float32: ``1 - ε + ε / num_labels`` on each label, ``ε / num_labels`` elsewhere."""
        off = self.label_smoothing / self.num_labels
        on = 1.0 - self.label_smoothing + off
        targets = torch.full((labels.shape[0], self.num_labels), off, dtype=torch.float32, device=labels.device)
        return targets.scatter_(1, labels.long().unsqueeze(1), on)

    @staticmethod
    def box_mask(draw: MixDraw, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, 1, ..., H, W) bool: the pixels each row takes from its partner (none outside CutMix rows)."""
        height, width = pixel_values.shape[-2:]
        boxes = draw.boxes.to(pixel_values.device)
        ys = torch.arange(height, device=pixel_values.device)
        xs = torch.arange(width, device=pixel_values.device)
        rows = (ys >= boxes[:, 0:1]) & (ys < boxes[:, 1:2])  # (B, H)
        cols = (xs >= boxes[:, 2:3]) & (xs < boxes[:, 3:4])  # (B, W)
        mask = rows.unsqueeze(2) & cols.unsqueeze(1)  # (B, H, W)
        return mask.view((mask.shape[0],) + (1,) * (pixel_values.dim() - 3) + (height, width))

    def _check(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> None:
        if not isinstance(pixel_values, torch.Tensor) or pixel_values.dim() < 3 or not pixel_values.is_floating_point():
            shape = tuple(pixel_values.shape) if isinstance(pixel_values, torch.Tensor) else type(pixel_values).__name__
            raise UsageError(
                f"pixel_values must be a floating-point (batch, channels, height, width) tensor, got {shape}"
            )
        if (
            not isinstance(labels, torch.Tensor)
            or labels.dim() != 1
            or labels.is_floating_point()
            or labels.dtype == torch.bool
        ):
            shape = f"{labels.dtype} of shape {tuple(labels.shape)}" if isinstance(labels, torch.Tensor) else labels
            raise UsageError(
                f"Mixup / CutMix needs labels as (batch,) integer class ids, got {shape} "
                "(a batch is mixed once: do not mix already mixed targets)"
            )
        if labels.shape[0] != pixel_values.shape[0]:
            raise UsageError(f"{labels.shape[0]} labels for {pixel_values.shape[0]} images")
        if labels.shape[0] == 0:
            raise UsageError("cannot mix an empty batch")
        wrong = (labels < 0) | (labels >= self.num_labels)
        if bool(wrong.any()):
            raise UsageError(
                f"labels {labels[wrong].unique().tolist()} are out of range: Mixup / CutMix needs every class label "
                f"in [0, num_labels={self.num_labels}) (an ignored label, -100, cannot be mixed)"
            )


class MixupCutmixCollator:
    """A ``collate_fn`` / ``data_collator`` that mixes each batch by :class:`MixupCutmix`.

    ``base_collator`` turns the samples into ``{"pixel_values": (B, C, H, W), "labels": (B,) int64, ...}``
    (default :class:`ImageClassificationCollator`: stacks the ``pixel_values`` of dict samples, as a
    ``datasets.Dataset`` yields them, and their ``labels`` or ``label``); the batch comes back with ``pixel_values``
    mixed and ``labels`` the float32 (B, num_labels) soft targets, other keys untouched. An hf_xcv image classifier
    with ``config.problem_type = "single_label_classification"`` takes these labels (cross-entropy against them,
    smoothed already: leave its own smoothing, and transformers' ``label_smoothing_factor``, at 0).

    For training batches only: transformers' ``Trainer`` collates evaluation batches with the same
    ``data_collator``, which would score mixed images against soft labels: with Trainer use
    :class:`hf_xcv.training.MixupCallback` (it mixes in training steps only) and a plain collator. In
    hf_xcv's own training loop prefer :class:`MixupCutmix` in the loss function (see the module): a collator runs
    before the loop reseeds the RNG for the batch, so a resumed run would mix differently.

    Args:
        base_collator: samples -> batch of stacked images and class ids; default :class:`ImageClassificationCollator`.
        num_labels: the number of classes.

    The keyword arguments ``mixup_alpha``, ``cutmix_alpha``, ``prob``, ``switch_prob``, ``mode``,
    ``label_smoothing``, ``correct_lam``, ``cutmix_minmax`` and ``generator`` are :class:`MixupCutmix`'s (defaults:
    DeiT's and Swin's recipe).
    """

    def __init__(
        self,
        base_collator: Callable[[Sequence[Any]], Mapping[str, Any]] | None = None,
        num_labels: int | None = None,
        *,
        mixup_alpha: float = 0.8,
        cutmix_alpha: float = 1.0,
        prob: float = 1.0,
        switch_prob: float = 0.5,
        mode: str = "batch",
        label_smoothing: float = 0.1,
        correct_lam: bool = True,
        cutmix_minmax: Sequence[float] | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if base_collator is not None and not callable(base_collator):
            raise UsageError(
                f"base_collator must be a callable (samples -> batch) or None, got {base_collator!r} "
                "(the number of classes is num_labels=...)"
            )
        if num_labels is None:
            raise UsageError("MixupCutmixCollator needs num_labels, the number of classes of the soft targets")
        self.base_collator = base_collator if base_collator is not None else ImageClassificationCollator()
        self.mixer = MixupCutmix(
            num_labels,
            mixup_alpha=mixup_alpha,
            cutmix_alpha=cutmix_alpha,
            prob=prob,
            switch_prob=switch_prob,
            mode=mode,
            label_smoothing=label_smoothing,
            correct_lam=correct_lam,
            cutmix_minmax=cutmix_minmax,
            generator=generator,
        )

    def __call__(self, features: Sequence[Any]) -> dict[str, Any]:
        batch = self.base_collator(features)
        missing = [key for key in ("pixel_values", "labels") if key not in batch]
        if missing:
            raise UsageError(
                f"the base collator's batch has no {missing} (keys: {sorted(batch)}): Mixup / CutMix mixes "
                "pixel_values and their labels"
            )
        out = dict(batch)
        out["pixel_values"], out["labels"] = self.mixer(batch["pixel_values"], batch["labels"])
        return out
