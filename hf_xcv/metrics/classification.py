"""Classification metrics as ``evaluate.Metric`` classes that need no Hub.

``evaluate.load("accuracy")`` downloads a script from the Hub; these are plain classes, so
``Accuracy().compute(predictions=..., references=...)`` works offline, in ``compute_metrics`` and in
``evaluate.combine``.
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np

_CITATION = ""


def _weighted_mean(hits: np.ndarray, sample_weight: np.ndarray | None, normalize: bool) -> float:
    weights = np.ones_like(hits, dtype=np.float64) if sample_weight is None else np.asarray(sample_weight, np.float64)
    if weights.shape != hits.shape:
        raise ValueError(f"sample_weight has shape {weights.shape}, expected {hits.shape}")
    total = float(np.sum(hits * weights))
    return total / float(np.sum(weights)) if normalize else total


class Accuracy(evaluate.Metric):
    """Fraction of predictions equal to the reference (``normalize=False``: their count).

    predictions: predicted class ids, (n,). references: true class ids, (n,).
    """

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description="Proportion of correct predictions among all predictions.",
            citation=_CITATION,
            inputs_description="predictions: predicted class ids; references: true class ids.",
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references, normalize: bool = True, sample_weight=None) -> dict[str, float]:
        predictions, references = np.asarray(predictions), np.asarray(references)
        if len(references) == 0:
            raise ValueError("accuracy of an empty set is undefined: got no predictions")
        return {"accuracy": _weighted_mean((predictions == references).astype(np.float64), sample_weight, normalize)}


class TopKAccuracy(evaluate.Metric):
    """Fraction of samples whose reference is among the ``k`` highest scores.

    predictions: scores or logits, (n, num_classes). references: true class ids, (n,). ``k`` defaults to
    ``min(5, num_classes)`` (top-5 where there are five classes); an explicit ``k`` above the number of classes
    is an error. Ties are broken towards the lower class id (a stable sort), so the result is deterministic.
    """

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description="Proportion of samples whose true class is among the k top-scored classes.",
            citation=_CITATION,
            inputs_description="predictions: per-class scores (n, num_classes); references: true class ids; k.",
            features=datasets.Features(
                {"predictions": datasets.Sequence(datasets.Value("float64")), "references": datasets.Value("int64")}
            ),
        )

    def _compute(self, predictions, references, k: int | None = None, sample_weight=None) -> dict[str, float]:
        scores, references = np.asarray(predictions, dtype=np.float64), np.asarray(references)
        if len(references) == 0:
            raise ValueError("top-k accuracy of an empty set is undefined: got no predictions")
        if scores.ndim != 2:
            raise ValueError(f"predictions must be per-class scores of shape (n, num_classes), got {scores.shape}")
        num_classes = scores.shape[1]
        k = min(5, num_classes) if k is None else k
        if not 1 <= k <= num_classes:
            raise ValueError(f"k must be in [1, {num_classes}] for {num_classes} classes, got {k}")
        if references.min() < 0 or references.max() >= num_classes:
            raise ValueError(
                f"references must be class ids in [0, {num_classes}), got {references.min()}..{references.max()}"
            )
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # (n, k)
        hits = (top == references[:, None]).any(axis=1).astype(np.float64)
        return {f"top{k}_accuracy": _weighted_mean(hits, sample_weight, normalize=True)}
