"""Offline ``evaluate.Metric`` classes."""

from .classification import Accuracy, TopKAccuracy

__all__ = ["Accuracy", "TopKAccuracy"]
