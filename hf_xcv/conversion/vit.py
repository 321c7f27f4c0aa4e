"""transformers-format ViT checkpoints (model_type ``vit``) -> hf_xcv ViT (``xcv_vit``).

Handles both key layouts transformers uses: the on-disk names (``encoder.layer.N.attention.attention.query``)
and the in-memory names of transformers 5 (``layers.N.attention.q_proj``), with or without the
``vit.`` prefix of the classification model. Every key is either renamed or explicitly dropped.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from .rules import Rule, rename_keys

logger = logging.getLogger(__name__)

SOURCE_MODEL_TYPE = "vit"
TARGET_MODEL_TYPE = "xcv_vit"
PROCESSOR_TYPE = "XcvViTImageProcessor"

_P = r"^(vit\.)?"  # optional prefix of ViTForImageClassification checkpoints
_L = _P + r"encoder\.layer\.(\d+)\."  # one encoder block, on-disk names
_M = _P + r"layers\.(\d+)\."  # one encoder block, transformers 5 in-memory names
_WB = r"(weight|bias)"

RULES: list[Rule] = [
    (_P + r"embeddings\.(cls_token|position_embeddings)", r"\1embeddings.\2"),
    (_P + r"embeddings\.patch_embeddings\.projection\." + _WB, r"\1embeddings.patch_embeddings.projection.\2"),
    (_L + r"attention\.attention\.query\." + _WB, r"\1encoder.layers.\2.attention.q_proj.\3"),
    (_L + r"attention\.attention\.key\." + _WB, r"\1encoder.layers.\2.attention.k_proj.\3"),
    (_L + r"attention\.attention\.value\." + _WB, r"\1encoder.layers.\2.attention.v_proj.\3"),
    (_L + r"attention\.output\.dense\." + _WB, r"\1encoder.layers.\2.attention.o_proj.\3"),
    (_L + r"intermediate\.dense\." + _WB, r"\1encoder.layers.\2.mlp.fc1.\3"),
    (_L + r"output\.dense\." + _WB, r"\1encoder.layers.\2.mlp.fc2.\3"),
    (_L + r"(layernorm_before|layernorm_after)\." + _WB, r"\1encoder.layers.\2.\3.\4"),
    (_M + r"attention\.(q_proj|k_proj|v_proj|o_proj)\." + _WB, r"\1encoder.layers.\2.attention.\3.\4"),
    (_M + r"mlp\.(fc1|fc2)\." + _WB, r"\1encoder.layers.\2.mlp.\3.\4"),
    (_M + r"(layernorm_before|layernorm_after)\." + _WB, r"\1encoder.layers.\2.\3.\4"),
    (_P + r"layernorm\." + _WB, r"\1layernorm.\2"),
    (_P + r"pooler\.dense\." + _WB, r"\1pooler.dense.\2"),
    (r"classifier\." + _WB, r"classifier.\1"),
]
# Parts of transformers' masked-image-modeling model that hf_xcv's ViT has no use for.
DROP = [_P + r"embeddings\.mask_token", r"decoder\..*"]

# transformers' ViTConfig defaults, for configs saved without some field.
_SOURCE_DEFAULTS: dict[str, Any] = {
    "image_size": 224,
    "patch_size": 16,
    "num_channels": 3,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "qkv_bias": True,
}
_PASSED_THROUGH = ("id2label", "label2id", "problem_type", "dtype", "torch_dtype")
_ARCHITECTURES = {"ViTForImageClassification": "ViTForImageClassification", "ViTModel": "ViTModel"}


def has_pooler(state_dict: dict[str, torch.Tensor]) -> bool:
    return any(key.endswith("pooler.dense.weight") for key in state_dict)


def convert_config(source: dict[str, Any], with_pooler: bool) -> dict[str, Any]:
    """transformers ViT config dict -> hf_xcv ViTConfig dict."""
    if source.get("model_type") != SOURCE_MODEL_TYPE:
        raise ValueError(f"expected a config of model_type {SOURCE_MODEL_TYPE!r}, got {source.get('model_type')!r}")
    out: dict[str, Any] = {key: source.get(key, default) for key, default in _SOURCE_DEFAULTS.items()}
    out.update({key: source[key] for key in _PASSED_THROUGH if key in source})
    out["model_type"] = TARGET_MODEL_TYPE
    out["pooling"] = "cls"
    out["use_cls_token"] = True
    if with_pooler:
        out["representation_size"] = source.get("pooler_output_size") or out["hidden_size"]
        out["representation_act"] = source.get("pooler_act", "tanh")
    architectures = [_ARCHITECTURES[a] for a in source.get("architectures") or [] if a in _ARCHITECTURES]
    if architectures:
        out["architectures"] = architectures
    return out


def convert_state_dict(
    state_dict: dict[str, torch.Tensor], with_pooler: bool = True
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """transformers ViT state dict -> hf_xcv ViT state dict, and the keys deliberately dropped.

    ``with_pooler=False`` drops the pooler (``pooler.dense``), as transformers' classification model
    ignores it; with it, the pooler becomes the pre-logits layer.
    """
    drop = DROP if with_pooler else [*DROP, _P + r"pooler\.dense\." + _WB]
    return rename_keys(state_dict, RULES, drop)


def convert(
    config: dict[str, Any], state_dict: dict[str, torch.Tensor], for_task_model: bool | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """Config and weights together. ``for_task_model``: the target has a classifier (None: infer from the
    source's architectures; a ``ViTModel`` checkpoint stays a backbone with its pooler)."""
    if for_task_model is None:
        for_task_model = "ViTModel" not in (config.get("architectures") or [])
    with_pooler = has_pooler(state_dict) and not for_task_model
    new_state_dict, dropped = convert_state_dict(state_dict, with_pooler)
    return convert_config(config, with_pooler), new_state_dict, dropped


# ----------------------------------------------------------------------------------------------------------
# back to transformers' format: hf_xcv ViT -> transformers ViT (its in-memory names)
# ----------------------------------------------------------------------------------------------------------

EXPORT_RULES: list[Rule] = [
    (r"^(vit\.)?encoder\.layers\.(\d+)\.(.+)", r"\1layers.\2.\3"),
    (r"^(vit\.)?(embeddings\..+|layernorm\..+|pooler\.dense\..+)", r"\1\2"),
    (r"^(classifier\..+)", r"\1"),
]
EXPORTED_PROCESSOR_TYPE = "ViTImageProcessor"
_EXPORT_ARCHITECTURES = {"ViTForImageClassification": "ViTForImageClassification", "ViTModel": "ViTModel"}


def export_config(config: dict[str, Any]) -> dict[str, Any]:
    """hf_xcv ViTConfig dict -> transformers ViTConfig dict; a ValueError naming every setting transformers' ViT
    has no equivalent for."""
    architecture = next(iter(config.get("architectures") or ["ViTForImageClassification"]))
    problems = []
    if config.get("attention_type", "full") != "full":
        problems.append(f"attention_type={config['attention_type']!r} (transformers' ViT has full attention only)")
    if config.get("pooling", "cls") != "cls" or not config.get("use_cls_token", True):
        problems.append("pooling other than the [CLS] token (transformers' ViT pools [CLS])")
    if config.get("representation_size") and architecture != "ViTModel":
        problems.append("representation_size (transformers' classifier has no pre-logits layer)")
    if problems:
        raise ValueError("this ViT cannot be written in transformers' format: " + "; ".join(problems))
    if config.get("drop_path_rate"):
        logger.warning("transformers' ViT has no stochastic depth: drop_path_rate is dropped (outputs are unchanged)")
    out = {key: config[key] for key in _SOURCE_DEFAULTS if key in config}
    out.update({key: config[key] for key in _PASSED_THROUGH if key in config})
    out["model_type"] = SOURCE_MODEL_TYPE
    out["architectures"] = [_EXPORT_ARCHITECTURES.get(architecture, "ViTForImageClassification")]
    if config.get("representation_size"):
        out["pooler_output_size"] = config["representation_size"]
        out["pooler_act"] = config.get("representation_act", "tanh")
    return out


def model_kwargs(config: dict[str, Any], state_dict: dict[str, torch.Tensor]) -> dict[str, Any]:
    """How transformers' class of the exported weights is built: a bare ``ViTModel`` without a pooler when the
    weights have none."""
    has_pooler = any("pooler." in key for key in state_dict)
    is_bare = config.get("architectures", ["ViTModel"])[0] == "ViTModel"
    return {"add_pooling_layer": False} if is_bare and not has_pooler else {}


def export(
    config: dict[str, Any], state_dict: dict[str, torch.Tensor]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """hf_xcv ViT config and weights -> transformers' (every key renamed; an unknown one is an error)."""
    renamed, _ = rename_keys(state_dict, EXPORT_RULES)
    return export_config(config), renamed
