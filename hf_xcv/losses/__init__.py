"""Training losses shared by the hf_xcv models."""

from .label_smoothing import label_smoothed_loss

__all__ = ["label_smoothed_loss"]
