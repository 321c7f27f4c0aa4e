from ...registry import ModelEntry, register_model_type
from .configuration_ipt import IPTConfig
from .image_processing_ipt import IPTImageProcessor
from .modeling_ipt import (
    ImageRestorationOutput,
    IPTForImageRestoration,
    IPTModel,
    IPTModelOutput,
    IPTPreTrainedModel,
)
from .presets import PRESETS, RECIPE

ENTRY = register_model_type(
    ModelEntry(
        config=IPTConfig,
        base_model=IPTModel,
        heads={"AutoModelForImageToImage": IPTForImageRestoration},
        image_processor=IPTImageProcessor,
        presets=PRESETS,
        conversion_formats=("ipt",),
        recipe=RECIPE,
        # transformers 5 has no "image-to-image" task of its own: saved configs name hf_xcv's pipeline for it
        pipelines={"image-to-image": "hf_xcv.pipelines.ImageRestorationPipeline"},
    )
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
