"""What the configurations of DETR-style detectors share (DETR, Deformable DETR, and any detector after them): the
fields, defaults and checks of :class:`DetectionTransformerConfig`, and the backbone configs of their presets."""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

from .configuration_utils import XcvConfig, check_activation
from .registry import MODEL_TYPES
from .utils.checks import (
    check_bool,
    check_choice,
    check_int,
    check_non_negative,
    check_positive_float,
    check_probability,
)


def backbone_types() -> list[str]:
    """The backbones a detector builds: transformers' ResNet (which hf_xcv also dilates for DC5) and every registered
    hf_xcv type with a backbone (its family declares it, with the stages a detector freezes)."""
    return ["resnet", *(t for t, entry in MODEL_TYPES.items() if entry.backbone is not None)]


class DetectionTransformerConfig(XcvConfig):
    r"""What the configurations of DETR-style detectors share, with DETR-R50's defaults as the original trains it.

    Field names are transformers' ``DetrConfig``'s; where transformers' default departs from the original
    recipe, the original's is the default here (``auxiliary_loss=True``, attention and FFN dropout 0.1). A family
    sets ``model_type``, its backbone default (``sub_configs_defaults``), its ``attribute_map`` (which core
    ``attention_type`` names), what its backbone must read (:meth:`check_backbone_features`) and its own fields.

    Args:
        backbone_config: the backbone's config (a transformers ``ResNetConfig`` or an hf_xcv ``SwinConfig``, or
            its dict); ``out_features`` names the stages the detector reads.
        num_channels: channels of the input images.
        num_queries: object queries (the most objects one image can hold).
        d_model: width of the transformer.
        encoder_layers: encoder layers (``decoder_layers`` the decoder's).
        encoder_ffn_dim: width of the encoder's feed-forward blocks (``decoder_ffn_dim`` the decoder's).
        encoder_attention_heads: heads of the encoder's attention (``decoder_attention_heads`` the decoder's).
        activation_function: activation of the feed-forward blocks.
        dropout: dropout after attention and feed-forward outputs (the original: 0.1).
        attention_dropout: dropout on the attention probabilities (the original: 0.1).
        activation_dropout: dropout after the feed-forward activation (the original: 0.1).
        encoder_layerdrop: kept for transformers' configs, as ``decoder_layerdrop``; no layer is dropped (0 only).
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
        class_cost: the Hungarian matcher's weight of the class (``bbox_cost`` and ``giou_cost`` of the boxes').
        bbox_loss_coefficient: weight of the L1 box loss (``giou_loss_coefficient`` of the GIoU loss).
        mask_loss_coefficient: kept for transformers' configs (segmentation), as ``dice_loss_coefficient``.
        eos_coefficient: weight of the no-object class in a softmax classification loss.
    """

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

    def __post_init__(self, **kwargs: Any) -> None:
        # transformers' configs carry these for its timm path; hf_xcv builds backbones from backbone_config only.
        for key in ("use_timm_backbone", "backbone", "use_pretrained_backbone", "backbone_kwargs"):
            value = kwargs.pop(key, None)
            if key == "use_timm_backbone" and value:
                raise ValueError(
                    "use_timm_backbone=True is not supported: hf_xcv builds the detector's backbone from "
                    "backbone_config (transformers' ResNet or hf_xcv's Swin), without timm"
                )
        self.dilation = bool(self.dilation)
        super().__post_init__(**kwargs)

    @property
    def backbone_model_type(self) -> str:
        return getattr(self.backbone_config, "model_type", None)

    @property
    def backbone_features(self) -> list[str]:
        """The backbone stages the detector reads (``backbone_config.out_features``)."""
        return list(getattr(self.backbone_config, "out_features", None) or [])

    def block_arguments(self, ffn_dim: int) -> tuple[int, int, str, float, float]:
        """The arguments of a :class:`hf_xcv.layers.detection.DetectionBlock` of this config's width, activation and
        dropouts, with a feed-forward block ``ffn_dim`` wide."""
        return self.d_model, ffn_dim, self.activation_function, self.dropout, self.activation_dropout

    def check_backbone_features(self) -> None:
        """ValueError unless the backbone reads the stages the detector takes (a family's own rule)."""

    def check(self) -> None:
        check_choice("backbone_config.model_type", self.backbone_model_type, backbone_types())
        self.check_backbone_features()
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
                raise ValueError(f"{name}={getattr(self, name)!r}: a DETR-style detector drops no layers; only 0")
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
            check_non_negative(name, getattr(self, name))
        if not any(getattr(self, name) for name in costs):
            raise ValueError("class_cost, bbox_cost and giou_cost are all 0: the matcher would have nothing to match")


def resnet_backbone(
    depths: list[int], out_features: list[str], width: int | None = None, layer_type: str = "bottleneck"
) -> dict[str, Any]:
    """A transformers ResNet's config dict: ``depths`` blocks per stage of ``layer_type``, the stages a detector reads
    (``out_features``) and, for the small demo and test backbones, a stem ``width`` doubling at every stage (the
    ImageNet ResNets' widths without it)."""
    config: dict[str, Any] = {"model_type": "resnet", "depths": depths, "layer_type": layer_type}
    if width is not None:
        config.update(embedding_size=width, hidden_sizes=[width * 2**i for i in range(len(depths))])
    config["out_features"] = out_features
    return config
