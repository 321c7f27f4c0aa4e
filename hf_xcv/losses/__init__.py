"""Training losses shared by the hf_xcv models."""

from .box_ops import (
    box_area,
    box_cxcywh_to_xyxy,
    box_iou,
    box_xywh_to_xyxy,
    box_xyxy_to_cxcywh,
    box_xyxy_to_xywh,
    check_boxes,
    generalized_box_iou,
    paired_generalized_box_iou,
)
from .detection import SetCriterion, average_box_count, sigmoid_focal_loss
from .label_smoothing import label_smoothed_loss
from .matcher import HungarianMatcher

__all__ = [
    "HungarianMatcher",
    "SetCriterion",
    "average_box_count",
    "box_area",
    "box_cxcywh_to_xyxy",
    "box_iou",
    "box_xywh_to_xyxy",
    "box_xyxy_to_cxcywh",
    "box_xyxy_to_xywh",
    "check_boxes",
    "generalized_box_iou",
    "label_smoothed_loss",
    "paired_generalized_box_iou",
    "sigmoid_focal_loss",
]
