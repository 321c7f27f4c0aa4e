"""hf_xcv: the transformer architectures that shaped computer vision, native to the Hugging Face stack.

Importing the package registers every hf_xcv model type with transformers' Auto classes (and, when peft is
installed, its default adapter targets with peft). It touches no network.
"""

from .attention import available_attention_types, build_attention, register_attention
from .auto import MODEL_TYPES, register_auto_classes
from .integrations import register_peft_defaults
from .models.deformable_detr import (
    DeformableDetrConfig,
    DeformableDetrForObjectDetection,
    DeformableDetrImageProcessor,
    DeformableDetrModel,
    DeformableDetrPreTrainedModel,
    XcvDeformableDetrImageProcessor,
)
from .models.detr import (
    DetrConfig,
    DetrForObjectDetection,
    DetrImageProcessor,
    DetrModel,
    DetrPreTrainedModel,
    XcvDetrImageProcessor,
)
from .models.ipt import (
    ImageRestorationOutput,
    IPTConfig,
    IPTForImageRestoration,
    IPTImageProcessor,
    IPTModel,
    IPTPreTrainedModel,
)
from .models.swin import (
    SwinBackbone,
    SwinConfig,
    SwinForImageClassification,
    SwinModel,
    SwinPreTrainedModel,
    XcvSwinImageProcessor,
)
from .models.transformer import (
    TransformerConfig,
    TransformerForConditionalGeneration,
    TransformerModel,
    TransformerPreTrainedModel,
)
from .models.transformer.tokenization_transformer import TransformerTokenizerFast, train_tokenizer
from .models.ttsr import (
    ReferenceSuperResolutionOutput,
    TTSRConfig,
    TTSRForReferenceSuperResolution,
    TTSRImageProcessor,
    TTSRModel,
    TTSRPreTrainedModel,
)
from .models.vit import (
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessor,
    ViTModel,
    ViTPreTrainedModel,
    XcvViTImageProcessor,
)
from .models.xformer import (
    XFormerConfig,
    XFormerForCausalLM,
    XFormerForSequenceClassification,
    XFormerModel,
    XFormerPreTrainedModel,
)
from .pipelines import ImageRestorationPipeline
from .presets import PRESETS, preset_config
from .version import __version__

register_auto_classes()
register_peft_defaults({t: e.adapter_module_names for t, e in MODEL_TYPES.items()})  # only when peft is installed

__all__ = [
    "DeformableDetrConfig",
    "DeformableDetrForObjectDetection",
    "DeformableDetrImageProcessor",
    "DeformableDetrModel",
    "DeformableDetrPreTrainedModel",
    "DetrConfig",
    "DetrForObjectDetection",
    "DetrImageProcessor",
    "DetrModel",
    "DetrPreTrainedModel",
    "MODEL_TYPES",
    "PRESETS",
    "SwinBackbone",
    "SwinConfig",
    "SwinForImageClassification",
    "SwinModel",
    "SwinPreTrainedModel",
    "ReferenceSuperResolutionOutput",
    "IPTConfig",
    "ImageRestorationPipeline",
    "IPTForImageRestoration",
    "IPTImageProcessor",
    "IPTModel",
    "IPTPreTrainedModel",
    "ImageRestorationOutput",
    "TTSRConfig",
    "TTSRForReferenceSuperResolution",
    "TTSRImageProcessor",
    "TTSRModel",
    "TTSRPreTrainedModel",
    "TransformerConfig",
    "TransformerForConditionalGeneration",
    "TransformerModel",
    "TransformerPreTrainedModel",
    "TransformerTokenizerFast",
    "ViTConfig",
    "ViTForImageClassification",
    "ViTImageProcessor",
    "ViTModel",
    "ViTPreTrainedModel",
    "XFormerConfig",
    "XFormerForCausalLM",
    "XFormerForSequenceClassification",
    "XFormerModel",
    "XFormerPreTrainedModel",
    "__version__",
    "XcvDeformableDetrImageProcessor",
    "XcvDetrImageProcessor",
    "XcvSwinImageProcessor",
    "XcvViTImageProcessor",
    "available_attention_types",
    "build_attention",
    "preset_config",
    "register_attention",
    "train_tokenizer",
]

# Subpackages reached as attributes (``hf_xcv.metrics.detection``) without importing them up front: ``import hf_xcv``
# stays as fast as the model families make it.
_LAZY_SUBPACKAGES = ("conversion", "data", "losses", "metrics", "training", "visualization")


def __getattr__(name: str):
    if name in _LAZY_SUBPACKAGES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_SUBPACKAGES})
