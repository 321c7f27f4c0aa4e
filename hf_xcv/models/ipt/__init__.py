from .configuration_ipt import IPTConfig
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
    "IPTModel",
    "IPTModelOutput",
    "IPTPreTrainedModel",
    "ImageRestorationOutput",
]
