from .configuration_swin import SwinConfig
from .image_processing_swin import XcvSwinImageProcessor
from .modeling_swin import SwinBackbone, SwinForImageClassification, SwinModel, SwinPreTrainedModel

__all__ = [
    "SwinBackbone",
    "SwinConfig",
    "SwinForImageClassification",
    "SwinModel",
    "SwinPreTrainedModel",
    "XcvSwinImageProcessor",
]
