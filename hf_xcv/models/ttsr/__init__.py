from .configuration_ttsr import TTSRConfig
from .image_processing_ttsr import TTSRImageProcessor
from .modeling_ttsr import (
    ReferenceSuperResolutionOutput,
    TTSRForReferenceSuperResolution,
    TTSRModel,
    TTSRModelOutput,
    TTSRPreTrainedModel,
)

__all__ = [
    "ReferenceSuperResolutionOutput",
    "TTSRConfig",
    "TTSRForReferenceSuperResolution",
    "TTSRImageProcessor",
    "TTSRModel",
    "TTSRModelOutput",
    "TTSRPreTrainedModel",
]
