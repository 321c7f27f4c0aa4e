"""What the configurations of DETR-style detectors share (DETR, Deformable DETR, and any detector after them): the
fields, defaults and checks of :class:`DetectionTransformerConfig`, and the backbone configs of their presets."""

from __future__ import annotations

import json
import os
from typing import Any

from huggingface_hub import hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
)
from transformers import AutoConfig, PretrainedConfig

from .configuration_utils import XcvConfig, check_activation
from .conversion.detection import swin_backbone_config
from .conversion.resnet import RESNET_DEPTHS, resnet_config
from .registry import MODEL_TYPES
from .utils.checks import (
    check_bool,
    check_choice,
    check_int,
    check_non_negative,
    check_positive_float,
    check_probability,
)
from .utils.errors import UsageError


def backbone_types() -> list[str]:
    """The backbones a detector builds: transformers' ResNet (which hf_xcv also dilates for DC5) and every registered
    hf_xcv type with a backbone (its family declares it, with the stages a detector freezes)."""
    return ["resnet", *(t for t, entry in MODEL_TYPES.items() if entry.backbone is not None)]


# What a checkpoint's config holds beyond its backbone's architecture and settings: its task, its provenance.
_NOT_BACKBONE_FIELDS = (
    "architectures", "id2label", "label2id", "num_labels", "problem_type", "_name_or_path", "transformers_version",
    "auto_map", "custom_pipelines", "dtype", "torch_dtype", "out_features", "out_indices", "_out_features",
    "_out_indices", "stage_names",
)  # fmt: skip


def _backbone_as_built(config: dict | PretrainedConfig | None) -> dict | PretrainedConfig | None:
    """A backbone config a detector builds: transformers' Swin (a ``SwinConfig`` or its dict) converted to hf_xcv's
    (the mapping transformers' Swin-backed detectors convert with), anything else as given."""
    source = config.to_dict() if isinstance(config, PretrainedConfig) else config
    if isinstance(source, dict) and source.get("model_type") == "swin":
        return swin_backbone_config(source)
    return config


def _hub_config(name: str) -> dict[str, Any]:
    """The config.json of the Hub repo ``name`` (from the cache when offline); a UsageError naming it otherwise."""
    resnets = ", ".join(sorted(RESNET_DEPTHS))
    try:
        file = hf_hub_download(name, "config.json")
    except HFValidationError as err:
        raise UsageError(
            f"backbone={name!r} is no local folder, no ResNet name ({resnets}) and no Hub repo id: pass the folder "
            "of a saved backbone checkpoint (a Swin or ResNet classifier, bare model or backbone) or its repo id"
        ) from err
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as err:
        raise UsageError(
            f"backbone={name!r} is no local folder, and its config.json is not in the Hub cache while the Hub cannot "
            f"be reached (offline, HF_HUB_OFFLINE, or no network): download it first (hf download {name}) or pass a "
            f"local folder ({type(err).__name__})"
        ) from err
    except RepositoryNotFoundError as err:
        raise UsageError(
            f"backbone={name!r} is no local folder, no ResNet name ({resnets}) and no Hub repo this token can read"
        ) from err
    except EntryNotFoundError as err:
        raise UsageError(f"backbone={name!r}: the Hub repo has no config.json (is it a model checkpoint?)") from err
    with open(file) as handle:
        return json.load(handle)


def _checkpoint_config(name: str) -> dict[str, Any]:
    """The config dict of the checkpoint ``backbone`` names: a local folder, a timm / torchvision ResNet name (the
    architecture only, as transformers' DETR configs give it), or a Hub repo."""
    if os.path.isdir(name):
        file = os.path.join(name, "config.json")
        if not os.path.isfile(file):
            raise UsageError(f"backbone={name!r} is a folder without a config.json: pass a saved checkpoint's folder")
        with open(file) as handle:
            return json.load(handle)
    if name in RESNET_DEPTHS:
        return resnet_config(name)
    return _hub_config(name)


def backbone_config_of(name: str, stages: int, backbone_kwargs: dict[str, Any] | None = None) -> PretrainedConfig:
    """The backbone config of the checkpoint ``name`` (see :func:`_checkpoint_config`) as a detector builds it: its
    architecture and settings (transformers' Swin converted to hf_xcv's), not its task; returning its last ``stages``
    stages unless ``backbone_kwargs`` (fields of the backbone's config, ``out_features`` / ``out_indices`` among
    them) say otherwise. A checkpoint of a type no detector builds is refused by name."""
    source = _backbone_as_built(_checkpoint_config(name))
    model_type = source.get("model_type")
    if model_type not in backbone_types():
        raise UsageError(
            f"backbone={name!r} holds a checkpoint of model_type {model_type!r}; a detector's backbone is one of "
            f"{backbone_types()} (transformers' swin checkpoints are converted to xcv_swin)"
        )
    fields = {key: value for key, value in source.items() if key not in _NOT_BACKBONE_FIELDS and key != "model_type"}
    chosen = dict(backbone_kwargs or {})
    if "out_features" not in chosen and "out_indices" not in chosen:
        depth = len(AutoConfig.for_model(model_type, **fields).stage_names) - 1  # the stem is no stage
        chosen["out_features"] = [f"stage{i}" for i in range(max(depth - stages, 0) + 1, depth + 1)]
    try:
        return AutoConfig.for_model(model_type, **{**fields, **chosen})
    except (TypeError, ValueError) as err:
        raise UsageError(f"backbone={name!r} with backbone_kwargs={backbone_kwargs!r}: {err}") from err


class DetectionTransformerConfig(XcvConfig):
    r"""What the configurations of DETR-style detectors share, with DETR-R50's defaults as the original trains it.

    Field names are transformers' ``DetrConfig``'s; where transformers' default departs from the original
    recipe, the original's is the default here (``auxiliary_loss=True``, attention and FFN dropout 0.1). A family
    sets ``model_type``, its backbone default (``sub_configs_defaults``), its ``attribute_map`` (which core
    ``attention_type`` names), what its backbone must read (:meth:`check_backbone_features`) and its own fields.

    Args:
        backbone_config: the backbone's config (a transformers ``ResNetConfig``, an hf_xcv ``SwinConfig``, or
            transformers' ``SwinConfig``, converted to hf_xcv's; or its dict); ``out_features`` names the stages the
            detector reads.
        backbone: instead of ``backbone_config``, the checkpoint whose config the detector builds (transformers'
            meaning): a local folder or Hub repo id of a ResNet or Swin classifier, bare model or backbone, or a
            timm / torchvision ResNet name (``"resnet50"``: the architecture only); the detector reads its last
            stage(s), unless ``backbone_kwargs`` (fields of that config) say otherwise. Not saved.
        use_pretrained_backbone: with ``backbone``, load that checkpoint's weights into the backbone when the detector
            is built (a Swin backbone's output norms, which a classifier lacks, start new). Not saved: a saved
            detector holds its weights.
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
        if kwargs.pop("use_timm_backbone", None):
            raise UsageError(
                "use_timm_backbone=True is not supported: hf_xcv builds the detector's backbone from "
                "backbone_config (transformers' ResNet or hf_xcv's Swin), without timm"
            )
        backbone_kwargs = kwargs.pop("backbone_kwargs", None)
        self._take_backbone(kwargs.pop("backbone", None), kwargs.pop("use_pretrained_backbone", None), backbone_kwargs)
        self.backbone_config = _backbone_as_built(self.backbone_config)
        self.dilation = bool(self.dilation)
        super().__post_init__(**kwargs)

    def _take_backbone(self, backbone: Any, use_pretrained: bool | None, backbone_kwargs: dict | None) -> None:
        """transformers' ``backbone`` (a checkpoint whose config the detector builds: a local folder, a Hub repo id,
        or a timm / torchvision ResNet name), ``backbone_kwargs`` (fields of that config) and
        ``use_pretrained_backbone`` (load its weights when the detector is built:
        :meth:`hf_xcv.modeling_detection.DetectionBackbone.load_pretrained`). They are instructions for building:
        what is saved is ``backbone_config``, and the weights with the detector's."""
        self._pretrained_backbone = None  # the checkpoint whose weights the backbone starts from (never saved)
        if backbone_kwargs is not None and not isinstance(backbone_kwargs, dict):
            raise UsageError(f"backbone_kwargs must be a dict of backbone config fields, got {backbone_kwargs!r}")
        if backbone is None:
            if use_pretrained:
                raise UsageError(
                    "use_pretrained_backbone=True needs backbone=<the folder or Hub repo id of the checkpoint whose "
                    "weights to load>; or build the detector and call model.model.backbone.load_pretrained(path)"
                )
            if backbone_kwargs:
                raise UsageError(
                    f"backbone_kwargs={backbone_kwargs!r} apply to the checkpoint named by backbone=; without one, "
                    "set those fields in backbone_config"
                )
            return
        if not isinstance(backbone, (str, os.PathLike)):
            raise UsageError(f"backbone must be a folder, a Hub repo id or a ResNet name, got {backbone!r}")
        backbone = os.fspath(backbone)
        if self.backbone_config is not None:
            raise UsageError(
                f"pass backbone={backbone!r} (a checkpoint whose config the detector builds) or backbone_config, "
                "not both"
            )
        if use_pretrained and backbone in RESNET_DEPTHS and not os.path.isdir(backbone):
            raise UsageError(
                f"use_pretrained_backbone=True with backbone={backbone!r}: those ImageNet weights are timm's, which "
                "hf_xcv does not use; pass the folder or Hub repo of a transformers ResNet (e.g. microsoft/resnet-50)"
            )
        self.backbone_config = backbone_config_of(backbone, self.default_backbone_stages(), backbone_kwargs)
        if use_pretrained:
            self._pretrained_backbone = backbone

    def default_backbone_stages(self) -> int:
        """How many of a backbone's last stages the detector reads when ``backbone=`` names a checkpoint (its
        default ``backbone_config``'s)."""
        return len(self.sub_configs_defaults["backbone_config"].init_kwargs["out_features"])

    def to_dict(self) -> dict[str, Any]:
        output = super().to_dict()
        output.pop("_pretrained_backbone", None)  # an instruction for building, not a setting
        return output

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
        if self.d_model % 4:  # half the width per image axis, each half interleaving sines and cosines
            raise UsageError(f"d_model={self.d_model} must be a multiple of 4 (the 2-D sine position embedding)")
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name):
                raise UsageError(f"{name}={getattr(self, name)} does not divide d_model={self.d_model}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            check_probability(name, getattr(self, name))
        for name in ("encoder_layerdrop", "decoder_layerdrop"):
            if getattr(self, name):
                raise UsageError(f"{name}={getattr(self, name)!r}: a DETR-style detector drops no layers; only 0")
        check_activation("activation_function", self.activation_function)
        check_positive_float("init_std", self.init_std)
        check_positive_float("init_xavier_std", self.init_xavier_std)
        check_bool("auxiliary_loss", self.auxiliary_loss)
        check_bool("freeze_batch_norm", self.freeze_batch_norm)
        check_choice("position_embedding_type", self.position_embedding_type, ["sine"])
        if self.dilation and self.backbone_model_type != "resnet":
            raise UsageError(f"dilation (DC5) needs a ResNet backbone, got {self.backbone_model_type!r}")
        if isinstance(self.frozen_backbone_stages, bool) or not isinstance(self.frozen_backbone_stages, int):
            raise UsageError(f"frozen_backbone_stages must be an integer, got {self.frozen_backbone_stages!r}")
        stages = len(getattr(self.backbone_config, "stage_names", []))
        if not -1 <= self.frozen_backbone_stages <= stages:
            raise UsageError(
                f"frozen_backbone_stages must be in [-1, {stages}] (the backbone's stem and stages; -1: all), "
                f"got {self.frozen_backbone_stages}"
            )
        costs = ("class_cost", "bbox_cost", "giou_cost")
        for name in (*costs, "bbox_loss_coefficient", "giou_loss_coefficient", "eos_coefficient"):
            check_non_negative(name, getattr(self, name))
        if not any(getattr(self, name) for name in costs):
            raise UsageError("class_cost, bbox_cost and giou_cost are all 0: the matcher would have nothing to match")


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
