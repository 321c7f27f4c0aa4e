"""Offline ``evaluate.Metric`` classes."""

from .classification import Accuracy, TopKAccuracy
from .detection import MeanAveragePrecision, flatten_detection_metrics
from .restoration import PSNRSSIM, psnr, psnr_ssim, rgb_to_y
from .translation import Bleu, ChrF

__all__ = [
    "PSNRSSIM",
    "Accuracy",
    "Bleu",
    "ChrF",
    "MeanAveragePrecision",
    "TopKAccuracy",
    "flatten_detection_metrics",
    "psnr",
    "psnr_ssim",
    "rgb_to_y",
]
