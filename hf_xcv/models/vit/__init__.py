from .configuration_vit import ViTConfig
from .image_processing_vit import ViTImageProcessor, XcvViTImageProcessor
from .modeling_vit import ViTForImageClassification, ViTModel, ViTPreTrainedModel

__all__ = [
    "ViTConfig",
    "ViTForImageClassification",
    "ViTImageProcessor",
    "ViTModel",
    "ViTPreTrainedModel",
    "XcvViTImageProcessor",
]
