"""ResNet backbones of other libraries' detector checkpoints -> transformers' ResNet (the backbone hf_xcv's
detectors build): the config of a timm / torchvision ResNet named in a transformers config, torchvision's key names
(``conv1``, ``layer2.0.bn3``, ``downsample.0``: timm ResNets and the original DETR / Deformable DETR ``.pth`` files),
and the ResNet an original checkpoint holds, read from its shapes."""

from __future__ import annotations

import re
from typing import Any

import torch

from .rules import count_indices, required_shape

# ResNet depths of the timm / torchvision names a DETR config may give as its backbone.
RESNET_DEPTHS = {"resnet18": [2, 2, 2, 2], "resnet34": [3, 4, 6, 3], "resnet50": [3, 4, 6, 3]}
RESNET_DEPTHS.update({"resnet101": [3, 4, 23, 3], "resnet152": [3, 8, 36, 3]})
_BASIC = ("resnet18", "resnet34")


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


def rename_backbone(state_dict: dict[str, torch.Tensor], pattern: str, target: str) -> dict[str, torch.Tensor]:
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


def official_resnet(
    state_dict: dict[str, torch.Tensor], checkpoint: str = "an original DETR checkpoint"
) -> dict[str, Any]:
    """The transformers ResNetConfig dict of an original checkpoint's torchvision ResNet (``backbone.0.body.*``, as
    facebookresearch/detr and Deformable-DETR save it), from its shapes: blocks per stage, bottleneck or basic blocks,
    stem and stage widths; ``checkpoint`` names the checkpoint in errors."""
    body = "backbone.0.body."
    depths = [count_indices(state_dict, rf"backbone\.0\.body\.layer{s}\.(\d+)\.") for s in range(1, 5)]
    if not all(depths):
        raise ValueError(f"{checkpoint} has {body}layer1..layer4; found blocks per stage {depths}")
    bottleneck = f"{body}layer1.0.conv3.weight" in state_dict
    last = "conv3" if bottleneck else "conv2"
    stem = required_shape(state_dict, f"{body}conv1.weight", checkpoint)  # (width, channels, 7, 7)
    widths = [required_shape(state_dict, f"{body}layer{s}.0.{last}.weight", checkpoint)[0] for s in range(1, 5)]
    return {
        "model_type": "resnet",
        "depths": depths,
        "layer_type": "bottleneck" if bottleneck else "basic",
        "embedding_size": stem[0],
        "hidden_sizes": widths,
        "num_channels": stem[1],
        "downsample_in_first_stage": False,
        "out_features": ["stage4"],
    }
