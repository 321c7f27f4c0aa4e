"""Swin checkpoints -> hf_xcv Swin (``xcv_swin``): transformers-format ``swin`` folders and the original
microsoft/Swin-Transformer ``.pth`` files.

transformers writes its Swin under the legacy names (``attention.self.query``, ``intermediate.dense``, ...) and
holds the v5 names in memory (``attention.q_proj``, ``mlp.fc1``, ...); both load, with or without the ``swin.``
prefix of the task models. The original checkpoints (weights under ``"model"``) have a fused ``qkv``, which is
split into thirds; their ``relative_position_index`` and ``attn_mask`` buffers are rebuilt by the model and
dropped, and their config is read from the shapes. Every key is renamed or explicitly dropped.
"""

from __future__ import annotations

import math
import re
from functools import partial
from typing import Any

import torch

from .checkpoint_io import load_pth_state_dict
from .inverse import invert_import
from .rules import Rule, rename_keys, required_shape

SOURCE_MODEL_TYPE = "swin"
TARGET_MODEL_TYPE = "xcv_swin"
PROCESSOR_TYPE = "XcvSwinImageProcessor"

_P = r"^(swin\.)?"  # optional prefix of the task models
_B = _P + r"encoder\.layers\.(\d+)\.blocks\.(\d+)\."  # one block
_OUT = r"\1encoder.layers.\2.blocks.\3."
_WB = r"(weight|bias)"
_CORE_TABLE = "attention.core.relative_position_bias_table"

RULES: list[Rule] = [
    (_P + r"embeddings\.patch_embeddings\.projection\." + _WB, r"\1embeddings.patch_embeddings.projection.\2"),
    (_P + r"embeddings\.norm\." + _WB, r"\1embeddings.norm.\2"),
    (_P + r"embeddings\.position_embeddings", r"\1embeddings.position_embeddings"),
    # on-disk (legacy) names
    (_B + r"attention\.self\.query\." + _WB, _OUT + r"attention.q_proj.\4"),
    (_B + r"attention\.self\.key\." + _WB, _OUT + r"attention.k_proj.\4"),
    (_B + r"attention\.self\.value\." + _WB, _OUT + r"attention.v_proj.\4"),
    (_B + r"attention\.output\.dense\." + _WB, _OUT + r"attention.o_proj.\4"),
    (_B + r"attention\.self\.relative_position_bias_table", _OUT + _CORE_TABLE),
    (_B + r"intermediate\.dense\." + _WB, _OUT + r"mlp.fc1.\4"),
    (_B + r"output\.dense\." + _WB, _OUT + r"mlp.fc2.\4"),
    # transformers 5 in-memory names
    (_B + r"attention\.(q_proj|k_proj|v_proj|o_proj)\." + _WB, _OUT + r"attention.\4.\5"),
    (_B + r"attention\.relative_position_bias\.relative_position_bias_table", _OUT + _CORE_TABLE),
    (_B + r"mlp\.(fc1|fc2)\." + _WB, _OUT + r"mlp.\4.\5"),
    (_B + r"(layernorm_before|layernorm_after)\." + _WB, _OUT + r"\4.\5"),
    (_P + r"encoder\.layers\.(\d+)\.downsample\.(reduction|norm)\." + _WB, r"\1encoder.layers.\2.downsample.\3.\4"),
    (_P + r"layernorm\." + _WB, r"\1layernorm.\2"),
    (r"^hidden_states_norms\.(stage\d+|stem)\." + _WB, r"hidden_states_norms.\1.\2"),
    (r"^classifier\." + _WB, r"classifier.\1"),
]
# Rebuilt from the window size by the model; parts of transformers' masked-image-modeling model hf_xcv lacks.
DROP = [
    _B + r"attention\.(self|relative_position_bias)\.relative_position_index",
    _P + r"embeddings\.mask_token",
    r"^decoder\..*",
]

# transformers' SwinConfig defaults, for configs saved without some field.
SOURCE_DEFAULTS: dict[str, Any] = {
    "image_size": 224,
    "patch_size": 4,
    "num_channels": 3,
    "embed_dim": 96,
    "depths": [2, 2, 6, 2],
    "num_heads": [3, 6, 12, 24],
    "window_size": 7,
    "mlp_ratio": 4.0,
    "qkv_bias": True,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "drop_path_rate": 0.1,
    "hidden_act": "gelu",
    "use_absolute_embeddings": False,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-5,
    "encoder_stride": 32,
}
_PASSED_THROUGH = ("id2label", "label2id", "problem_type", "dtype", "torch_dtype", "out_features", "out_indices")
_ARCHITECTURES = ("SwinForImageClassification", "SwinModel", "SwinBackbone")


def convert_config(source: dict[str, Any]) -> dict[str, Any]:
    """transformers Swin config dict -> hf_xcv SwinConfig dict."""
    if source.get("model_type") != SOURCE_MODEL_TYPE:
        raise ValueError(f"expected a config of model_type {SOURCE_MODEL_TYPE!r}, got {source.get('model_type')!r}")
    out: dict[str, Any] = {key: source.get(key, default) for key, default in SOURCE_DEFAULTS.items()}
    out.update({key: source[key] for key in _PASSED_THROUGH if key in source})
    for key in ("out_features", "out_indices"):  # transformers saves them with a leading underscore too
        if f"_{key}" in source and key not in out:
            out[key] = source[f"_{key}"]
    out["model_type"] = TARGET_MODEL_TYPE
    architectures = [a for a in source.get("architectures") or [] if a in _ARCHITECTURES]
    if architectures:
        out["architectures"] = architectures
    return out


def convert_state_dict(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """transformers Swin state dict (on-disk or in-memory names) -> hf_xcv's, and the keys deliberately dropped. A
    backbone's (``hidden_states_norms``) body is under ``swin.``, as transformers holds it in memory and hf_xcv's
    ``SwinBackbone`` names it; transformers writes it without the prefix."""
    renamed, dropped = rename_keys(state_dict, RULES, DROP)
    if any(key.startswith("hidden_states_norms.") for key in renamed):
        renamed = {backbone_key(key): value for key, value in renamed.items()}
        unused = [key for key in renamed if key.startswith("swin.layernorm.")]  # its forward never reads them
        renamed = {key: value for key, value in renamed.items() if key not in unused}
        dropped += unused
    return renamed, dropped


def backbone_key(key: str) -> str:
    """A Swin backbone's key under hf_xcv's names: its body (embeddings, encoder, final norm) under ``swin.``."""
    return f"swin.{key}" if re.match(r"(embeddings|encoder|layernorm)\.", key) else key


def convert(
    config: dict[str, Any], state_dict: dict[str, torch.Tensor], for_task_model: bool | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """Config and weights together (``for_task_model`` is decided by the checkpoint's own keys)."""
    new_state_dict, dropped = convert_state_dict(state_dict)
    return convert_config(config), new_state_dict, dropped


# ----------------------------------------------------------------------------------------------------------
# the original microsoft/Swin-Transformer checkpoints
# ----------------------------------------------------------------------------------------------------------

_O = r"^layers\.(\d+)\.blocks\.(\d+)\."
_OO = r"swin.encoder.layers.\1.blocks.\2."
OFFICIAL_RULES: list[Rule] = [
    (r"^patch_embed\.proj\." + _WB, r"swin.embeddings.patch_embeddings.projection.\1"),
    (r"^patch_embed\.norm\." + _WB, r"swin.embeddings.norm.\1"),
    (r"^absolute_pos_embed", r"swin.embeddings.position_embeddings"),
    (_O + r"norm1\." + _WB, _OO + r"layernorm_before.\3"),
    (_O + r"norm2\." + _WB, _OO + r"layernorm_after.\3"),
    (_O + r"attn\.(q|k|v)_proj\." + _WB, _OO + r"attention.\3_proj.\4"),  # the thirds of the fused qkv
    (_O + r"attn\.proj\." + _WB, _OO + r"attention.o_proj.\3"),
    (_O + r"attn\.relative_position_bias_table", _OO + _CORE_TABLE),
    (_O + r"mlp\.(fc1|fc2)\." + _WB, _OO + r"mlp.\3.\4"),
    (r"^layers\.(\d+)\.downsample\.(reduction|norm)\." + _WB, r"swin.encoder.layers.\1.downsample.\2.\3"),
    (r"^norm\." + _WB, r"swin.layernorm.\1"),
    (r"^head\." + _WB, r"classifier.\1"),
]
OFFICIAL_DROP = [_O + r"attn\.relative_position_index", _O + r"attn_mask"]


def split_fused_qkv(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``attn.qkv`` (3C, C) rows (and its bias) split into ``attn.q_proj`` / ``k_proj`` / ``v_proj`` thirds."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        match = re.fullmatch(r"(.*\.attn\.)qkv\.(weight|bias)", key)
        if match is None:
            out[key] = tensor
            continue
        if tensor.shape[0] % 3:
            raise ValueError(f"{key} has {tensor.shape[0]} rows, not three equal parts (query, key, value)")
        for name, part in zip(("q", "k", "v"), tensor.chunk(3, dim=0)):
            out[f"{match.group(1)}{name}_proj.{match.group(2)}"] = part.clone()
    return out


_shape = partial(required_shape, checkpoint="an original Swin checkpoint")


def official_config(state_dict: dict[str, torch.Tensor], image_size: int | None = None) -> dict[str, Any]:
    """The hf_xcv SwinConfig dict of an original checkpoint, read from its shapes: embed_dim and patch size
    from the patch embedding, depths from the blocks, heads and window from the bias tables, the classes from
    the head, the resolution from the absolute positions or the shifted blocks' masks (else 224 or
    ``image_size``)."""
    embed_dim, channels, patch, _ = _shape(state_dict, "patch_embed.proj.weight")
    blocks: dict[int, set[int]] = {}
    for key in state_dict:
        match = re.match(r"layers\.(\d+)\.blocks\.(\d+)\.", key)
        if match:
            blocks.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    if not blocks or sorted(blocks) != list(range(len(blocks))):
        raise ValueError(f"an original Swin checkpoint has stages layers.0 .. layers.N; found {sorted(blocks)}")
    depths = [len(blocks[i]) for i in range(len(blocks))]
    tables = [_shape(state_dict, f"layers.{i}.blocks.0.attn.relative_position_bias_table") for i in range(len(depths))]
    window = (math.isqrt(tables[0][0]) + 1) // 2
    if (2 * window - 1) ** 2 != tables[0][0]:
        raise ValueError(f"layers.0.blocks.0.attn.relative_position_bias_table has {tables[0][0]} rows: not (2W-1)^2")
    config: dict[str, Any] = {
        "model_type": TARGET_MODEL_TYPE,
        "num_channels": channels,
        "patch_size": patch,
        "embed_dim": embed_dim,
        "depths": depths,
        "num_heads": [table[1] for table in tables],
        "window_size": window,
        "use_absolute_embeddings": "absolute_pos_embed" in state_dict,
        "qkv_bias": "layers.0.blocks.0.attn.qkv.bias" in state_dict,
        "image_size": image_size or _official_resolution(state_dict, patch, window),
    }
    if "head.weight" in state_dict:
        config["num_labels"] = state_dict["head.weight"].shape[0]
        config["architectures"] = ["SwinForImageClassification"]
    else:
        config["architectures"] = ["SwinModel"]
    return config


def _official_resolution(state_dict: dict[str, torch.Tensor], patch: int, window: int) -> int:
    if "absolute_pos_embed" in state_dict:
        return math.isqrt(state_dict["absolute_pos_embed"].shape[1]) * patch
    mask = state_dict.get("layers.0.blocks.1.attn_mask")
    if mask is not None:  # (windows, W^2, W^2) over the first stage's grid
        return math.isqrt(mask.shape[0]) * window * patch
    return 224


def convert_official(
    state_dict: dict[str, torch.Tensor], image_size: int | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """An original checkpoint's ``"model"`` state dict -> (hf_xcv config dict, state dict, dropped keys)."""
    config = official_config(state_dict, image_size)
    renamed, dropped = rename_keys(split_fused_qkv(state_dict), OFFICIAL_RULES, OFFICIAL_DROP)
    if "head.weight" not in state_dict:  # a backbone: hf_xcv's bare SwinModel has no "swin." prefix
        renamed = {key.removeprefix("swin."): value for key, value in renamed.items()}
    return config, renamed, dropped


def load_official(path: str) -> dict[str, torch.Tensor]:
    """The state dict of an original ``.pth`` (under ``"model"``, or bare), read with ``weights_only=True``."""
    return load_pth_state_dict(path)


# ----------------------------------------------------------------------------------------------------------
# back to transformers' format: hf_xcv Swin -> transformers Swin
# ----------------------------------------------------------------------------------------------------------

EXPORTED_PROCESSOR_TYPE = "ViTImageProcessor"  # what transformers' own Swin repos name (resize, crop, normalise)
_WINDOW_ATTENTION = "shifted_window"
# transformers' SwinBackbone wraps a whole SwinModel, whose final norm its forward never reads (hf_xcv's has none).
_UNUSED_BY_THE_BACKBONE = (r"swin\.layernorm\.(weight|bias)",)


def export_problems(config: dict[str, Any]) -> list[str]:
    """The settings of an hf_xcv Swin config transformers' Swin has no equivalent for (empty: exportable)."""
    problems = []
    attention = config.get("attention_type", _WINDOW_ATTENTION)
    if attention != _WINDOW_ATTENTION:
        problems.append(f"attention_type={attention!r} (transformers' Swin has shifted-window attention only)")
    elif config.get("attention_kwargs"):
        problems.append(f"attention_kwargs {sorted(config['attention_kwargs'])} of the window attention")
    window = config.get("window_size", SOURCE_DEFAULTS["window_size"])
    for stage, grid in enumerate(stage_grids(config), start=1):
        if min(grid) < window:
            problems.append(
                f"window_size={window} on stage {stage}'s {grid[0]}x{grid[1]} grid (image_size "
                f"{config.get('image_size')}): hf_xcv shrinks the window to the grid, as the original does; "
                "transformers' Swin keeps the whole window's position bias there and fails"
            )
            break
    return problems


def stage_grids(config: dict[str, Any]) -> list[tuple[int, int]]:
    """The token grid of every stage at the config's ``image_size`` (patch merging pads odd sides)."""
    size, patch = config.get("image_size", 224), config.get("patch_size", 4)
    size = size if isinstance(size, (list, tuple)) else (size, size)
    patch = patch if isinstance(patch, (list, tuple)) else (patch, patch)
    grid = (math.ceil(size[0] / patch[0]), math.ceil(size[1] / patch[1]))
    grids = []
    for _ in config.get("depths", SOURCE_DEFAULTS["depths"]):
        grids.append(grid)
        grid = (math.ceil(grid[0] / 2), math.ceil(grid[1] / 2))
    return grids


def export_config(config: dict[str, Any]) -> dict[str, Any]:
    """hf_xcv SwinConfig dict -> transformers SwinConfig dict; a ValueError naming every setting transformers' Swin
    has no equivalent for."""
    problems = export_problems(config)
    if problems:
        raise ValueError("this Swin cannot be written in transformers' format: " + "; ".join(problems))
    out = stage_config(config)
    architecture = next(iter(config.get("architectures") or ["SwinForImageClassification"]))
    out["architectures"] = [architecture if architecture in _ARCHITECTURES else "SwinForImageClassification"]
    return out


def stage_config(config: dict[str, Any]) -> dict[str, Any]:
    """The fields of an hf_xcv SwinConfig dict that transformers' SwinConfig holds, under ``model_type="swin"`` (the
    stages a backbone returns included); what :func:`export_config` and a detector's backbone export write."""
    out = {key: config[key] for key in SOURCE_DEFAULTS if key in config}
    out.update({key: config[key] for key in _PASSED_THROUGH if key in config and key not in ("out_indices",)})
    for key in ("out_features", "out_indices"):  # saved with a leading underscore by BackboneConfigMixin
        if f"_{key}" in config and key not in out:
            out[key] = config[f"_{key}"]
    out.pop("out_indices", None)  # out_features say the same
    out["model_type"] = SOURCE_MODEL_TYPE
    return out


def export(
    config: dict[str, Any], state_dict: dict[str, torch.Tensor]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """hf_xcv Swin config and weights -> transformers' (the import of :func:`convert_state_dict` inverted)."""
    target = export_config(config)
    return target, invert_import(target, state_dict, convert_state_dict, unused=_UNUSED_BY_THE_BACKBONE)


def export_processor(settings: dict[str, Any]) -> dict[str, Any]:
    """hf_xcv's Swin processor settings -> transformers' ``ViTImageProcessor``'s (``crop_pct`` is already in
    ``size``; transformers' class has no such argument)."""
    return {key: value for key, value in settings.items() if key != "crop_pct"}
