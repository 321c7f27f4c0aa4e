"""DETR configuration (Carion et al. 2020, "End-to-End Object Detection with Transformers")."""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig, PretrainedConfig
from transformers.configuration_utils import SubConfigSpec

from ...configuration_utils import XcvConfig, check_activation, check_attention, check_attention_serves
from ...utils.checks import check_bool, check_choice, check_int, check_positive_float, check_probability

# What DETR's encoder asks of its self-attention core: padded pixels masked out of the keys, and the feature
# map's grid for the entries that attend in two dimensions (local_2d, axial, ...).
DETR_ENCODER_REQUESTS = {"padding_mask": True, "grid_available": True}
# Backbones whose stem and stages hf_xcv knows how to freeze (and, for ResNet, to dilate).
DETR_BACKBONE_TYPES = ("resnet", "xcv_swin")


def _non_negative(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")


class DetrConfig(XcvConfig):
    r"""Configuration of DETR. Defaults are DETR-R50 as the original trains it.

    Field names are transformers' ``DetrConfig``'s; where transformers' default departs from the original
    recipe, the original's is the default here (``auxiliary_loss=True``, attention and FFN dropout 0.1).

    Args:
        backbone_config: the backbone's config (a transformers ``ResNetConfig`` or an hf_xcv ``SwinConfig``, or
            its dict); ``out_features`` must name one stage (DETR reads only the last map, C5). Default:
            ResNet-50 with ``out_features=["stage4"]``.
        num_channels: channels of the input images.
        num_queries: object queries (the most objects one image can hold).
        d_model: width of the transformer.
        encoder_layers / decoder_layers, encoder_ffn_dim / decoder_ffn_dim, encoder_attention_heads /
            decoder_attention_heads: sizes of the encoder and decoder.
        activation_function: activation of the feed-forward blocks.
        dropout: dropout after attention and feed-forward outputs; attention_dropout: on the attention
            probabilities; activation_dropout: after the feed-forward activation (the original: 0.1 each).
        encoder_layerdrop / decoder_layerdrop: kept for transformers' configs; DETR drops no layers (0 only).
        init_std: std of the normal init of the class head and positions when ``init_type="normal"``.
        init_xavier_std: gain of the Xavier init of the transformer's matrices.
        auxiliary_loss: losses on every decoder layer's output (each with its own matching), as the original.
            The forward is the same either way; only the loss changes.
        position_embedding_type: ``"sine"`` (2-D sine positions from the padding mask).
        dilation: DC5 — the last ResNet stage keeps stride 16 with dilated 3x3 convolutions.
        frozen_backbone_stages: how many of the backbone's ``stage_names`` (``stem``, ``stage1``, ...) are
            frozen, from the first: the original freezes 2 (the stem and layer1); 0 trains everything (a backbone
            trained from scratch); -1 freezes the whole backbone (transformers' behaviour).
        freeze_batch_norm: the backbone's BatchNorm with fixed statistics and affine parameters (buffers), as the
            original fine-tunes an ImageNet backbone. ``False`` keeps ordinary BatchNorm, which a backbone trained
            from scratch needs (nothing normalises its activations otherwise); the weights' names are the same.
        class_cost / bbox_cost / giou_cost: the Hungarian matcher's weights.
        bbox_loss_coefficient / giou_loss_coefficient: weights of the L1 and GIoU losses (CE has weight 1).
        mask_loss_coefficient / dice_loss_coefficient: kept for transformers' configs (segmentation).
        eos_coefficient: weight of the no-object class in the classification loss.
        encoder_attention_type / encoder_attention_kwargs: the registry core of the encoder's self-attention
            (any entry that serves padding masks; 2-D entries get the feature map's grid); also readable as
            ``attention_type`` / ``attention_kwargs``. The decoder always attends fully.
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

    backbone_config: dict | PretrainedConfig | None = None
    num_channels: int = 3
    num_queries: int = 100
    encoder_layers: int = 6
    encoder_ffn_dim: int = 2048
    encoder_attention_heads: int = 8
    decoder_layers: int = 6
    decoder_ffn_dim: int = 2048
    decoder_attention_heads: int = 8
    encoder_layerdrop: float | int = 0.0
    decoder_layerdrop: float | int = 0.0
    is_encoder_decoder: bool = True
    activation_function: str = "relu"
    d_model: int = 256
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.1
    activation_dropout: float | int = 0.1
    init_std: float = 0.02
    init_xavier_std: float = 1.0
    auxiliary_loss: bool = True
    position_embedding_type: str = "sine"
    dilation: bool | None = False
    frozen_backbone_stages: int = 2
    freeze_batch_norm: bool = True
    class_cost: float | int = 1
    bbox_cost: float | int = 5
    giou_cost: float | int = 2
    mask_loss_coefficient: float | int = 1
    dice_loss_coefficient: float | int = 1
    bbox_loss_coefficient: float | int = 5
    giou_loss_coefficient: float | int = 2
    eos_coefficient: float = 0.1
    encoder_attention_type: str = "full"
    encoder_attention_kwargs: dict[str, Any] | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        # transformers' configs carry these for its timm path; hf_xcv builds backbones from backbone_config only.
        for key in ("use_timm_backbone", "backbone", "use_pretrained_backbone", "backbone_kwargs"):
            value = kwargs.pop(key, None)
            if key == "use_timm_backbone" and value:
                raise ValueError(
                    "use_timm_backbone=True is not supported: hf_xcv builds DETR's backbone from backbone_config "
                    "(transformers' ResNet or hf_xcv's Swin), without timm"
                )
        if self.encoder_attention_kwargs is None:
            self.encoder_attention_kwargs = {}
        self.dilation = bool(self.dilation)
        super().__post_init__(**kwargs)

    @property
    def backbone_model_type(self) -> str:
        return getattr(self.backbone_config, "model_type", None)

    def check(self) -> None:
        check_choice("backbone_config.model_type", self.backbone_model_type, DETR_BACKBONE_TYPES)
        features = list(getattr(self.backbone_config, "out_features", None) or [])
        if len(features) != 1:
            raise ValueError(
                f"backbone_config.out_features must name the one stage DETR reads (e.g. ['stage4']), got {features}"
            )
        for name in ("num_channels", "num_queries", "d_model", "encoder_layers", "decoder_layers"):
            check_int(name, getattr(self, name))
        for name in ("encoder_ffn_dim", "decoder_ffn_dim", "encoder_attention_heads", "decoder_attention_heads"):
            check_int(name, getattr(self, name))
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name):
                raise ValueError(f"{name}={getattr(self, name)} does not divide d_model={self.d_model}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            check_probability(name, getattr(self, name))
        for name in ("encoder_layerdrop", "decoder_layerdrop"):
            if getattr(self, name):
                raise ValueError(f"{name}={getattr(self, name)!r}: DETR drops no layers; only 0 is supported")
        check_activation("activation_function", self.activation_function)
        check_positive_float("init_std", self.init_std)
        check_positive_float("init_xavier_std", self.init_xavier_std)
        check_bool("auxiliary_loss", self.auxiliary_loss)
        check_bool("freeze_batch_norm", self.freeze_batch_norm)
        check_choice("position_embedding_type", self.position_embedding_type, ["sine"])
        if self.dilation and self.backbone_model_type != "resnet":
            raise ValueError(f"dilation (DC5) needs a ResNet backbone, got {self.backbone_model_type!r}")
        if isinstance(self.frozen_backbone_stages, bool) or not isinstance(self.frozen_backbone_stages, int):
            raise ValueError(f"frozen_backbone_stages must be an integer, got {self.frozen_backbone_stages!r}")
        stages = len(getattr(self.backbone_config, "stage_names", []))
        if not -1 <= self.frozen_backbone_stages <= stages:
            raise ValueError(
                f"frozen_backbone_stages must be in [-1, {stages}] (the backbone's stem and stages; -1: all), "
                f"got {self.frozen_backbone_stages}"
            )
        costs = ("class_cost", "bbox_cost", "giou_cost")
        for name in (*costs, "bbox_loss_coefficient", "giou_loss_coefficient", "eos_coefficient"):
            _non_negative(name, getattr(self, name))
        if not any(getattr(self, name) for name in costs):
            raise ValueError("class_cost, bbox_cost and giou_cost are all 0: the matcher would have nothing to match")
        check_attention(
            self.encoder_attention_type,
            self.encoder_attention_kwargs,
            0.0,
            self.encoder_attention_heads,
            self.d_model,
        )
        requests = {**DETR_ENCODER_REQUESTS, "attention_dropout": self.attention_dropout}
        check_attention_serves(self.encoder_attention_type, requests, "DETR's encoder")
