from ...registry import ModelEntry, register_model_type
from .configuration_vit import ViTConfig
from .image_processing_vit import ViTImageProcessor, XcvViTImageProcessor
from .modeling_vit import ViTForImageClassification, ViTModel, ViTPreTrainedModel
from .presets import PRESETS

ENTRY = register_model_type(
    ModelEntry(
        config=ViTConfig,
        base_model=ViTModel,
        heads={"AutoModelForImageClassification": ViTForImageClassification},
        image_processor=XcvViTImageProcessor,
        presets=PRESETS,
        converters={"vit": "hf_xcv.conversion.vit"},
        exporter="hf_xcv.conversion.vit",
        conversion_formats=("vit",),
    )
)

__all__ = [
    "ViTConfig",
    "ViTForImageClassification",
    "ViTImageProcessor",
    "ViTModel",
    "ViTPreTrainedModel",
    "XcvViTImageProcessor",
]
