from .configuration_vit import ViTConfig
from .image_processing_vit import ViTImageProcessor
from .modeling_vit import ViTForImageClassification, ViTModel, ViTPreTrainedModel

__all__ = ["ViTConfig", "ViTForImageClassification", "ViTImageProcessor", "ViTModel", "ViTPreTrainedModel"]
