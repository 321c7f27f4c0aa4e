"""Offline ``evaluate.Metric`` classes."""

from .classification import Accuracy, TopKAccuracy
from .translation import Bleu, ChrF

__all__ = ["Accuracy", "Bleu", "ChrF", "TopKAccuracy"]
