"""DETR (Carion et al. 2020): CNN backbone, transformer encoder-decoder with 2-D sine positions, object queries."""

from ...registry import ModelEntry, register_model_type
from .configuration_detr import DetrConfig
from .image_processing_detr import DetrImageProcessor, XcvDetrImageProcessor
from .modeling_detr import DetrForObjectDetection, DetrModel, DetrPreTrainedModel
from .presets import PRESETS, RECIPE

ENTRY = register_model_type(
    ModelEntry(
        config=DetrConfig,
        base_model=DetrModel,
        heads={"AutoModelForObjectDetection": DetrForObjectDetection},
        image_processor=XcvDetrImageProcessor,
        presets=PRESETS,
        converters={"detr": "hf_xcv.conversion.detr"},
        exporter="hf_xcv.conversion.detr",
        conversion_formats=("detr",),
        recipe=RECIPE,
    )
)

__all__ = [
    "DetrConfig",
    "DetrForObjectDetection",
    "DetrImageProcessor",
    "DetrModel",
    "DetrPreTrainedModel",
    "XcvDetrImageProcessor",
]
