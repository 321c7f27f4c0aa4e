"""DETR (Carion et al. 2020): CNN backbone, transformer encoder-decoder with 2-D sine positions, object queries."""

from .configuration_detr import DetrConfig
from .image_processing_detr import DetrImageProcessor, XcvDetrImageProcessor
from .modeling_detr import DetrForObjectDetection, DetrModel, DetrPreTrainedModel

__all__ = [
    "DetrConfig",
    "DetrForObjectDetection",
    "DetrImageProcessor",
    "DetrModel",
    "DetrPreTrainedModel",
    "XcvDetrImageProcessor",
]
