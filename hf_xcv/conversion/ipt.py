"""Official IPT checkpoints (huawei-noah/Pretrained-IPT's ``IPT_sr2.pt``, ``IPT_sr3.pt``, ``IPT_sr4.pt``,
``IPT_denoise30.pt``, ``IPT_denoise50.pt``, ``IPT_derain.pt``, ``IPT_pretrain.pt``) -> hf_xcv IPT (``xcv_ipt``).

The released files are plain state dicts (``model.state_dict()`` of ``model/ipt.py``; 315 keys for single-task x2 at
the paper's size). What they hold, and where it goes:

* ``head.{i}.0`` and ``head.{i}.{b}.body.{0,2}``: task i's head, as ``ipt.heads.<task>.conv`` and
  ``ipt.heads.<task>.blocks.{b-1}.conv{1,2}``;
* ``tail.{i}.0.{2j}`` (the Upsampler's convolutions) and ``tail.{i}.1``: task i's tail, as
  ``tails.<task>.upsample.{j}`` and ``tails.<task>.conv``;
* ``body.linear_encoding``, ``body.mlp_head.{0,3}`` (-> ``fc1``, ``fc2``), ``body.position_encoding.pe`` (->
  ``position_embeddings``), ``body.query_embed`` (-> ``query_embeddings.<task>``: a row per task as an (N, C) map);
* ``body.{encoder,decoder}.layers.N``: ``self_attn`` / ``multihead_attn`` (-> ``encoder_attn``) with their fused
  ``in_proj_weight`` (3C, C) split into ``q_proj`` / ``k_proj`` / ``v_proj`` thirds and ``out_proj`` -> ``o_proj``;
  ``linear1`` / ``linear2`` -> ``mlp.fc1`` / ``mlp.fc2``; the numbered norms named (encoder ``norm1``, ``norm2`` ->
  ``self_attn_layer_norm``, ``final_layer_norm``; decoder ``norm1``, ``norm2``, ``norm3`` -> ``self_attn_layer_norm``,
  ``encoder_attn_layer_norm``, ``final_layer_norm``);
* ``sub_mean`` / ``add_mean``: the MeanShift 1x1 convolutions (identity weight, bias ``-/+ rgb_range * mean`` with
  DIV2K's mean). hf_xcv builds them in from ``config.rgb_range`` and ``config.image_mean``, so they are checked (an
  identity weight, biases ``-/+ rgb_range * DIV2K mean``: ``rgb_range`` is read from them) and dropped;
* ``body.position_encoding.position_ids``: the persistent buffer of positions, checked to be ``0 .. N-1`` and dropped
  (a file without it converts too: the official module builds it so).

``out_proj.bias`` keys (saved by PyTorch 1.x releases whose ``nn.MultiheadAttention(bias=False)`` kept that bias) are
kept, with ``attention_output_bias=True``.

Read from the shapes: ``n_feats``, ``patch_size`` (the official ``patch_dim``) and ``image_size`` (the official
``patch_size``: the square the body takes), the layers, ``intermediate_size``, the heads' residual blocks and kernel,
the number of tasks and each tail's scale. What the weights cannot tell:

* ``num_attention_heads`` (12 in every official script: the default);
* the task names. Super-resolution tails say their scale (one task of scale 2, 3, 4 -> ``sr_x2``, ``sr_x3``,
  ``sr_x4``); a single scale-1 task is denoising at sigma 30 or 50, or deraining: the released file name tells which
  (``IPT_denoise30.pt`` -> ``denoise_30``, ``IPT_denoise50.pt`` -> ``denoise_50``, ``IPT_derain.pt`` -> ``derain``),
  otherwise ``tasks`` must say it. Six tasks of scales 2, 3, 4, 1, 1, 1 (``IPT_pretrain.pt``, MindSpore's
  ``--scale 2+3+4+1+1+1``) are read in the order :data:`PRETRAINING_TASKS` (x2, x3, x4, denoise_30, denoise_50,
  derain); which scale-1 task is which is recorded nowhere, and a third-party copy of MindSpore's pre-training data
  code orders them derain, denoise_30, denoise_50, so ``tasks`` overrides. Any other layout needs ``tasks``.

Every key is renamed or explicitly dropped; any other key is an error that names it. The strict conversion, which also
checks the result against the model (a missing key, a wrong shape), is :mod:`hf_xcv.models.ipt.conversion_ipt`'s.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch

from ..processing.restoration import PRETRAINING_TASKS, parse_task
from .checkpoint_io import load_official_state_dict
from .ipt_reference import DIV2K_MEAN, upsampler_factors
from .rules import Rule, indices_of, numbered, precision_rtol, rename_keys, required_shape, split_in_proj
from .ttsr import strip_data_parallel

__all__ = [
    "convert_config",
    "convert_state_dict",
    "load_original",
    "read_rgb_range",
    "strip_data_parallel",
    "tail_scales",
]

TARGET_MODEL_TYPE = "xcv_ipt"
PROCESSOR_TYPE = "IPTImageProcessor"
ARCHITECTURE = "IPTForImageRestoration"
DEFAULT_NUM_HEADS = 12  # every official script (option.py --num_heads); the state dict cannot tell
SCALE_ONE_TASKS = ("denoise_30", "denoise_50", "derain")  # the released single-task scale-1 models
MEAN_SHIFTS = {"sub_mean": -1, "add_mean": 1}
POSITION_IDS = "body.position_encoding.position_ids"
POSITIONS = "body.position_encoding.pe.weight"
QUERIES = "body.query_embed.weight"

_WB = r"(weight|bias)"
_LAYER = r"body\.(encoder|decoder)\.layers\.(\d+)\."
# Applied after split_in_proj (q/k/v thirds, ``multihead_attn`` -> ``encoder_attn``); the per-task rules
# come from :func:`task_rules`.
BODY_RULES: list[Rule] = [
    (r"ipt\.body\.query_embeddings\.[a-z][a-z0-9_]*", r"\g<0>"),  # split per task by split_queries
    (r"body\.linear_encoding\." + _WB, r"ipt.body.linear_encoding.\1"),
    (r"body\.mlp_head\.0\." + _WB, r"ipt.body.mlp_head.fc1.\1"),
    (r"body\.mlp_head\.3\." + _WB, r"ipt.body.mlp_head.fc2.\1"),
    (re.escape(POSITIONS), "ipt.body.position_embeddings.weight"),
    (_LAYER + r"(self_attn|encoder_attn)\.(q|k|v)_proj\.weight", r"ipt.body.\1.\2.\3.\4_proj.weight"),
    (_LAYER + r"(self_attn|encoder_attn)\.out_proj\." + _WB, r"ipt.body.\1.\2.\3.o_proj.\4"),
    (_LAYER + r"linear1\." + _WB, r"ipt.body.\1.\2.mlp.fc1.\3"),
    (_LAYER + r"linear2\." + _WB, r"ipt.body.\1.\2.mlp.fc2.\3"),
    (r"body\.(encoder|decoder)\.layers\.(\d+)\.norm1\." + _WB, r"ipt.body.\1.\2.self_attn_layer_norm.\3"),
    (r"body\.encoder\.layers\.(\d+)\.norm2\." + _WB, r"ipt.body.encoder.\1.final_layer_norm.\2"),
    (r"body\.decoder\.layers\.(\d+)\.norm2\." + _WB, r"ipt.body.decoder.\1.encoder_attn_layer_norm.\2"),
    (r"body\.decoder\.layers\.(\d+)\.norm3\." + _WB, r"ipt.body.decoder.\1.final_layer_norm.\2"),
]
# Built in from the config (after their checks): the MeanShifts and the positions' index buffer.
DROP = [re.escape(f"{name}.{kind}") for name in MEAN_SHIFTS for kind in ("weight", "bias")] + [re.escape(POSITION_IDS)]


def load_original(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The state dict of an official ``.pt`` file (see :func:`.checkpoint_io.load_official_state_dict`)."""
    return load_official_state_dict(path, "the official IPT_*.pt files")


# ---------------------------------------------------------------------------------------------------------------
# what the shapes and constants say

_shape = partial(required_shape, checkpoint="an official IPT checkpoint")


def read_rgb_range(state_dict: dict[str, torch.Tensor], rgb_range: float | None = None) -> float:
    """The ``rgb_range`` of the MeanShifts: ValueError naming the key unless both weights are the identity (std 1)
    and the biases are ``-/+ rgb_range * DIV2K mean`` (an integer when it rounds to one); ``rgb_range`` given must
    agree with them."""
    mean = torch.tensor(DIV2K_MEAN, dtype=torch.float64)
    for name in MEAN_SHIFTS:
        for key in (f"{name}.weight", f"{name}.bias"):
            _shape(state_dict, key)
        weight = state_dict[f"{name}.weight"]
        identity = torch.eye(3, dtype=torch.float64).view(3, 3, 1, 1)
        if tuple(weight.shape) != (3, 3, 1, 1) or not torch.equal(weight.double(), identity):
            raise ValueError(
                f"{name}.weight {list(weight.shape)} = {weight.flatten().tolist()} is not the identity (the official "
                "MeanShift with std 1): hf_xcv adds and subtracts the mean only, so these weights would compute "
                "something else"
            )
    bias = state_dict["sub_mean.bias"]
    tolerance = precision_rtol(bias)
    estimates = -bias.double().flatten() / mean if bias.numel() == 3 else torch.zeros(1)
    found = estimates.mean().item()
    if found <= 0 or (estimates - found).abs().max() > tolerance * found:
        raise ValueError(
            f"sub_mean.bias = {bias.flatten().tolist()} is not -rgb_range * the DIV2K mean {list(DIV2K_MEAN)} (the "
            "official MeanShift) for any rgb_range > 0"
        )
    if abs(found - round(found)) <= tolerance * found:
        found = round(found)
    if rgb_range is not None and abs(rgb_range - found) > tolerance * found:
        raise ValueError(
            f"rgb_range={rgb_range:g} disagrees with the checkpoint's MeanShift, sub_mean.bias = "
            f"{bias.flatten().tolist()} = -{found:g} * the DIV2K mean: the model was trained on values in [0, "
            f"{found:g}]"
        )
    for name, sign in MEAN_SHIFTS.items():
        value = state_dict[f"{name}.bias"]
        expected = sign * found * mean
        rtol = precision_rtol(value)
        if value.numel() != 3 or not torch.allclose(value.double().flatten(), expected, rtol=rtol, atol=0):
            raise ValueError(
                f"{name}.bias = {value.flatten().tolist()} is not {'+' if sign > 0 else '-'}{found:g} * the DIV2K "
                f"mean {expected.tolist()} (sub_mean.bias says rgb_range={found:g})"
            )
    return found


def check_position_ids(state_dict: dict[str, torch.Tensor]) -> None:
    """ValueError unless ``position_ids`` (when present) is ``[[0, 1, ..., N-1]]``, the order of the positions."""
    if POSITION_IDS not in state_dict:
        return
    ids, rows = state_dict[POSITION_IDS], _shape(state_dict, POSITIONS)[0]
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"{POSITION_IDS} holds {ids.dtype} values: an index buffer holds integers (a corrupt file?)")
    if tuple(ids.shape) != (1, rows) or not torch.equal(ids.long().flatten(), torch.arange(rows)):
        raise ValueError(
            f"{POSITION_IDS} {list(ids.shape)} is not [[0 .. {rows - 1}]]: the positions would be read in another "
            "order than hf_xcv's (one per token, in order)"
        )


def tail_scales(state_dict: dict[str, torch.Tensor], n_feats: int) -> list[int]:
    """Each tail's scale, from its Upsampler: no convolution -> 1, one to 9 n_feats channels -> 3, k to 4 n_feats
    -> 2^k; ValueError naming the key of any other."""
    scales = []
    for i in range(numbered(state_dict, "tail.", "tails")):
        stages = indices_of(state_dict, f"tail.{i}.0.")  # (conv, PixelShuffle) per factor: convolutions at 0, 2, ...
        if stages != list(range(0, 2 * len(stages), 2)):
            raise ValueError(f"the Upsampler convolutions tail.{i}.0.N are numbered {stages}, not 0, 2, 4, ...")
        convs = [f"tail.{i}.0.{stage}.weight" for stage in stages]
        widths = [_shape(state_dict, key)[0] for key in convs]
        if widths == [9 * n_feats]:
            scales.append(3)
        elif all(width == 4 * n_feats for width in widths):
            scales.append(2 ** len(widths))
        else:
            bad = next((k for k, w in zip(convs, widths) if w != 4 * n_feats), convs[-1])
            raise ValueError(
                f"{bad} has {_shape(state_dict, bad)[0]} output channels: the official Upsampler has one convolution "
                f"to 9 * n_feats = {9 * n_feats} (x3) or convolutions to 4 * n_feats = {4 * n_feats} (x2 each)"
            )
    return scales


def _from_file_name(file_name: str | None) -> str | None:
    """The scale-1 task a released file's name says (``IPT_denoise30.pt`` -> ``denoise_30``, ``IPT_derain.pt`` ->
    ``derain``), or None."""
    name = os.path.basename(file_name or "").lower()
    found = [f"denoise_{int(m.group(1))}" for m in re.finditer(r"denoise_?(\d+)", name)]
    found += ["derain"] if "derain" in name else []
    return found[0] if len(found) == 1 else None


def infer_tasks(
    scales: Sequence[int], tasks: Sequence[str] | None = None, file_name: str | None = None
) -> tuple[list[str], dict[str, int]]:
    """(task names, ``task_scales`` of the names of your own) for tails of these ``scales``; ``tasks`` given: checked
    against them (a built-in name carries its scale; a name of your own takes its tail's)."""
    if tasks is not None:
        tasks = tasks.split(",") if isinstance(tasks, str) else list(tasks)
        if len(tasks) != len(scales):
            raise ValueError(
                f"tasks {tasks} name {len(tasks)} tasks; the checkpoint has {len(scales)} (tails of scales "
                f"{list(scales)}, in order)"
            )
        own: dict[str, int] = {}
        for index, (name, scale) in enumerate(zip(tasks, scales)):
            task = parse_task(name)
            if task.kind == "custom":
                own[name] = scale
            elif task.scale != scale:
                raise ValueError(
                    f"tasks[{index}] = {name!r} is a task of scale {task.scale}, but tail.{index} upsamples x{scale} "
                    f"(the checkpoint's tails have scales {list(scales)}, in order)"
                )
        return tasks, own
    scales = list(scales)
    if scales == [2, 3, 4, 1, 1, 1]:
        return list(PRETRAINING_TASKS), {}
    if len(scales) == 1 and scales[0] > 1:
        return [f"sr_x{scales[0]}"], {}
    named = _from_file_name(file_name) if scales == [1] else None
    if named is not None:
        return [named], {}
    if scales == [1]:
        raise ValueError(
            f"the checkpoint has one task of scale 1: {', '.join(SCALE_ONE_TASKS)} (IPT_denoise30.pt, "
            f"IPT_denoise50.pt, IPT_derain.pt) look alike, and the file name {os.path.basename(file_name or '')!r} "
            "does not say which: name it with --tasks (tasks=[...])"
        )
    raise ValueError(
        f"the checkpoint has {len(scales)} tasks with tails of scales {scales}, not one task nor the pre-training "
        f"layout 2, 3, 4, 1, 1, 1 ({', '.join(PRETRAINING_TASKS)}): name them in order with --tasks (tasks=[...])"
    )


def _layers(state_dict: dict[str, torch.Tensor]) -> int:
    encoder = numbered(state_dict, "body.encoder.layers.", "encoder layers")
    decoder = numbered(state_dict, "body.decoder.layers.", "decoder layers")
    if encoder != decoder:
        raise ValueError(f"the encoder has {encoder} layers and the decoder {decoder}: IPT's have the same depth")
    return encoder


def convert_config(
    state_dict: dict[str, torch.Tensor],
    tasks: Sequence[str] | None = None,
    *,
    num_attention_heads: int = DEFAULT_NUM_HEADS,
    rgb_range: float | None = None,
    file_name: str | None = None,
) -> dict[str, Any]:
    """The hf_xcv IPTConfig dict of an official state dict, read from its shapes and MeanShifts (the module
    docstring says what and how); ``tasks`` names the tasks in order where the shapes cannot (scale 1), ``file_name``
    the released file it came from, ``rgb_range`` is checked against the MeanShifts."""
    state_dict = strip_data_parallel(state_dict)
    biased = sorted(key for key in state_dict if key.endswith(".in_proj_bias"))
    if biased:
        raise ValueError(
            f"{biased[0]} (and {len(biased) - 1} more): IPT's attentions have no input projection bias (the "
            "official nn.MultiheadAttention(bias=False)); this checkpoint comes from another model"
        )
    n_feats, channels = _shape(state_dict, "head.0.0.weight")[:2]
    hidden = _shape(state_dict, "body.linear_encoding.weight")[0]
    patch = math.isqrt(hidden // n_feats)
    if patch * patch * n_feats != hidden:
        raise ValueError(
            f"body.linear_encoding is {hidden} wide: not n_feats ({n_feats}, head.0.0.weight) times a square patch"
        )
    rows, width = _shape(state_dict, POSITIONS)
    side = math.isqrt(rows)
    if width != hidden or side * side != rows:
        raise ValueError(
            f"{POSITIONS} is [{rows}, {width}]: not one row per patch of a square grid, each {hidden} wide"
        )
    num_tasks = numbered(state_dict, "head.", "heads")
    scales = tail_scales(state_dict, n_feats)
    if len(scales) != num_tasks:
        raise ValueError(f"the checkpoint has {num_tasks} heads and {len(scales)} tails: one of each per task")
    queries = _shape(state_dict, QUERIES)[0]
    if queries != num_tasks:
        raise ValueError(
            f"{QUERIES} has {queries} rows (num_queries) but the checkpoint has {num_tasks} tasks (heads and tails): "
            "IPT uses query row i for task i, so they must be equal"
        )
    names, own_scales = infer_tasks(scales, tasks, file_name)
    layer = "body.encoder.layers.0."
    blocks = numbered(state_dict, "head.0.", "head stages") - 1  # the 3x3 convolution, then the residual blocks
    config = {
        "model_type": TARGET_MODEL_TYPE,
        "architectures": [ARCHITECTURE],
        "tasks": names,
        "num_channels": channels,
        "n_feats": n_feats,
        "image_size": side * patch,
        "patch_size": patch,
        "num_hidden_layers": _layers(state_dict),
        "num_attention_heads": num_attention_heads,
        "intermediate_size": _shape(state_dict, layer + "linear1.weight")[0],
        "num_head_blocks": blocks,
        "rgb_range": read_rgb_range(state_dict, rgb_range),
        "image_mean": list(DIV2K_MEAN),
        "attention_output_bias": any(key.endswith(".out_proj.bias") for key in state_dict),
    }
    if blocks:
        config["head_kernel_size"] = _shape(state_dict, "head.0.1.body.0.weight")[-1]
    if own_scales:
        config["task_scales"] = own_scales
    return config


# ---------------------------------------------------------------------------------------------------------------
# the state dict


def task_rules(tasks: Sequence[str], scales: Sequence[int], num_head_blocks: int) -> list[Rule]:
    """The rename rules of the heads and tails: the official index i -> the task's name."""
    rules: list[Rule] = []
    for i, (task, scale) in enumerate(zip(tasks, scales)):
        rules.append((rf"head\.{i}\.0\.{_WB}", rf"ipt.heads.{task}.conv.\1"))
        for block in range(num_head_blocks):  # ResBlock.body = (conv, ReLU, conv)
            for index, conv in (("0", "conv1"), ("2", "conv2")):
                source = rf"head\.{i}\.{block + 1}\.body\.{index}\.{_WB}"
                rules.append((source, rf"ipt.heads.{task}.blocks.{block}.{conv}.\1"))
        for stage in range(len(upsampler_factors(scale))):  # Upsampler = (conv, PixelShuffle) per stage
            rules.append((rf"tail\.{i}\.0\.{2 * stage}\.{_WB}", rf"tails.{task}.upsample.{stage}.\1"))
        rules.append((rf"tail\.{i}\.1\.{_WB}", rf"tails.{task}.conv.\1"))
    return rules


def convert_state_dict(
    state_dict: dict[str, torch.Tensor], config: dict[str, Any]
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """An official state dict -> hf_xcv's names for the tasks of ``config`` (from :func:`convert_config`), and the
    keys deliberately dropped (the checked MeanShifts and position_ids), named without a ``module.`` prefix. Any
    other unknown key is a ValueError."""
    state_dict = strip_data_parallel(state_dict)
    read_rgb_range(state_dict, config["rgb_range"])
    check_position_ids(state_dict)
    own_scales = config.get("task_scales") or {}
    scales = [parse_task(name, own_scales.get(name)).scale for name in config["tasks"]]
    rules = task_rules(config["tasks"], scales, config.get("num_head_blocks", 2)) + BODY_RULES
    converted, dropped = rename_keys(split_in_proj(split_queries(state_dict, config)), rules, DROP)
    return converted, dropped


def split_queries(state_dict: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The official query table (one row per task, in the tails' order) as one (N, C) query map per task name
    (``ipt.body.query_embeddings.<task>``): hf_xcv keys the queries by name, as the heads and tails."""
    if QUERIES not in state_dict:
        return state_dict
    rows = state_dict[QUERIES]
    side = config["image_size"] // config["patch_size"]
    out = {key: value for key, value in state_dict.items() if key != QUERIES}
    for index, task in enumerate(config["tasks"]):
        out[f"ipt.body.query_embeddings.{task}"] = rows[index].reshape(side * side, -1)
    return out
