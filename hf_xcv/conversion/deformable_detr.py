"""Deformable DETR checkpoints -> hf_xcv Deformable DETR (``xcv_deformable_detr``): transformers-format
``deformable_detr`` folders and the original fundamentalvision/Deformable-DETR ``.pth`` files.

The backbone is handled as DETR's converter does (``hf_xcv.conversion.detr``): transformers' ResNet under
``backbone.model`` (v5, in memory) or ``backbone.conv_encoder.model`` (v4, on disk), a timm ResNet's or the
original's torchvision names mapped onto transformers' ResNet. Its ``out_features`` are the maps the source reads
(stage2-4, or stage4 alone for single-scale models). The rest keeps transformers' v5 names (``mlp.fc1``, the
decoder's ``self_attn.o_proj``); the original's fused ``in_proj_weight`` is split into thirds and its numbered
LayerNorms named (in the decoder ``norm2`` follows self-attention and ``norm1`` the cross-attention).

The prediction heads are stored once each: one ``class_embed.0`` / ``bbox_embed.0`` serves every decoder layer
without box refinement; with it there is one per decoder layer, plus one more scoring the encoder's proposals
in the two-stage model. Copies of a shared head and the decoder's aliases (``decoder.bbox_embed``,
``decoder.class_embed``) are dropped after checking that they are equal; class heads that transformers ties
(box refinement with ``tie_word_embeddings``) and saves once are replicated. Every key is renamed or explicitly
dropped; anything else is an error naming it.

Converted configs keep the source's architecture and take hf_xcv's defaults, the original training recipe, for
what only training reads (auxiliary losses, class cost and loss weight 2, attention and FFN dropout 0.1).
"""

from __future__ import annotations

import argparse
import re
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
from .rules import Rule, count_indices, name_numbered_norms, rename_keys, required_shape, split_in_proj

SOURCE_MODEL_TYPE = "deformable_detr"
TARGET_MODEL_TYPE = "xcv_deformable_detr"
PROCESSOR_TYPE = "XcvDeformableDetrImageProcessor"

# DETR's architecture fields without the ones where hf_xcv's defaults are Deformable DETR's recipe (dropout, the
# costs and loss weights: transformers' own defaults there are not the original's), plus the deformable ones.
_RECIPE_FIELDS = ("dropout", "class_cost", "bbox_cost", "giou_cost", "bbox_loss_coefficient", "giou_loss_coefficient")
ARCHITECTURE_FIELDS = tuple(f for f in DETECTOR_FIELDS if f not in (*_RECIPE_FIELDS, "eos_coefficient")) + (
    "num_feature_levels",
    "encoder_n_points",
    "decoder_n_points",
    "two_stage",
    "two_stage_num_proposals",
    "with_box_refine",
)
_ARCHITECTURES = ("DeformableDetrForObjectDetection", "DeformableDetrModel")
_HEADS = ("class_embed", "bbox_embed")


def num_heads_of(config: dict[str, Any]) -> int:
    """How many class / box heads a detector of ``config`` holds: one shared by every decoder layer, one per
    layer with box refinement, one more for the encoder's proposals in the two-stage model."""
    layers = config.get("decoder_layers", 6)
    if config.get("two_stage", False):
        return layers + 1
    return layers if config.get("with_box_refine", False) else 1


def _out_features(stages: list[int]) -> list[str]:
    if not stages or min(stages) < 1 or max(stages) > 4:
        raise ValueError(f"a Deformable DETR backbone reads ResNet stages 1..4, not out_indices {stages}")
    return [f"stage{index}" for index in stages]


def _backbone_config(source: dict[str, Any]) -> dict[str, Any]:
    """transformers ResNetConfig dict of the backbone the source's weights were computed with: a ResNet config
    as it is (its out_features included), a timm ResNet's out_indices as stages (timm's index 0 is the stem)."""
    levels = source.get("num_feature_levels", 4)
    backbone = source.get("backbone_config")
    if isinstance(backbone, dict) and backbone.get("model_type") == "resnet":
        return backbone
    if isinstance(backbone, dict) and backbone.get("model_type") == "swin":
        return swin_backbone_config(backbone)
    channels = source.get("num_channels", 3)
    if isinstance(backbone, dict) and backbone.get("model_type") == "timm_backbone":
        config = resnet_config(backbone.get("backbone") or "resnet50", channels)
        config["out_features"] = _out_features(backbone.get("out_indices") or ([2, 3, 4] if levels > 1 else [4]))
        return config
    if backbone is None and source.get("use_timm_backbone", True):
        config = resnet_config(source.get("backbone") or "resnet50", channels)
        config["out_features"] = _out_features([2, 3, 4] if levels > 1 else [4])
        return config
    if backbone is None:  # transformers then builds a ResNet-50 reading C5 alone (research D9); so do we
        return resnet_config("resnet50", channels)
    raise ValueError(f"a Deformable DETR backbone of model_type {backbone.get('model_type')!r} cannot be converted")


def convert_config(source: dict[str, Any]) -> dict[str, Any]:
    """transformers DeformableDetrConfig dict -> hf_xcv DeformableDetrConfig dict (architecture only)."""
    backbone = _backbone_config(source) if source.get("model_type") == SOURCE_MODEL_TYPE else {}
    return detection_config(source, SOURCE_MODEL_TYPE, TARGET_MODEL_TYPE, ARCHITECTURE_FIELDS, _ARCHITECTURES, backbone)


_Slot = tuple[str, int, str]  # (class_embed | bbox_embed, head index, rest of the name)


def merge_heads(
    state_dict: dict[str, torch.Tensor], alias: str, count: int, replicate_classes: bool = False
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The detector's heads as ``class_embed.{j}`` / ``bbox_embed.{j}`` for j < ``count`` (other keys unchanged),
    and the keys dropped: aliases under ``alias`` (a regex, e.g. the decoder's) checked equal to the heads they
    alias (or moved where the head itself was not saved), copies of a shared head (``count == 1``) checked equal
    to head 0. ``replicate_classes``: a class head stored once serves every layer (transformers' tied heads)."""
    pattern = re.compile(rf"(?P<alias>{alias})?(?P<family>class_embed|bbox_embed)\.(?P<index>\d+)\.(?P<rest>.+)")
    out: dict[str, torch.Tensor] = {}
    heads: dict[_Slot, tuple[str, torch.Tensor]] = {}
    aliases: dict[_Slot, tuple[str, torch.Tensor]] = {}
    for key, tensor in state_dict.items():
        match = pattern.fullmatch(key)
        if match is None:
            out[key] = tensor
        else:
            slot = (match["family"], int(match["index"]), match["rest"])
            (aliases if match["alias"] else heads)[slot] = (key, tensor)
    dropped: list[str] = []
    for slot, (key, tensor) in aliases.items():
        if slot in heads:
            _check_equal((key, tensor), heads[slot], "the detector refines its boxes with its prediction heads")
            dropped.append(key)
        else:  # transformers saves a tied pair under the alias's name only
            heads[slot] = (key, tensor)
    for family in _HEADS:
        kept, copies = _one_family(family, {s: v for s, v in heads.items() if s[0] == family}, count, replicate_classes)
        out.update(kept)
        dropped += copies
    return out, dropped


def _one_family(
    family: str, heads: dict[_Slot, tuple[str, torch.Tensor]], count: int, replicate_classes: bool
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """One family's heads under their new names, and the copies dropped (see merge_heads)."""
    if not heads:
        return {}, []  # a bare DeformableDetrModel
    rests = sorted({rest for _, _, rest in heads})
    if count == 1:  # one head shared by every decoder layer: the others must be copies of head 0
        _check_complete(family, heads, range(1), rests)
        for (_, index, rest), entry in heads.items():
            if index:
                _check_equal(entry, heads[(family, 0, rest)], "without box refinement one head serves every layer")
        copies = sorted(key for (_, index, _), (key, _) in heads.items() if index)
        return {f"{family}.0.{rest}": heads[(family, 0, rest)][1] for rest in rests}, copies
    if family == "class_embed" and replicate_classes and {index for _, index, _ in heads} == {0}:
        first = {rest: heads[(family, 0, rest)][1] for rest in rests}  # copies: safetensors stores no shared memory
        return {f"{family}.{j}.{rest}": first[rest].clone() for j in range(count) for rest in rests}, []
    extra = sorted(key for (_, index, _), (key, _) in heads.items() if index >= count)
    if extra:
        raise ValueError(f"the detector has {count} {family} heads; the checkpoint has more: {extra[:6]}")
    _check_complete(family, heads, range(count), rests)
    return {f"{family}.{index}.{rest}": tensor for (_, index, rest), (_, tensor) in heads.items()}, []


def _check_complete(family: str, heads: dict[_Slot, Any], indices: range, rests: list[str]) -> None:
    missing = [f"{family}.{j}.{rest}" for j in indices for rest in rests if (family, j, rest) not in heads]
    if missing:
        raise ValueError(f"the checkpoint lacks {len(missing)} weights of the {family} heads: {missing[:6]}")


def _check_equal(entry: tuple[str, torch.Tensor], other: tuple[str, torch.Tensor], why: str) -> None:
    """Two (key, tensor) entries that must hold the same values."""
    if entry[1].shape != other[1].shape or not torch.equal(entry[1], other[1]):
        raise ValueError(f"{entry[0]} differs from {other[0]} ({why})")


_shape = partial(required_shape, checkpoint="an original Deformable DETR checkpoint")

_P = r"^(model\.)?"  # the detector's prefix; a bare DeformableDetrModel has none
_E = _P + r"encoder\.layers\.(\d+)\."
_D = _P + r"decoder\.layers\.(\d+)\."
_WB = r"(weight|bias)"
_MSDA = r"(sampling_offsets|attention_weights|value_proj|output_proj)"
_NORM = r"(self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm)"
_TOP = r"(input_proj\.\d+\.[01]|query_position_embeddings|reference_points|enc_output|enc_output_norm|pos_trans"
_TOP += r"|pos_trans_norm)"
_HEAD_RULES: list[Rule] = [
    (r"^class_embed\.(\d+)\." + _WB, r"class_embed.\1.\2"),
    (r"^bbox_embed\.(\d+)\.layers\.(\d+)\." + _WB, r"bbox_embed.\1.layers.\2.\3"),
]
RULES: list[Rule] = [
    (_P + r"backbone\.model\.(.+)", r"\1backbone.model.\2"),
    (_P + _TOP + r"\." + _WB, r"\1\2.\3"),
    (_P + r"level_embed", r"\1level_embed"),
    (_E + r"self_attn\." + _MSDA + r"\." + _WB, r"\1encoder.layers.\2.self_attn.\3.\4"),
    (_D + r"encoder_attn\." + _MSDA + r"\." + _WB, r"\1decoder.layers.\2.encoder_attn.\3.\4"),
    (_D + r"self_attn\.(q_proj|k_proj|v_proj|o_proj)\." + _WB, r"\1decoder.layers.\2.self_attn.\3.\4"),
    (_D + r"self_attn\.out_proj\." + _WB, r"\1decoder.layers.\2.self_attn.o_proj.\3"),
    (_P + r"(encoder|decoder)\.layers\.(\d+)\.(?:mlp\.)?(fc1|fc2)\." + _WB, r"\1\2.layers.\3.mlp.\4.\5"),
    (_P + r"(encoder|decoder)\.layers\.(\d+)\." + _NORM + r"\." + _WB, r"\1\2.layers.\3.\4.\5"),
    *_HEAD_RULES,
]
DROP = [r".*\.num_batches_tracked"]


def convert_state_dict(
    state_dict: dict[str, torch.Tensor], config: dict[str, Any]
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """transformers Deformable DETR state dict (on-disk or in-memory names, ResNet or timm backbone) of the
    transformers ``config`` (dict) -> hf_xcv's, and the keys deliberately dropped."""
    swin_named, swin_dropped = rename_swin_backbone(state_dict)
    moved = rename_backbone(swin_named, _P + r"backbone\.(?:conv_encoder\.)?model\.", r"\1backbone.model.")
    # transformers ties its class heads where the config says so, except the two-stage model's
    tied = config.get("tie_word_embeddings", True) and not config.get("two_stage", False)
    merged, copies = merge_heads(moved, r"(?:model\.)?decoder\.", num_heads_of(config), tied)
    renamed, dropped = rename_keys(merged, RULES, DROP)
    return renamed, swin_dropped + copies + dropped


def convert(
    config: dict[str, Any], state_dict: dict[str, torch.Tensor], for_task_model: bool | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """Config and weights together (``for_task_model`` is decided by the checkpoint's own keys)."""
    new_state_dict, dropped = convert_state_dict(state_dict, config)
    return convert_config(config), new_state_dict, dropped


# ----------------------------------------------------------------------------------------------------------
# the original fundamentalvision/Deformable-DETR checkpoints
# ----------------------------------------------------------------------------------------------------------

_O = r"^transformer\.(encoder|decoder)\.layers\.(\d+)\."
_OO = r"model.\1.layers.\2."
_OE = r"^transformer\.encoder\.layers\.(\d+)\."
_OD = r"^transformer\.decoder\.layers\.(\d+)\."
# Applied after _name_norms, split_in_proj and the backbone's renaming.
OFFICIAL_RULES: list[Rule] = [
    (r"^model\.backbone\.model\.(.+)", r"model.backbone.model.\1"),
    (r"^input_proj\.(\d+)\.([01])\." + _WB, r"model.input_proj.\1.\2.\3"),
    (r"^query_embed\.weight", r"model.query_position_embeddings.weight"),
    (r"^transformer\.level_embed", r"model.level_embed"),
    (r"^transformer\.(reference_points|enc_output|enc_output_norm|pos_trans|pos_trans_norm)\." + _WB, r"model.\1.\2"),
    (_OE + r"self_attn\." + _MSDA + r"\." + _WB, r"model.encoder.layers.\1.self_attn.\2.\3"),
    (_OD + r"encoder_attn\." + _MSDA + r"\." + _WB, r"model.decoder.layers.\1.encoder_attn.\2.\3"),
    (_OD + r"self_attn\.(q|k|v)_proj\." + _WB, r"model.decoder.layers.\1.self_attn.\2_proj.\3"),
    (_OD + r"self_attn\.out_proj\." + _WB, r"model.decoder.layers.\1.self_attn.o_proj.\2"),
    (_O + _NORM + r"\." + _WB, _OO + r"\3.\4"),
    (_O + r"linear1\." + _WB, _OO + r"mlp.fc1.\3"),
    (_O + r"linear2\." + _WB, _OO + r"mlp.fc2.\3"),
    *_HEAD_RULES,
]
# The original's LayerNorm numbering. The decoder's differs from DETR's: norm2 follows the self-attention, norm1
# the cross-attention (its module order), norm3 the FFN.
_NORMS = {
    ("encoder", "1"): "self_attn_layer_norm",
    ("encoder", "2"): "final_layer_norm",
    ("decoder", "1"): "encoder_attn_layer_norm",
    ("decoder", "2"): "self_attn_layer_norm",
    ("decoder", "3"): "final_layer_norm",
}


def _name_norms(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The numbered norms named, the decoder's ``cross_attn`` renamed ``encoder_attn``."""
    renamed = {re.sub(r"^(transformer\.decoder\.layers\.\d+\.)cross_attn\.", r"\1encoder_attn.", k): v
               for k, v in state_dict.items()}  # fmt: skip
    return name_numbered_norms(renamed, _NORMS)


def _levels(state_dict: dict[str, torch.Tensor], hidden_sizes: list[int]) -> tuple[int, list[str]]:
    """Feature levels and the backbone stages they read: 1x1 projections of the last stages, then 3x3 stride-2
    convolutions of the previous level."""
    levels = count_indices(state_dict, r"input_proj\.(\d+)\.")
    kernels = [_shape(state_dict, f"input_proj.{level}.0.weight")[2:] for level in range(levels)]
    read = sum(1 for kernel in kernels if kernel == (1, 1))
    if not levels or read > len(hidden_sizes) or any(k != (1, 1) for k in kernels[:read]):
        raise ValueError(f"input_proj.*.0 has kernels {kernels}: expected 1x1 projections, then 3x3 convolutions")
    stages = list(range(len(hidden_sizes) - read + 1, len(hidden_sizes) + 1))
    for level, stage in enumerate(stages):
        channels = _shape(state_dict, f"input_proj.{level}.0.weight")[1]
        if channels != hidden_sizes[stage - 1]:
            has = hidden_sizes[stage - 1]
            raise ValueError(f"input_proj.{level} reads {channels} channels; the backbone's stage{stage} has {has}")
    return levels, _out_features(stages)


def _points(state_dict: dict[str, torch.Tensor], stack: str, attention: str, num_heads: int, levels: int) -> int:
    """Sampling points per head and level of a deformable attention: its offsets are (x, y) per head, level, point."""
    key = f"transformer.{stack}.layers.0.{attention}.sampling_offsets.weight"
    rows = _shape(state_dict, key)[0]
    if rows % (num_heads * levels * 2):
        raise ValueError(f"{key} has {rows} rows, not 2 x {num_heads} heads x {levels} levels x points (--num_heads?)")
    return rows // (num_heads * levels * 2)


def _distinct(state_dict: dict[str, torch.Tensor], family: str, rest: str) -> bool:
    tensors = [state_dict[k] for k in sorted(state_dict) if re.fullmatch(rf"{family}\.\d+\.{re.escape(rest)}", k)]
    return any(not torch.equal(tensors[0], t) for t in tensors[1:])


def official_config(
    state_dict: dict[str, torch.Tensor], num_heads: int = 8, num_queries: int = 300, dilation: bool = False
) -> dict[str, Any]:
    """The hf_xcv DeformableDetrConfig dict of an original checkpoint, read from its shapes. What weights cannot
    tell: the head count (``num_heads``, 8 in every released model), the two-stage model's number of queries
    (``num_queries``, 300) and DC5 (``dilation``)."""
    if "input_proj.weight" in state_dict:
        raise ValueError("this is an original DETR checkpoint, not a Deformable DETR one: convert it as 'detr'")
    backbone = official_resnet(state_dict, "an original Deformable DETR checkpoint")
    levels, backbone["out_features"] = _levels(state_dict, backbone["hidden_sizes"])
    d_model = _shape(state_dict, "transformer.level_embed")[1]
    two_stage = "transformer.enc_output.weight" in state_dict
    refine = two_stage or any(k.startswith("transformer.decoder.bbox_embed.") for k in state_dict)
    refine = refine or _distinct(state_dict, "bbox_embed", "layers.0.weight")
    queries = num_queries if two_stage else _shape(state_dict, "query_embed.weight")[0]
    config = {
        "model_type": TARGET_MODEL_TYPE,
        "backbone_config": backbone,
        "d_model": d_model,
        "num_queries": queries,
        **official_transformer_sizes(state_dict, num_heads, "an original Deformable DETR checkpoint"),
        "num_feature_levels": levels,
        "encoder_n_points": _points(state_dict, "encoder", "self_attn", num_heads, levels),
        "decoder_n_points": _points(state_dict, "decoder", "cross_attn", num_heads, levels),
        "with_box_refine": refine,
        "two_stage": two_stage,
        "dilation": dilation,
        "num_labels": _shape(state_dict, "class_embed.0.weight")[0],  # sigmoid scores: no "no object" logit
        "architectures": ["DeformableDetrForObjectDetection"],
    }
    if two_stage:
        config["two_stage_num_proposals"] = queries
    return config


def convert_official(
    state_dict: dict[str, torch.Tensor], num_heads: int = 8, num_queries: int = 300, dilation: bool = False
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """An original checkpoint's ``"model"`` state dict -> (hf_xcv config dict, state dict, dropped keys)."""
    config = official_config(state_dict, num_heads, num_queries, dilation)
    split = split_in_proj(_name_norms(state_dict))
    backbone = rename_backbone(split, r"^()backbone\.0\.body\.", r"model.backbone.model.")
    merged, copies = merge_heads(backbone, r"transformer\.decoder\.", num_heads_of(config))
    renamed, dropped = rename_keys(merged, OFFICIAL_RULES, DROP)
    return config, renamed, copies + dropped


def load_official(path: str) -> dict[str, torch.Tensor]:
    """The state dict of an original ``.pth`` (under ``"model"``, or bare), read with ``weights_only=True``. The
    released files also hold the training's ``args`` (an ``argparse.Namespace``), which is allowed to load."""
    with torch.serialization.safe_globals([argparse.Namespace]):
        return load_pth_state_dict(path)


# ----------------------------------------------------------------------------------------------------------
# back to transformers' format: hf_xcv Deformable DETR -> transformers Deformable DETR
# ----------------------------------------------------------------------------------------------------------

EXPORTED_PROCESSOR_TYPE = "DeformableDetrImageProcessor"
_EXPORT_ARCHITECTURES = {
    "DeformableDetrForObjectDetection": "DeformableDetrForObjectDetection",
    "DeformableDetrModel": "DeformableDetrModel",
}
_EXPORTED_RECIPE = (*_RECIPE_FIELDS, "class_loss_coefficient", "focal_alpha")


def export_config(config: dict[str, Any]) -> dict[str, Any]:
    """hf_xcv DeformableDetrConfig dict -> transformers DeformableDetrConfig dict (the base model, box refinement,
    two-stage; its ResNet or Swin backbone built by transformers); a ValueError naming every setting transformers'
    Deformable DETR has no equivalent for.

    ``tie_word_embeddings`` is what makes transformers' heads hf_xcv's: True for the base model (one class and one
    box head serve every decoder layer, as in the original), False with box refinement (transformers would otherwise
    tie the class heads of all layers into one, where the original trains one per layer; the decoder's copies of the
    heads are then written with the same weights)."""
    fields = ARCHITECTURE_FIELDS + _EXPORTED_RECIPE
    out, problems = export_detection_config(config, SOURCE_MODEL_TYPE, fields, _EXPORT_ARCHITECTURES)
    attention = config.get("decoder_attention_type", config.get("attention_type", "full"))
    if attention != "full" or config.get("decoder_attention_kwargs"):
        problems.append(f"decoder_attention_type={attention!r} (transformers' decoder self-attention is full)")
    if problems:
        raise ValueError("this Deformable DETR cannot be written in transformers' format: " + "; ".join(problems))
    out["tie_word_embeddings"] = not config.get("with_box_refine", False)
    return out


def export(
    config: dict[str, Any], state_dict: dict[str, torch.Tensor]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """hf_xcv Deformable DETR config and weights -> transformers' (the import of :func:`convert_state_dict`
    inverted)."""
    target = export_config(config)
    import_keys = partial(convert_state_dict, config=target)
    return target, invert_import(target, state_dict, import_keys, unused=UNREAD_BACKBONE_WEIGHTS, aliases=_head_alias)


def _head_alias(key: str) -> str | None:
    """The head a key of the decoder's copies of the heads (box refinement, two-stage) copies."""
    match = re.fullmatch(r"model\.decoder\.((?:class_embed|bbox_embed)\..+)", key)
    return match.group(1) if match else None
