"""Deformable DETR (Zhu et al. 2020): multi-scale deformable attention, box refinement, two-stage proposals."""

from .configuration_deformable_detr import DeformableDetrConfig
from .image_processing_deformable_detr import XcvDeformableDetrImageProcessor
from .modeling_deformable_detr import (
    DeformableDetrForObjectDetection,
    DeformableDetrModel,
    DeformableDetrPreTrainedModel,
)

# hf_xcv's name for it; saved processors record XcvDeformableDetrImageProcessor.
DeformableDetrImageProcessor = XcvDeformableDetrImageProcessor

__all__ = [
    "DeformableDetrConfig",
    "DeformableDetrForObjectDetection",
    "DeformableDetrImageProcessor",
    "DeformableDetrModel",
    "DeformableDetrPreTrainedModel",
    "XcvDeformableDetrImageProcessor",
]
