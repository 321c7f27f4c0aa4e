"""What the conversions of DETR-style detectors share (DETR, Deformable DETR): the architecture fields of a
transformers detector's config that hf_xcv's keeps, and the config dict they make."""

from __future__ import annotations

import re
from typing import Any

import torch

from . import swin
from .rules import count_indices, required_shape

# The fields of a transformers DETR config that say the architecture (and DETR's matcher and loss weights); the
# rest are training settings, which take hf_xcv's defaults (the original recipe).
DETECTOR_FIELDS = (
    "num_channels",
    "num_queries",
    "encoder_layers",
    "encoder_ffn_dim",
    "encoder_attention_heads",
    "decoder_layers",
    "decoder_ffn_dim",
    "decoder_attention_heads",
    "activation_function",
    "d_model",
    "dropout",
    "init_std",
    "init_xavier_std",
    "position_embedding_type",
    "dilation",
    "class_cost",
    "bbox_cost",
    "giou_cost",
    "bbox_loss_coefficient",
    "giou_loss_coefficient",
    "eos_coefficient",
)
_PASSED_THROUGH = ("id2label", "label2id", "dtype", "torch_dtype")
# Where a transformers detector keeps its backbone: v5's in-memory ``backbone.model``, v4's ``conv_encoder``.
_BACKBONE_PREFIX = r"^((?:model\.)?backbone\.(?:conv_encoder\.)?model\.)"
# transformers' SwinBackbone wraps a whole SwinModel, whose final norm a detector never reads (hf_xcv's has none).
UNREAD_BACKBONE_WEIGHTS = (r"(model\.)?backbone\.model\.swin\.layernorm\.(weight|bias)",)
PASSED_THROUGH = ("id2label", "label2id", "dtype", "torch_dtype")


def detection_config(
    source: dict[str, Any],
    source_model_type: str,
    target_model_type: str,
    fields: tuple[str, ...],
    architectures: tuple[str, ...],
    backbone_config: dict[str, Any],
) -> dict[str, Any]:
    """A transformers detector's config dict -> hf_xcv's: the architecture ``fields`` (and labels, dtype) only,
    so that hf_xcv's training defaults (the original recipe) apply; the converted ``backbone_config``."""
    if source.get("model_type") != source_model_type:
        raise ValueError(f"expected a config of model_type {source_model_type!r}, got {source.get('model_type')!r}")
    out: dict[str, Any] = {key: source[key] for key in fields + PASSED_THROUGH if key in source}
    out["backbone_config"] = backbone_config
    out["model_type"] = target_model_type
    kept = [a for a in source.get("architectures") or [] if a in architectures]
    if kept:
        out["architectures"] = kept
    return out


def rename_swin_backbone(
    state_dict: dict[str, torch.Tensor], prefix: str = _BACKBONE_PREFIX
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """A detector's Swin backbone weights (transformers' ``SwinBackbone`` under ``prefix``, a regex with one group)
    under hf_xcv's Swin names, and the keys dropped (the buffers Swin rebuilds); other keys unchanged."""
    out: dict[str, torch.Tensor] = {}
    dropped: list[str] = []
    swin_names = r"(?:swin\.)?(?:embeddings|encoder\.layers)\..+|swin\.layernorm\..+|hidden_states_norms\..+"
    pattern = re.compile(prefix + f"({swin_names})")  # a ResNet's are embedder.* and encoder.stages.*
    for key, tensor in state_dict.items():
        match = pattern.fullmatch(key)
        if match is None:
            out[key] = tensor
            continue
        renamed, gone = swin.convert_state_dict({match.group(2): tensor})
        for name, value in renamed.items():
            name = swin.backbone_key(name)
            if name.startswith("swin.layernorm."):  # transformers' SwinBackbone's final norm, which it never reads
                gone.append(name)
            else:
                out[match.group(1) + name] = value
        dropped += [match.group(1) + name for name in gone]
    return out, dropped


def official_transformer_sizes(state_dict: dict[str, Any], num_heads: int, checkpoint: str) -> dict[str, Any]:
    """The encoder's and decoder's sizes of an original DETR-style checkpoint
    (``transformer.{encoder,decoder}.layers.N`` with ``linear1`` feed-forward blocks), read from its shapes; the head
    count cannot be read (``num_heads``)."""
    sizes = {}
    for stack in ("encoder", "decoder"):
        sizes[f"{stack}_layers"] = count_indices(state_dict, rf"transformer\.{stack}\.layers\.(\d+)\.")
        key = f"transformer.{stack}.layers.0.linear1.weight"
        sizes[f"{stack}_ffn_dim"] = required_shape(state_dict, key, checkpoint)[0]
        sizes[f"{stack}_attention_heads"] = num_heads
    return sizes


# ----------------------------------------------------------------------------------------------------------
# back to transformers' format
# ----------------------------------------------------------------------------------------------------------

# What transformers' detector configs hold beyond the architecture fields: the dropouts and the auxiliary outputs.
_EXPORTED_SETTINGS = ("attention_dropout", "activation_dropout", "auxiliary_loss")


def swin_backbone_config(backbone: dict[str, Any]) -> dict[str, Any]:
    """A transformers detector's ``swin`` backbone config -> hf_xcv's Swin (the stages it returns kept)."""
    config = swin.convert_config(backbone)
    config.pop("architectures", None)
    return config


def export_backbone(backbone: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """An hf_xcv detector's ``backbone_config`` dict -> the one transformers' detector builds (its ResNet as it is,
    hf_xcv's Swin as transformers' ``swin``); what transformers cannot build is added to ``problems``."""
    model_type = backbone.get("model_type")
    if model_type == "resnet":
        return dict(backbone)
    if model_type == "xcv_swin":
        problems += [f"the Swin backbone's {problem}" for problem in swin.export_problems(backbone)]
        return swin.stage_config(backbone)
    problems.append(f"a backbone of model_type {model_type!r} (transformers' detectors build ResNet or Swin)")
    return {}


def export_detection_config(
    config: dict[str, Any], target_model_type: str, fields: tuple[str, ...], architectures: dict[str, str]
) -> tuple[dict[str, Any], list[str]]:
    """An hf_xcv detector's config dict -> transformers' (the architecture ``fields``, the dropouts, the auxiliary
    outputs, labels and the backbone, built with transformers' own classes, never timm), and the settings it has no
    equivalent for."""
    problems: list[str] = []
    if config.get("dilation"):
        problems.append("dilation (DC5: transformers dilates only a timm backbone, which it would download)")
    out: dict[str, Any] = {key: config[key] for key in fields + _EXPORTED_SETTINGS + PASSED_THROUGH if key in config}
    out["backbone_config"] = export_backbone(config.get("backbone_config") or {}, problems)
    out.update(model_type=target_model_type, use_timm_backbone=False, use_pretrained_backbone=False, backbone=None)
    out.pop("dilation", None)
    architecture = next(iter(config.get("architectures") or []), None)
    out["architectures"] = [architectures.get(architecture, next(iter(architectures.values())))]
    return out, problems


# The settings of hf_xcv's detection processors that transformers' DETR-style processors take as they are; the rest
# (the training augmentations, the score activation a family fixes) are hf_xcv's own.
_PROCESSOR_SETTINGS = (
    "do_resize", "size", "resample", "do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std",
    "do_pad", "pad_size", "do_convert_annotations", "format",
)  # fmt: skip


def export_processor(settings: dict[str, Any]) -> dict[str, Any]:
    """hf_xcv's detection processor settings -> transformers' DETR-style processor's (the inference transform:
    resize, rescale, normalise, pad; the training augmentations stay behind)."""
    return {key: value for key, value in settings.items() if key in _PROCESSOR_SETTINGS}
