"""Deformable DETR (Zhu et al. 2020): multi-scale deformable attention, box refinement, two-stage proposals."""

from ...registry import ModelEntry, register_model_type
from .configuration_deformable_detr import DeformableDetrConfig
from .image_processing_deformable_detr import XcvDeformableDetrImageProcessor
from .modeling_deformable_detr import (
    DeformableDetrForObjectDetection,
    DeformableDetrModel,
    DeformableDetrPreTrainedModel,
)
from .presets import PRESETS, RECIPE

# hf_xcv's name for it; saved processors record XcvDeformableDetrImageProcessor.
DeformableDetrImageProcessor = XcvDeformableDetrImageProcessor

ENTRY = register_model_type(
    ModelEntry(
        config=DeformableDetrConfig,
        base_model=DeformableDetrModel,
        heads={"AutoModelForObjectDetection": DeformableDetrForObjectDetection},
        image_processor=XcvDeformableDetrImageProcessor,
        presets=PRESETS,
        converters={"deformable_detr": "hf_xcv.conversion.deformable_detr"},
        exporter="hf_xcv.conversion.deformable_detr",
        conversion_formats=("deformable-detr",),
        recipe=RECIPE,
    )
)

__all__ = [
    "DeformableDetrConfig",
    "DeformableDetrForObjectDetection",
    "DeformableDetrImageProcessor",
    "DeformableDetrModel",
    "DeformableDetrPreTrainedModel",
    "XcvDeformableDetrImageProcessor",
]
