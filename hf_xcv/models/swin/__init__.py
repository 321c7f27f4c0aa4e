from ...registry import ModelEntry, register_model_type
from .configuration_swin import SwinConfig
from .image_processing_swin import XcvSwinImageProcessor
from .modeling_swin import SwinBackbone, SwinForImageClassification, SwinModel, SwinPreTrainedModel
from .presets import PRESETS

ENTRY = register_model_type(
    ModelEntry(
        config=SwinConfig,
        base_model=SwinModel,
        heads={"AutoModelForImageClassification": SwinForImageClassification},
        backbone=SwinBackbone,
        image_processor=XcvSwinImageProcessor,
        presets=PRESETS,
        converters={"swin": "hf_xcv.conversion.swin"},
        exporter="hf_xcv.conversion.swin",
        conversion_formats=("swin",),
    )
)

__all__ = [
    "SwinBackbone",
    "SwinConfig",
    "SwinForImageClassification",
    "SwinModel",
    "SwinPreTrainedModel",
    "XcvSwinImageProcessor",
]
