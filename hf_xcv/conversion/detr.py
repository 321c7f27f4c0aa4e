"""DETR checkpoints -> hf_xcv DETR (``xcv_detr``): transformers-format ``detr`` folders and the original
facebookresearch/detr ``.pth`` files.

transformers writes its DETR under the v4 names (``backbone.conv_encoder.model.*``, ``fc1``, ``out_proj``) and
holds the v5 names in memory (``backbone.model.*``, ``mlp.fc1``, ``o_proj``), which are hf_xcv's; both load,
with or without the ``model.`` prefix of the detector. Its backbone is transformers' ResNet or a timm ResNet
(the Hub's default ``facebook/detr-resnet-50``), whose torchvision names (``conv1``, ``layer1.0.bn2``,
``downsample.0``) are mapped onto transformers' ResNet, as are the original checkpoints' ``backbone.0.body.*``.
The original's fused ``in_proj_weight`` is split into thirds (query, key, value). Every key is renamed or
explicitly dropped (BatchNorm's ``num_batches_tracked``); anything else, such as a segmentation head, is an error.

Converted configs keep the architecture of the source and take the original training recipe where
transformers' defaults depart from it (auxiliary losses on, attention and FFN dropout 0.1): they matter only
for fine-tuning, and inference is the same.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from .checkpoint_io import load_pth_state_dict
from .detection import (
    DETECTOR_FIELDS,
    UNREAD_BACKBONE_WEIGHTS,
    detection_config,
    export_detection_config,
    official_transformer_sizes,
    rename_swin_backbone,
    swin_backbone_config,
)
from .detection import export_processor as export_processor  # the exporter's processor mapping
from .inverse import invert_import
from .resnet import official_resnet, rename_backbone, resnet_config
from .rules import Rule, name_numbered_norms, rename_keys, required_shape, split_in_proj

SOURCE_MODEL_TYPE = "detr"
TARGET_MODEL_TYPE = "xcv_detr"
PROCESSOR_TYPE = "XcvDetrImageProcessor"

ARCHITECTURE_FIELDS = DETECTOR_FIELDS  # what a transformers DETR config says of the architecture
_ARCHITECTURES = ("DetrForObjectDetection", "DetrModel")


def _backbone_config(source: dict[str, Any]) -> dict[str, Any]:
    backbone = source.get("backbone_config")
    if isinstance(backbone, dict) and backbone.get("model_type") == "resnet":
        return backbone
    if isinstance(backbone, dict) and backbone.get("model_type") == "swin":
        return swin_backbone_config(backbone)
    if isinstance(backbone, dict) and backbone.get("model_type") == "timm_backbone":
        return resnet_config(backbone.get("backbone") or "resnet50", source.get("num_channels", 3))
    if backbone is None and source.get("use_timm_backbone", True):
        return resnet_config(source.get("backbone") or "resnet50", source.get("num_channels", 3))
    raise ValueError(f"a DETR backbone of model_type {(backbone or {}).get('model_type')!r} cannot be converted")


def convert_config(source: dict[str, Any]) -> dict[str, Any]:
    """transformers DETR config dict -> hf_xcv DetrConfig dict (the original training recipe, see above)."""
    backbone = _backbone_config(source) if source.get("model_type") == SOURCE_MODEL_TYPE else {}
    return detection_config(source, SOURCE_MODEL_TYPE, TARGET_MODEL_TYPE, ARCHITECTURE_FIELDS, _ARCHITECTURES, backbone)


_shape = partial(required_shape, checkpoint="an original DETR checkpoint")

_P = r"^(model\.)?"  # the detector's prefix; a bare DetrModel has none
_L = _P + r"(encoder|decoder)\.layers\.(\d+)\."
_WB = r"(weight|bias)"
RULES: list[Rule] = [
    (_P + r"backbone\.model\.(.+)", r"\1backbone.model.\2"),
    (_P + r"(input_projection|query_position_embeddings)\.(.+)", r"\1\2.\3"),
    (_L + r"(self_attn|encoder_attn)\.(q_proj|k_proj|v_proj|o_proj)\." + _WB, r"\1\2.layers.\3.\4.\5.\6"),
    (_L + r"(self_attn|encoder_attn)\.out_proj\." + _WB, r"\1\2.layers.\3.\4.o_proj.\5"),
    (_L + r"(?:mlp\.)?(fc1|fc2)\." + _WB, r"\1\2.layers.\3.mlp.\4.\5"),
    (_L + r"(self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm)\." + _WB, r"\1\2.layers.\3.\4.\5"),
    (_P + r"decoder\.layernorm\." + _WB, r"\1decoder.layernorm.\2"),
    (r"^class_labels_classifier\." + _WB, r"class_labels_classifier.\1"),
    (r"^bbox_predictor\.layers\.(\d+)\." + _WB, r"bbox_predictor.layers.\1.\2"),
]
DROP = [r".*\.num_batches_tracked"]


def convert_state_dict(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """transformers DETR state dict (on-disk or in-memory names, ResNet or timm backbone) -> hf_xcv's, and the
    keys deliberately dropped."""
    swin_named, swin_dropped = rename_swin_backbone(state_dict)
    moved = rename_backbone(swin_named, _P + r"backbone\.(?:conv_encoder\.)?model\.", r"\1backbone.model.")
    renamed, dropped = rename_keys(moved, RULES, DROP)
    return renamed, swin_dropped + dropped


def convert(
    config: dict[str, Any], state_dict: dict[str, torch.Tensor], for_task_model: bool | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """Config and weights together (``for_task_model`` is decided by the checkpoint's own keys)."""
    new_state_dict, dropped = convert_state_dict(state_dict)
    return convert_config(config), new_state_dict, dropped


# ----------------------------------------------------------------------------------------------------------
# the original facebookresearch/detr checkpoints
# ----------------------------------------------------------------------------------------------------------

_O = r"^transformer\.(encoder|decoder)\.layers\.(\d+)\."
_OO = r"model.\1.layers.\2."
# Applied after split_in_proj (fused projections split), name_numbered_norms and the backbone's renaming.
OFFICIAL_RULES: list[Rule] = [
    (_P + r"backbone\.model\.(.+)", r"model.backbone.model.\2"),
    (r"^input_proj\." + _WB, r"model.input_projection.\1"),
    (r"^query_embed\.weight", r"model.query_position_embeddings.weight"),
    (_O + r"(self_attn|encoder_attn)\.(q|k|v)_proj\." + _WB, _OO + r"\3.\4_proj.\5"),
    (_O + r"(self_attn|encoder_attn)\.out_proj\." + _WB, _OO + r"\3.o_proj.\4"),
    (_O + r"(self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm)\." + _WB, _OO + r"\3.\4"),
    (_O + r"linear1\." + _WB, _OO + r"mlp.fc1.\3"),
    (_O + r"linear2\." + _WB, _OO + r"mlp.fc2.\3"),
    (r"^transformer\.decoder\.norm\." + _WB, r"model.decoder.layernorm.\1"),
    (r"^class_embed\." + _WB, r"class_labels_classifier.\1"),
    (r"^bbox_embed\.layers\.(\d+)\." + _WB, r"bbox_predictor.layers.\1.\2"),
]
# The original's LayerNorm numbering: the encoder has norm1 (after attention) and norm2 (after the FFN); the
# decoder norm1 (self-attention), norm2 (cross-attention), norm3 (FFN).
_NORMS = {
    ("encoder", "1"): "self_attn_layer_norm",
    ("encoder", "2"): "final_layer_norm",
    ("decoder", "1"): "self_attn_layer_norm",
    ("decoder", "2"): "encoder_attn_layer_norm",
    ("decoder", "3"): "final_layer_norm",
}


def official_config(state_dict: dict[str, torch.Tensor], num_heads: int = 8, dilation: bool = False) -> dict[str, Any]:
    """The hf_xcv DetrConfig dict of an original checkpoint, read from its shapes (the head count cannot be:
    ``num_heads``, 8 in every released model; nor can DC5: ``dilation``)."""
    d_model, channels = _shape(state_dict, "input_proj.weight")[:2]
    num_queries = _shape(state_dict, "query_embed.weight")[0]
    backbone = official_resnet(state_dict)
    if backbone["hidden_sizes"][-1] != channels:
        raise ValueError(f"input_proj reads {channels} channels; the backbone's C5 has {backbone['hidden_sizes'][-1]}")
    return {
        "model_type": TARGET_MODEL_TYPE,
        "backbone_config": backbone,
        "d_model": d_model,
        "num_queries": num_queries,
        **official_transformer_sizes(state_dict, num_heads, "an original DETR checkpoint"),
        "dilation": dilation,
        "num_labels": _shape(state_dict, "class_embed.weight")[0] - 1,  # the last logit is "no object"
        "architectures": ["DetrForObjectDetection"],
    }


def convert_official(
    state_dict: dict[str, torch.Tensor], num_heads: int = 8, dilation: bool = False
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """An original checkpoint's ``"model"`` state dict -> (hf_xcv config dict, state dict, dropped keys)."""
    config = official_config(state_dict, num_heads, dilation)
    split = name_numbered_norms(split_in_proj(state_dict), _NORMS)
    backbone = rename_backbone(split, r"^()backbone\.0\.body\.", r"model.backbone.model.")
    renamed, dropped = rename_keys(backbone, OFFICIAL_RULES, DROP)
    return config, renamed, dropped


def load_official(path: str) -> dict[str, torch.Tensor]:
    """The state dict of an original ``.pth`` (under ``"model"``, or bare), read with ``weights_only=True``;
    a panoptic-segmentation checkpoint is refused by name."""
    checkpoint = load_pth_state_dict(path)
    if any(k.startswith("detr.") or k.startswith("mask_head.") for k in checkpoint):
        raise ValueError(f"{path} is a DETR panoptic-segmentation checkpoint; hf_xcv converts box detection only")
    return checkpoint


# ----------------------------------------------------------------------------------------------------------
# back to transformers' format: hf_xcv DETR -> transformers DETR
# ----------------------------------------------------------------------------------------------------------

EXPORTED_PROCESSOR_TYPE = "DetrImageProcessor"
_EXPORT_ARCHITECTURES = {"DetrForObjectDetection": "DetrForObjectDetection", "DetrModel": "DetrModel"}


def export_config(config: dict[str, Any]) -> dict[str, Any]:
    """hf_xcv DetrConfig dict -> transformers DetrConfig dict (its ResNet or Swin backbone built by transformers); a
    ValueError naming every setting transformers' DETR has no equivalent for.

    ``auxiliary_loss`` is written as False: with it on, transformers' DETR decoder feeds every layer the normalised
    output of the one before and normalises the last output twice, which the original (and hf_xcv) do not, so its
    detections would change; without it they are the original's."""
    out, problems = export_detection_config(config, SOURCE_MODEL_TYPE, ARCHITECTURE_FIELDS, _EXPORT_ARCHITECTURES)
    out["auxiliary_loss"] = False
    attention = config.get("encoder_attention_type", config.get("attention_type", "full"))
    if attention != "full" or config.get("encoder_attention_kwargs"):
        problems.append(f"encoder_attention_type={attention!r} (transformers' DETR encoder attends fully)")
    if problems:
        raise ValueError("this DETR cannot be written in transformers' format: " + "; ".join(problems))
    return out


def export(
    config: dict[str, Any], state_dict: dict[str, torch.Tensor]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """hf_xcv DETR config and weights -> transformers' (the import of :func:`convert_state_dict` inverted)."""
    target = export_config(config)
    return target, invert_import(target, state_dict, convert_state_dict, unused=UNREAD_BACKBONE_WEIGHTS)
