from ...registry import ModelEntry, register_model_type
from .configuration_ttsr import TTSRConfig
from .image_processing_ttsr import TTSRImageProcessor
from .modeling_ttsr import (
    ReferenceSuperResolutionOutput,
    TTSRForReferenceSuperResolution,
    TTSRModel,
    TTSRModelOutput,
    TTSRPreTrainedModel,
)
from .presets import PRESETS, RECIPE

# The residual blocks' two convolutions (the main network's bulk) take the part of the attention and MLP
# projections for LoRA / IA3 on a convolutional network.
ADAPTER_MODULES = {"q_proj": "conv1", "k_proj": "conv1", "fc1": "conv1", "v_proj": "conv2", "o_proj": "conv2",
                   "fc2": "conv2"}  # fmt: skip

ENTRY = register_model_type(
    ModelEntry(
        config=TTSRConfig,
        base_model=TTSRModel,
        heads={"AutoModelForImageToImage": TTSRForReferenceSuperResolution},
        image_processor=TTSRImageProcessor,
        adapter_module_names=ADAPTER_MODULES,
        presets=PRESETS,
        conversion_formats=("ttsr",),
        recipe=RECIPE,
        # transformers 5 has no "image-to-image" task of its own: saved configs name hf_xcv's pipeline for it
        pipelines={"image-to-image": "hf_xcv.pipelines.ImageRestorationPipeline"},
        card_fields=(
            "num_res_blocks", "n_feats", "res_scale", "texture_channels", "upscale", "relevance_chunk_size",
            "attention_type",
        ),  # fmt: skip
    )
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
