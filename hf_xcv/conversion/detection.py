"""What the conversions of DETR-style detectors share (DETR, Deformable DETR): the architecture fields of a
transformers detector's config that hf_xcv's keeps, and the config dict they make."""

from __future__ import annotations

from typing import Any

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
