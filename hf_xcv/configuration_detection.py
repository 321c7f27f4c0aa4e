"""What the configurations of DETR-style detectors share (DETR, Deformable DETR, and any detector after them): the
backbone configs of their presets."""

from __future__ import annotations

from typing import Any


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
