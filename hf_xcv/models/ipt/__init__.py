from .configuration_ipt import IPTConfig
from .image_processing_ipt import IPTImageProcessor
from .modeling_ipt import (
    ImageRestorationOutput,
    IPTForImageRestoration,
    IPTModel,
    IPTModelOutput,
    IPTPreTrainedModel,
)

__all__ = [
    "IPTConfig",
    "IPTForImageRestoration",
    "IPTImageProcessor",
    "IPTModel",
    "IPTModelOutput",
    "IPTPreTrainedModel",
    "ImageRestorationOutput",
]
