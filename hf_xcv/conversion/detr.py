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

import re
from typing import Any

import torch

from .checkpoint_io import load_pth_state_dict
from .rules import Rule, rename_keys

SOURCE_MODEL_TYPE = "detr"
TARGET_MODEL_TYPE = "xcv_detr"
PROCESSOR_TYPE = "XcvDetrImageProcessor"

# ResNet depths of the timm / torchvision names a DETR config may give as its backbone.
RESNET_DEPTHS = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3], "resnet50": [3, 4, 6, 3]}
RESNET_DEPTHS.update({"resnet101": [3, 4, 23, 3], "resnet152": [3, 8, 36, 3]})
_BASIC = ("resnet18", "resnet34")

_ARCHITECTURE_FIELDS = (
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
_ARCHITECTURES = ("DetrForObjectDetection", "DetrModel")


def resnet_config(name: str, num_channels: int = 3) -> dict[str, Any]:
    """transformers ``ResNetConfig`` dict of the timm / torchvision ResNet ``name``, reading only C5."""
    if name not in RESNET_DEPTHS:
        raise ValueError(f"backbone {name!r} is not a ResNet hf_xcv can build; known: {sorted(RESNET_DEPTHS)}")
    basic = name in _BASIC
    return {
        "model_type": "resnet",
        "depths": RESNET_DEPTHS[name],
        "layer_type": "basic" if basic else "bottleneck",
        "hidden_sizes": [64, 128, 256, 512] if basic else [256, 512, 1024, 2048],
        "embedding_size": 64,
        "num_channels": num_channels,
        "downsample_in_first_stage": False,
        "out_features": ["stage4"],
    }


def _backbone_config(source: dict[str, Any]) -> dict[str, Any]:
    backbone = source.get("backbone_config")
    if isinstance(backbone, dict) and backbone.get("model_type") == "resnet":
        return backbone
    if isinstance(backbone, dict) and backbone.get("model_type") == "timm_backbone":
        return resnet_config(backbone.get("backbone") or "resnet50", source.get("num_channels", 3))
    if backbone is None and source.get("use_timm_backbone", True):
        return resnet_config(source.get("backbone") or "resnet50", source.get("num_channels", 3))
    raise ValueError(f"a DETR backbone of model_type {(backbone or {}).get('model_type')!r} cannot be converted")


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
    out: dict[str, Any] = {key: source[key] for key in fields + _PASSED_THROUGH if key in source}
    out["backbone_config"] = backbone_config
    out["model_type"] = target_model_type
    kept = [a for a in source.get("architectures") or [] if a in architectures]
    if kept:
        out["architectures"] = kept
    return out


def convert_config(source: dict[str, Any]) -> dict[str, Any]:
    """transformers DETR config dict -> hf_xcv DetrConfig dict (the original training recipe, see above)."""
    backbone = _backbone_config(source) if source.get("model_type") == SOURCE_MODEL_TYPE else {}
    return detection_config(
        source, SOURCE_MODEL_TYPE, TARGET_MODEL_TYPE, _ARCHITECTURE_FIELDS, _ARCHITECTURES, backbone
    )


def torchvision_resnet_key(name: str) -> str | None:
    """A torchvision / timm ResNet key (``conv1.weight``, ``layer2.0.bn3.running_var``, ``layer1.0.downsample.1.
    weight``) under transformers' ResNet names, or None when ``name`` is no such key."""
    norm = r"(weight|bias|running_mean|running_var)"
    if name == "conv1.weight":
        return "embedder.embedder.convolution.weight"
    if match := re.fullmatch(r"bn1\." + norm, name):
        return f"embedder.embedder.normalization.{match.group(1)}"
    if match := re.fullmatch(r"layer(\d+)\.(\d+)\.conv(\d+)\.weight", name):
        stage, block, conv = int(match.group(1)) - 1, match.group(2), int(match.group(3)) - 1
        return f"encoder.stages.{stage}.layers.{block}.layer.{conv}.convolution.weight"
    if match := re.fullmatch(r"layer(\d+)\.(\d+)\.bn(\d+)\." + norm, name):
        stage, block, conv = int(match.group(1)) - 1, match.group(2), int(match.group(3)) - 1
        return f"encoder.stages.{stage}.layers.{block}.layer.{conv}.normalization.{match.group(4)}"
    if match := re.fullmatch(r"layer(\d+)\.(\d+)\.downsample\.0\.weight", name):
        return f"encoder.stages.{int(match.group(1)) - 1}.layers.{match.group(2)}.shortcut.convolution.weight"
    if match := re.fullmatch(r"layer(\d+)\.(\d+)\.downsample\.1\." + norm, name):
        stage, block = int(match.group(1)) - 1, match.group(2)
        return f"encoder.stages.{stage}.layers.{block}.shortcut.normalization.{match.group(3)}"
    return None


def _rename_backbone(state_dict: dict[str, torch.Tensor], pattern: str, target: str) -> dict[str, torch.Tensor]:
    """Keys under the backbone prefix ``pattern`` (a regex with the task prefix as group 1) moved under
    ``target`` (with ``\\1``), their torchvision names mapped to transformers' ResNet ones; others unchanged."""
    out: dict[str, torch.Tensor] = {}
    compiled = re.compile(pattern + r"(.*)")
    for key, tensor in state_dict.items():
        match = compiled.fullmatch(key)
        if match is None or match.group(match.lastindex).endswith("num_batches_tracked"):
            out[key] = tensor
            continue
        inner = match.group(match.lastindex)
        mapped = torchvision_resnet_key(inner) or inner
        out[compiled.sub(target, key) + mapped] = tensor  # the whole key matched: target is the new prefix
    return out


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
    moved = _rename_backbone(state_dict, _P + r"backbone\.(?:conv_encoder\.)?model\.", r"\1backbone.model.")
    return rename_keys(moved, RULES, DROP)


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
# Applied after _split_in_proj (fused projections split, numbered norms named) and the backbone's renaming.
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


def _split_in_proj(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``in_proj_weight`` (3d, d) / ``in_proj_bias`` (3d,) split into ``q_proj`` / ``k_proj`` / ``v_proj``, the
    ``multihead_attn`` of the decoder renamed ``encoder_attn``, and the numbered norms named."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        key = key.replace(".multihead_attn.", ".encoder_attn.")
        if match := re.fullmatch(r"(.*)\.in_proj_(weight|bias)", key):
            if tensor.shape[0] % 3:
                raise ValueError(f"{key} has {tensor.shape[0]} rows, not three equal parts (query, key, value)")
            for name, part in zip(("q", "k", "v"), tensor.chunk(3, dim=0)):
                out[f"{match.group(1)}.{name}_proj.{match.group(2)}"] = part.clone()
        elif match := re.fullmatch(r"(transformer\.(encoder|decoder)\.layers\.\d+\.)norm(\d)\.(weight|bias)", key):
            norm = _NORMS.get((match.group(2), match.group(3)))
            if norm is None:
                raise ValueError(f"{key}: the original {match.group(2)} layers have no norm{match.group(3)}")
            out[f"{match.group(1)}{norm}.{match.group(4)}"] = tensor
        else:
            out[key] = tensor
    return out


def _shape(state_dict: dict[str, torch.Tensor], key: str) -> tuple[int, ...]:
    if key not in state_dict:
        raise ValueError(f"an original DETR checkpoint has {key!r}; this one does not (another model?)")
    return tuple(state_dict[key].shape)


def _count(state_dict: dict[str, torch.Tensor], pattern: str) -> int:
    found = {int(m.group(1)) for k in state_dict if (m := re.match(pattern, k))}
    return max(found) + 1 if found else 0


def _official_resnet(state_dict: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The transformers ResNetConfig dict of an original checkpoint's torchvision ResNet, from its shapes: blocks
    per stage, bottleneck or basic blocks, stem and stage widths."""
    body = "backbone.0.body."
    depths = [_count(state_dict, rf"backbone\.0\.body\.layer{s}\.(\d+)\.") for s in range(1, 5)]
    if not all(depths):
        raise ValueError(f"an original DETR checkpoint has {body}layer1..layer4; found blocks per stage {depths}")
    bottleneck = f"{body}layer1.0.conv3.weight" in state_dict
    last = "conv3" if bottleneck else "conv2"
    return {
        "model_type": "resnet",
        "depths": depths,
        "layer_type": "bottleneck" if bottleneck else "basic",
        "embedding_size": _shape(state_dict, f"{body}conv1.weight")[0],
        "hidden_sizes": [_shape(state_dict, f"{body}layer{s}.0.{last}.weight")[0] for s in range(1, 5)],
        "num_channels": _shape(state_dict, f"{body}conv1.weight")[1],
        "downsample_in_first_stage": False,
        "out_features": ["stage4"],
    }


def official_config(state_dict: dict[str, torch.Tensor], num_heads: int = 8, dilation: bool = False) -> dict[str, Any]:
    """The hf_xcv DetrConfig dict of an original checkpoint, read from its shapes (the head count cannot be:
    ``num_heads``, 8 in every released model; nor can DC5: ``dilation``)."""
    d_model, channels = _shape(state_dict, "input_proj.weight")[:2]
    num_queries = _shape(state_dict, "query_embed.weight")[0]
    backbone = _official_resnet(state_dict)
    if backbone["hidden_sizes"][-1] != channels:
        raise ValueError(f"input_proj reads {channels} channels; the backbone's C5 has {backbone['hidden_sizes'][-1]}")
    return {
        "model_type": TARGET_MODEL_TYPE,
        "backbone_config": backbone,
        "d_model": d_model,
        "num_queries": num_queries,
        "encoder_layers": _count(state_dict, r"transformer\.encoder\.layers\.(\d+)\."),
        "decoder_layers": _count(state_dict, r"transformer\.decoder\.layers\.(\d+)\."),
        "encoder_ffn_dim": _shape(state_dict, "transformer.encoder.layers.0.linear1.weight")[0],
        "decoder_ffn_dim": _shape(state_dict, "transformer.decoder.layers.0.linear1.weight")[0],
        "encoder_attention_heads": num_heads,
        "decoder_attention_heads": num_heads,
        "dilation": dilation,
        "num_labels": _shape(state_dict, "class_embed.weight")[0] - 1,  # the last logit is "no object"
        "architectures": ["DetrForObjectDetection"],
    }


def convert_official(
    state_dict: dict[str, torch.Tensor], num_heads: int = 8, dilation: bool = False
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """An original checkpoint's ``"model"`` state dict -> (hf_xcv config dict, state dict, dropped keys)."""
    config = official_config(state_dict, num_heads, dilation)
    split = _split_in_proj(state_dict)
    backbone = _rename_backbone(split, r"^()backbone\.0\.body\.", r"model.backbone.model.")
    renamed, dropped = rename_keys(backbone, OFFICIAL_RULES, DROP)
    return config, renamed, dropped


def load_official(path: str) -> dict[str, torch.Tensor]:
    """The state dict of an original ``.pth`` (under ``"model"``, or bare), read with ``weights_only=True``;
    a panoptic-segmentation checkpoint is refused by name."""
    checkpoint = load_pth_state_dict(path)
    if any(k.startswith("detr.") or k.startswith("mask_head.") for k in checkpoint):
        raise ValueError(f"{path} is a DETR panoptic-segmentation checkpoint; hf_xcv converts box detection only")
    return checkpoint
