"""DETR configuration (Carion et al. 2020, "End-to-End Object Detection with Transformers")."""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig
from transformers.configuration_utils import SubConfigSpec

from ...configuration_detection import DetectionTransformerConfig
from ...configuration_utils import check_attention, check_attention_serves
from ...utils.errors import UsageError

# What DETR's encoder asks of its self-attention core: padded pixels masked out of the keys, and the feature
# map's grid for the entries that attend in two dimensions (local_2d, axial, ...).
DETR_ENCODER_REQUESTS = {"padding_mask": True, "grid_available": True}


class DetrConfig(DetectionTransformerConfig):
    r"""Configuration of DETR. Defaults are DETR-R50 as the original trains it.

    The fields of every DETR-style detector are :class:`hf_xcv.configuration_detection.DetectionTransformerConfig`'s
    (transformers' ``DetrConfig`` names; the original's defaults where transformers departs from them:
    ``auxiliary_loss=True``, attention and FFN dropout 0.1).

    Args (beyond those):
        backbone_config: ``out_features`` must name one stage (DETR reads only the last map, C5). Default:
            ResNet-50 with ``out_features=["stage4"]``.
        encoder_attention_type: the registry core of the encoder's self-attention (any entry that serves padding
            masks; 2-D entries get the feature map's grid); also readable as ``attention_type``. The decoder always
            attends fully.
        encoder_attention_kwargs: its settings (also readable as ``attention_kwargs``).
    """

    model_type = "xcv_detr"
    sub_configs_defaults = {
        "backbone_config": SubConfigSpec(
            config_class=AutoConfig, model_type="resnet", init_kwargs={"out_features": ["stage4"]}
        )
    }
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
        "attention_type": "encoder_attention_type",
        "attention_kwargs": "encoder_attention_kwargs",
    }

    encoder_attention_type: str = "full"
    encoder_attention_kwargs: dict[str, Any] | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        if self.encoder_attention_kwargs is None:
            self.encoder_attention_kwargs = {}
        super().__post_init__(**kwargs)

    def check_backbone_features(self) -> None:
        features = self.backbone_features
        if len(features) != 1:
            raise UsageError(
                f"backbone_config.out_features must name the one stage DETR reads (e.g. ['stage4']), got {features}"
            )

    def check(self) -> None:
        super().check()
        check_attention(
            self.encoder_attention_type,
            self.encoder_attention_kwargs,
            0.0,
            self.encoder_attention_heads,
            self.d_model,
        )
        requests = {**DETR_ENCODER_REQUESTS, "attention_dropout": self.attention_dropout}
        check_attention_serves(self.encoder_attention_type, requests, "DETR's encoder")
