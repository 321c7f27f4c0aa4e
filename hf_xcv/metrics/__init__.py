"""Offline ``evaluate.Metric`` classes."""

from .classification import Accuracy, TopKAccuracy
from .detection import MeanAveragePrecision, flatten_detection_metrics
from .translation import Bleu, ChrF

__all__ = ["Accuracy", "Bleu", "ChrF", "MeanAveragePrecision", "TopKAccuracy", "flatten_detection_metrics"]
