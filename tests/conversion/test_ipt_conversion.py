"""IPT conversion: official huawei-noah/Pretrained-IPT state dicts (IPT_sr2.pt ... IPT_pretrain.pt layouts) onto
hf_xcv's names, the config read from the shapes, strictness (every bad source an error naming the problem, and no
output), and fidelity: the converted model against the functional reference of the official forward pass
(``ipt_reference``), which reads the official names itself."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoImageProcessor, AutoModelForImageToImage

import hf_xcv
from hf_xcv.cli import convert_ipt
from hf_xcv.cli.convert_ipt import compare_with_original
from hf_xcv.conversion import CheckpointMismatchError
from hf_xcv.conversion import ipt as mapping
from hf_xcv.conversion.ipt_reference import (
    mean_shift,
    official_forward,
    official_forward_chop,
    official_shapes,
    official_state_dict,
    random_input,
)
from hf_xcv.convert import main as hf_xcv_convert
from hf_xcv.models.ipt.conversion_ipt import convert_official
from hf_xcv.presets import preset_config

PRETRAIN = (2, 3, 4, 1, 1, 1)
PAPER = dict(n_feats=64, patch_size=48, patch_dim=3, num_layers=12)
HEADS = 2  # the tiny layouts' attention heads (72-wide tokens)
TOL64 = 1e-10  # float64 rounding on the 0-255 scale: measured <= 2.3e-13
TOL32 = 1e-3  # float32 rounding on the 0-255 scale (4e-6 of it): measured <= 9.2e-5
CONVERTED_FILES = ["config.json", "model.safetensors", "preprocessor_config.json", "xcv_ipt.py"]  # (+ remote code)


def converted_model(state_dict: dict[str, torch.Tensor], **kwargs) -> hf_xcv.IPTForImageRestoration:
    config, converted, _ = convert_official(state_dict, num_attention_heads=HEADS, **kwargs)
    model = hf_xcv.IPTForImageRestoration(hf_xcv.IPTConfig.from_dict(config))
    model.load_state_dict(converted, strict=True)
    return model.eval()


def with_out_proj_bias(seed: int = 0) -> dict[str, torch.Tensor]:
    """The layout of PyTorch releases that saved ``out_proj.bias``, nonzero (so that a dropped one would show)."""
    state_dict = official_state_dict((2,), out_proj_bias=True, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    for key in [k for k in state_dict if k.endswith("out_proj.bias")]:
        state_dict[key] = 0.1 * torch.randn(state_dict[key].shape, generator=generator)
    return state_dict


def paper_sized(scales: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """An official paper-sized layout on the meta device (no memory), with the real MeanShifts and position_ids."""
    state_dict = {key: torch.empty(shape, device="meta") for key, shape in official_shapes(scales, **PAPER).items()}
    for name, sign in (("sub_mean", -1), ("add_mean", 1)):
        state_dict[f"{name}.weight"], state_dict[f"{name}.bias"] = mean_shift(255, sign)
    state_dict[mapping.POSITION_IDS] = torch.arange(256).view(1, 256)
    return state_dict


# ---------------------------------------------------------------------------------------------------------------
# layout and config
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scales", "file_name", "preset", "keys", "parameters"),
    [
        ((2,), "IPT_sr2.pt", "ipt-sr-x2", 315, 115_460_443),
        ((3,), "IPT_sr3.pt", "ipt-sr-x3", 315, 115_645_083),
        ((4,), "IPT_sr4.pt", "ipt-sr-x4", 317, 115_608_155),
        ((1,), "IPT_denoise30.pt", "ipt-denoise-30", 313, 115_312_731),
        ((1,), "IPT_denoise50.pt", "ipt-denoise-50", 313, 115_312_731),
        ((1,), "IPT_derain.pt", "ipt-derain", 313, 115_312_731),
        (PRETRAIN, "IPT_pretrain.pt", "ipt-pretrain", 381, 118_892_394),
    ],
)
def test_the_released_layouts_convert_to_the_paper_presets(scales, file_name, preset, keys, parameters):
    official = paper_sized(scales)
    assert len(official) == keys
    config, converted, dropped = convert_official(official, file_name=file_name)
    ours, paper = hf_xcv.IPTConfig.from_dict(config), preset_config(preset)
    for field in ("tasks", "n_feats", "image_size", "patch_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "head_kernel_size", "num_head_blocks", "rgb_range", "image_mean",
                  "attention_output_bias"):  # fmt: skip
        assert getattr(ours, field) == getattr(paper, field), field
    assert sorted(dropped) == sorted(["sub_mean.weight", "sub_mean.bias", "add_mean.weight", "add_mean.bias",
                                      "body.position_encoding.position_ids"])  # fmt: skip
    # 36 fused projections become three each, the query table one map per task; the 24 MeanShift numbers are built in
    assert len(converted) == keys - len(dropped) + 2 * 36 + len(scales) - 1
    assert sum(t.numel() for t in converted.values()) == parameters - 24
    with torch.device("meta"):
        model = hf_xcv.IPTForImageRestoration(ours)
    model.load_state_dict(converted, strict=True, assign=True)


def test_names_map_one_to_one_and_keep_the_tensors():
    official = official_state_dict(PRETRAIN)
    config = mapping.convert_config(official, num_attention_heads=HEADS)
    converted, dropped = mapping.convert_state_dict(official, config)
    # 2 layers x 3 attentions, fused -> 3 each; the query table -> one map per task
    assert len(converted) + len(dropped) == len(official) + 2 * 2 * 3 + len(config["tasks"]) - 1
    same = {
        "head.0.0.weight": "ipt.heads.sr_x2.conv.weight",
        "head.3.1.body.0.bias": "ipt.heads.denoise_30.blocks.0.conv1.bias",
        "head.5.2.body.2.weight": "ipt.heads.derain.blocks.1.conv2.weight",
        "tail.0.0.0.weight": "tails.sr_x2.upsample.0.weight",
        "tail.1.0.0.bias": "tails.sr_x3.upsample.0.bias",
        "tail.2.0.2.weight": "tails.sr_x4.upsample.1.weight",
        "tail.4.1.weight": "tails.denoise_50.conv.weight",
        "body.linear_encoding.bias": "ipt.body.linear_encoding.bias",
        "body.mlp_head.0.weight": "ipt.body.mlp_head.fc1.weight",
        "body.mlp_head.3.bias": "ipt.body.mlp_head.fc2.bias",
        "body.position_encoding.pe.weight": "ipt.body.position_embeddings.weight",
        "body.encoder.layers.1.self_attn.out_proj.weight": "ipt.body.encoder.1.self_attn.o_proj.weight",
        "body.encoder.layers.0.linear1.bias": "ipt.body.encoder.0.mlp.fc1.bias",
        "body.encoder.layers.0.norm1.weight": "ipt.body.encoder.0.self_attn_layer_norm.weight",
        "body.encoder.layers.1.norm2.bias": "ipt.body.encoder.1.final_layer_norm.bias",
        "body.decoder.layers.0.multihead_attn.out_proj.weight": "ipt.body.decoder.0.encoder_attn.o_proj.weight",
        "body.decoder.layers.1.linear2.weight": "ipt.body.decoder.1.mlp.fc2.weight",
        "body.decoder.layers.1.norm1.bias": "ipt.body.decoder.1.self_attn_layer_norm.bias",
        "body.decoder.layers.0.norm2.weight": "ipt.body.decoder.0.encoder_attn_layer_norm.weight",
        "body.decoder.layers.1.norm3.weight": "ipt.body.decoder.1.final_layer_norm.weight",
    }
    for key, ours in same.items():
        assert converted[ours] is official[key], key
    for prefix, ours in (("body.encoder.layers.1.self_attn", "ipt.body.encoder.1.self_attn"),
                         ("body.decoder.layers.0.multihead_attn", "ipt.body.decoder.0.encoder_attn")):  # fmt: skip
        q, k, v = official[f"{prefix}.in_proj_weight"].chunk(3)
        for name, part in (("q", q), ("k", k), ("v", v)):
            assert torch.equal(converted[f"{ours}.{name}_proj.weight"], part)
    model = hf_xcv.IPTForImageRestoration(hf_xcv.IPTConfig.from_dict(config))
    assert set(model.state_dict()) == set(converted)


@pytest.mark.parametrize(
    ("scales", "kwargs", "tasks", "task_scales"),
    [
        ((2,), {}, ["sr_x2"], None),
        ((3,), {}, ["sr_x3"], None),
        ((4,), {}, ["sr_x4"], None),
        ((8,), {}, ["sr_x8"], None),
        ((1,), {"file_name": "IPT_denoise30.pt"}, ["denoise_30"], None),
        ((1,), {"file_name": "/ckpt/IPT_denoise50.pt"}, ["denoise_50"], None),
        ((1,), {"file_name": "IPT_derain.pt"}, ["derain"], None),
        ((1,), {"file_name": "IPT_derain.pt", "tasks": ["denoise_30"]}, ["denoise_30"], None),  # tasks win
        ((1,), {"tasks": ["deblur"]}, ["deblur"], {"deblur": 1}),  # a name of your own takes its tail's scale
        ((2, 1), {"tasks": ["my_sr", "derain"]}, ["my_sr", "derain"], {"my_sr": 2}),
        (PRETRAIN, {}, ["sr_x2", "sr_x3", "sr_x4", "denoise_30", "denoise_50", "derain"], None),
        (
            PRETRAIN,
            {"tasks": "sr_x2 sr_x3 sr_x4 derain denoise_30 denoise_50".split()},
            ["sr_x2", "sr_x3", "sr_x4", "derain", "denoise_30", "denoise_50"],
            None,
        ),  # fmt: skip
    ],
    ids=[
        "x2",
        "x3",
        "x4",
        "x8",
        "denoise30-file",
        "denoise50-file",
        "derain-file",
        "tasks-over-file",
        "own-name",
        "own-name-x2",
        "pretrain-default",
        "pretrain-mindspore-order",
    ],  # fmt: skip
)
def test_the_tasks_are_read_from_the_tails_and_the_file_name(scales, kwargs, tasks, task_scales):
    official = official_state_dict(scales)
    config = mapping.convert_config(official, **kwargs)
    assert config["tasks"] == tasks and config.get("task_scales") == task_scales
    model = converted_model(official, **kwargs)
    assert [model.scale(task) for task in tasks] == list(scales)


def test_the_geometry_heads_and_value_range_are_read_from_the_weights():
    official = official_state_dict((3,), n_feats=4, patch_size=8, patch_dim=2, num_layers=3, rgb_range=1)
    config = mapping.convert_config(official, num_attention_heads=4, rgb_range=1.0)
    expected = dict(tasks=["sr_x3"], n_feats=4, image_size=8, patch_size=2, num_hidden_layers=3,
                    num_attention_heads=4, intermediate_size=64, num_head_blocks=2, head_kernel_size=5, rgb_range=1,
                    image_mean=[0.4488, 0.4371, 0.4040], attention_output_bias=False)  # fmt: skip
    assert {key: config[key] for key in expected} == expected
    assert mapping.convert_config(with_out_proj_bias())["attention_output_bias"] is True
    half = {key: value.half() if value.is_floating_point() else value for key, value in official.items()}
    assert mapping.convert_config(half)["rgb_range"] == 1  # the MeanShift held to half precision


def test_a_file_without_the_position_ids_buffer_converts():
    official = _without(official_state_dict((2,)), mapping.POSITION_IDS)
    config, converted, dropped = convert_official(official, num_attention_heads=HEADS)
    assert mapping.POSITION_IDS not in dropped and len(dropped) == 4
    model = converted_model(official)
    assert max(compare_with_original(model.double(), official).values()) <= TOL64


# ---------------------------------------------------------------------------------------------------------------
# fidelity: the converted model against the functional reference of the official forward pass
# ---------------------------------------------------------------------------------------------------------------

LAYOUTS = {
    "x2": lambda: official_state_dict((2,), seed=1),
    "x3": lambda: official_state_dict((3,), seed=2),
    "x4": lambda: official_state_dict((4,), seed=3),
    "derain": lambda: official_state_dict((1,), seed=4),
    "pretrain": lambda: official_state_dict(PRETRAIN, seed=5),
    "out-proj-bias": lambda: with_out_proj_bias(seed=6),
    "rgb-range-1": lambda: official_state_dict((2,), seed=7, rgb_range=1),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_converted_model_computes_the_official_forward_pass_for_every_task(layout):
    official = LAYOUTS[layout]()
    model = converted_model(official, tasks=["derain"] if layout == "derain" else None)
    deltas = compare_with_original(model, official, batch=2)  # restorations and per-patch features, every task
    assert len(deltas) == 2 * len(model.config.tasks)
    scale = model.config.rgb_range / 255
    assert max(deltas.values()) <= TOL32 * scale, deltas
    deltas = compare_with_original(model.double(), official, batch=2, seed=10)
    assert max(deltas.values()) <= TOL64 * scale, deltas


def test_the_patch_features_are_the_official_con_x():
    official = official_state_dict(PRETRAIN, seed=8)
    model = converted_model(official).double()
    x = random_input(2, 12, seed=3, dtype=torch.float64)
    for index, task in enumerate(model.config.tasks):
        with torch.no_grad():
            out = model(x, task=task, output_patch_features=True)
        reconstruction, features = official_forward(official, x, index, num_heads=HEADS, con=True)
        assert out.patch_features.shape == features.shape == (2, 16, 72)
        assert (out.patch_features - features).abs().max() <= 1e-12 * features.abs().max()
        assert (out.reconstruction - reconstruction).abs().max() <= TOL64


def test_the_paper_sized_x2_model_computes_the_official_forward_pass():
    official = official_state_dict((2,), n_feats=64, patch_size=48, patch_dim=3, num_heads=12, num_layers=12)
    config, converted, _ = convert_official(official, file_name="IPT_sr2.pt")  # 12 heads by default
    model = hf_xcv.IPTForImageRestoration(hf_xcv.IPTConfig.from_dict(config))
    model.load_state_dict(converted, strict=True)
    deltas = compare_with_original(model.eval(), official)
    assert max(deltas.values()) <= TOL32, deltas


def test_the_comparison_sees_a_misplaced_weight_but_not_the_head_count():
    """A mapping bug that every shape check lets through (the encoder's two norms exchanged) fails the comparison by
    far. The head count is no shape: the reference runs the converted config's, so a wrong --num_attention_heads
    passes the comparison and yet computes something else than the original with its true heads."""
    official = official_state_dict((2,), seed=1)
    model = converted_model(official)
    state_dict = model.state_dict()
    for n in range(2):
        a, b = f"ipt.body.encoder.{n}.self_attn_layer_norm.weight", f"ipt.body.encoder.{n}.final_layer_norm.weight"
        state_dict[a], state_dict[b] = state_dict[b], state_dict[a]
    swapped = hf_xcv.IPTForImageRestoration(model.config).eval()
    swapped.load_state_dict(state_dict)
    assert compare_with_original(swapped.double(), official)["sr_x2"] > 1e-3
    config, converted, _ = convert_official(official, num_attention_heads=4)
    four = hf_xcv.IPTForImageRestoration(hf_xcv.IPTConfig.from_dict(config)).eval()
    four.load_state_dict(converted)
    assert max(compare_with_original(four.double(), official).values()) <= TOL64
    x = random_input(1, 12, dtype=torch.float64)
    with torch.no_grad():
        ours = four(x).reconstruction
    assert (ours - official_forward(official, x, num_heads=HEADS)).abs().max() > 1e-3


def test_tiled_inference_matches_the_official_chop_where_one_tile_decides():
    """hf_xcv blends tiles with linear ramps, the official forward_chop with its own averaging, so on a larger image
    the two agree only where a single tile decides: the top-left and bottom-right corners of the output, which are
    both the one-tile forward pass of the corner crops."""
    official = official_state_dict((2,), seed=2)
    model = converted_model(official).double()
    x = random_input(2, (30, 41), seed=4, dtype=torch.float64)  # no multiple of the tile or of either stride
    with torch.no_grad():
        ours = model(x).reconstruction
    theirs = official_forward_chop(official, x, num_heads=HEADS)
    assert ours.shape == theirs.shape == (2, 3, 60, 82)
    # hf_xcv's tiles start every 9 columns (overlap 3), the last flush with the end: 0, 9, 18, 27, 29, so the last
    # tile alone covers the last 2 input columns (4 output pixels); the official chop's corner tile covers more
    corner = 4
    top_left = official_forward(official, x[..., :12, :12], num_heads=HEADS)[..., :corner, :corner]
    bottom_right = official_forward(official, x[..., -12:, -12:], num_heads=HEADS)[..., -corner:, -corner:]
    for out in (ours, theirs):
        assert (out[..., :corner, :corner] - top_left).abs().max() <= TOL64
        assert (out[..., -corner:, -corner:] - bottom_right).abs().max() <= TOL64
    for i in range(2):  # the batch is per image in both
        with torch.no_grad():
            alone = model(x[i : i + 1]).reconstruction
        assert (alone - ours[i : i + 1]).abs().max() <= TOL64


# ---------------------------------------------------------------------------------------------------------------
# strictness: each bad source is an error that names the problem, and nothing is written
# ---------------------------------------------------------------------------------------------------------------


def _without(state_dict: dict, *prefixes: str) -> dict:
    return {k: v for k, v in state_dict.items() if not k.startswith(prefixes)}


def _changed(state_dict: dict, key: str, value: torch.Tensor) -> dict:
    return {**state_dict, key: value}


def _x2(**kwargs) -> dict:
    return official_state_dict((2,), **kwargs)


BROKEN = {  # (state dict, extra command-line arguments, file name, message)
    "unknown-key": (
        lambda: {**_x2(), "body.extra.weight": torch.zeros(1)}, [], "IPT_sr2.pt",
        r"1 checkpoint keys have no conversion rule \(first: body\.extra\.weight\)",
    ),
    "missing-key": (
        lambda: _without(_x2(), "body.decoder.layers.1.norm3.bias"), [], "IPT_sr2.pt",
        r"lacks 1 weights.*ipt\.body\.decoder\.1\.final_layer_norm\.bias",
    ),
    "missing-tail-conv": (
        lambda: _without(_x2(), "tail.0.1.bias"), [], "IPT_sr2.pt", r"lacks 1 weights.*tails\.sr_x2\.conv\.bias",
    ),
    "wrong-shape": (
        lambda: _changed(_x2(), "body.mlp_head.0.weight", torch.zeros(288, 36)), [], "IPT_sr2.pt",
        r"shapes do not match.*mlp_head\.fc1\.weight \(converted \[288, 36\], model \[288, 72\]\)",
    ),
    "input-projection-bias": (
        lambda: _changed(_x2(), "body.encoder.layers.0.self_attn.in_proj_bias", torch.zeros(216)), [], "IPT_sr2.pt",
        r"body\.encoder\.layers\.0\.self_attn\.in_proj_bias .*no input projection bias",
    ),
    "non-identity-mean-shift": (
        lambda: _changed(_x2(), "sub_mean.weight", 2 * torch.eye(3).view(3, 3, 1, 1)), [], "IPT_sr2.pt",
        r"sub_mean\.weight .* is not the identity",
    ),
    "mean-shift-of-another-mean": (
        lambda: _changed(_x2(), "sub_mean.bias", -255 * torch.tensor([0.485, 0.456, 0.406])), [], "IPT_sr2.pt",
        r"sub_mean\.bias = .* is not -rgb_range \* the DIV2K mean",
    ),
    "add-mean-disagrees": (
        lambda: _changed(_x2(), "add_mean.bias", mean_shift(1, 1)[1]), [], "IPT_sr2.pt",
        r"add_mean\.bias = .* is not \+255 \* the DIV2K mean",
    ),
    "rgb-range-disagrees": (
        lambda: _x2(), ["--rgb_range", "1"], "IPT_sr2.pt", r"rgb_range=1 disagrees with the checkpoint's MeanShift",
    ),
    "reordered-positions": (
        lambda: _changed(_x2(), mapping.POSITION_IDS, torch.arange(16).flip(0).view(1, 16)), [], "IPT_sr2.pt",
        r"position_ids \[1, 16\] is not \[\[0 \.\. 15\]\]",
    ),
    "queries-not-tasks": (
        lambda: _x2(num_queries=6), [], "IPT_sr2.pt",
        r"body\.query_embed\.weight has 6 rows \(num_queries\) but the checkpoint has 1 tasks",
    ),
    "heads-not-tails": (
        lambda: _without(official_state_dict(PRETRAIN), "head.5."), [], "IPT_pretrain.pt",
        r"5 heads and 6 tails",
    ),
    "wrong-tasks-scales": (
        lambda: official_state_dict(PRETRAIN), ["--tasks", "sr_x3,sr_x2,sr_x4,denoise_30,denoise_50,derain"],
        "IPT_pretrain.pt", r"tasks\[0\] = 'sr_x3' is a task of scale 3, but tail\.0 upsamples x2",
    ),
    "wrong-number-of-tasks": (
        lambda: official_state_dict(PRETRAIN), ["--tasks", "sr_x2,sr_x3"], "IPT_pretrain.pt",
        r"name 2 tasks; the checkpoint has 6 \(tails of scales \[2, 3, 4, 1, 1, 1\]",
    ),
    "ambiguous-scale-1": (
        lambda: official_state_dict((1,)), [], "IPT.pt",
        r"one task of scale 1: denoise_30, denoise_50, derain .* file name 'IPT\.pt' does not say which: .*--tasks",
    ),
    "other-multi-task-layout": (
        lambda: official_state_dict((2, 1)), [], "IPT_mine.pt",
        r"2 tasks with tails of scales \[2, 1\].*name them in order with --tasks",
    ),
    "unknown-upsampler": (
        lambda: _changed(_x2(), "tail.0.0.0.weight", torch.zeros(24, 8, 3, 3)), [], "IPT_sr2.pt",
        r"tail\.0\.0\.0\.weight has 24 output channels",
    ),
    "encoder-deeper-than-decoder": (
        lambda: _without(_x2(), "body.decoder.layers.1."), [], "IPT_sr2.pt",
        r"the encoder has 2 layers and the decoder 1",
    ),
    "gap-in-the-layers": (
        lambda: {k.replace("encoder.layers.1.", "encoder.layers.2."): v for k, v in _x2().items()}, [],
        "IPT_sr2.pt", r"encoder layers body\.encoder\.layers\.N are numbered \[0, 2\]",
    ),
    "heads-do-not-divide": (
        lambda: _x2(), ["--num_attention_heads", "5"], "IPT_sr2.pt", r"not divisible by num_attention_heads=5",
    ),
    "not-ipt": (
        lambda: {"conv.weight": torch.zeros(1)}, [], "IPT_sr2.pt", r"has 'head\.0\.0\.weight'; this one does not",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_state_dict_is_refused_by_name_and_nothing_is_written(tmp_path, case):
    make, args, file_name, message = BROKEN[case]
    torch.save(make(), tmp_path / file_name)
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=message):
        convert_ipt.main(["--input", str(tmp_path / file_name), "--output", str(out), *args])
    assert not out.exists()
    options = dict(zip(args[::2], args[1::2]))
    kwargs = {"file_name": file_name}  # the pure mapping says the same
    if "--tasks" in options:
        kwargs["tasks"] = options["--tasks"].split(",")
    if "--rgb_range" in options:
        kwargs["rgb_range"] = float(options["--rgb_range"])
    kwargs["num_attention_heads"] = int(options.get("--num_attention_heads", 12))
    with pytest.raises((ValueError, CheckpointMismatchError), match=message):
        convert_official(make(), **kwargs)


FILES = {
    "missing": (lambda path: None, r"no such file"),
    "truncated": (
        lambda path: (torch.save(_x2(), path), path.write_bytes(path.read_bytes()[:5000])),
        r"not a readable PyTorch checkpoint \(truncated or corrupt\?\)",
    ),
    "text": (lambda path: path.write_text("not a checkpoint"), r"not a readable PyTorch checkpoint"),
    "wrapped-model": (lambda path: torch.save({"model": _x2(), "epoch": 3}, path), r"not a plain state dict.*'epoch'"),
    "wrapped-state-dict": (lambda path: torch.save({"state_dict": _x2()}, path), r"not a plain state dict"),
    "a-list": (lambda path: torch.save([1, 2], path), r"holds a list, not a state dict"),
    "empty": (lambda path: torch.save({}, path), r"holds an empty dict, not a state dict"),
}


@pytest.mark.parametrize("case", list(FILES))
def test_a_file_that_is_no_state_dict_is_refused_by_name_and_nothing_is_written(tmp_path, case):
    make, message = FILES[case]
    path, out = tmp_path / "IPT_sr2.pt", tmp_path / "out"
    make(path)
    with pytest.raises(SystemExit, match=(re.escape(str(path)) + ".*" if case != "missing" else "") + message):
        convert_ipt.main(["--input", str(path), "--output", str(out)])
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------------------------


def test_the_command_converts_and_verifies_in_a_fresh_process(tmp_path, subprocess_env, repo_root):
    official = official_state_dict(PRETRAIN, seed=9)
    torch.save({f"module.{k}": v for k, v in official.items()}, tmp_path / "IPT_pretrain.pt")  # DataParallel's keys
    out = tmp_path / "ipt-xcv"
    order = "sr_x2,sr_x3,sr_x4,derain,denoise_30,denoise_50"
    result = subprocess.run(
        [sys.executable, "-m", "conversion.ipt", "--input", str(tmp_path / "IPT_pretrain.pt"), "--output", str(out),
         "--tasks", order, "--num_attention_heads", str(HEADS), "--verify"],
        env=subprocess_env, cwd=repo_root, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dropped 5 keys: ['sub_mean.weight', 'sub_mean.bias', 'add_mean.weight'" in result.stdout
    assert "(float64, 0-255 scale): sr_x2 " in result.stdout and "derain " in result.stdout
    worst = float(result.stdout.split("verified: max |delta| = ")[1].split()[0])
    assert worst <= TOL64
    assert sorted(p.name for p in out.iterdir()) == CONVERTED_FILES
    config = json.loads((out / "config.json").read_text())
    assert config["tasks"] == order.split(",") and config["num_attention_heads"] == HEADS
    _, expected, _ = convert_official(official, tasks=order.split(","), num_attention_heads=HEADS)
    assert set(load_file(out / "model.safetensors")) == set(expected)
    processor = AutoImageProcessor.from_pretrained(out)
    assert isinstance(processor, hf_xcv.IPTImageProcessor) and processor.rgb_range == 255
    model = AutoModelForImageToImage.from_pretrained(out).eval()
    assert isinstance(model, hf_xcv.IPTForImageRestoration)
    x = random_input(1, 12, seed=1)
    with torch.no_grad():
        derain = model(x, task="derain").reconstruction
    assert (derain - official_forward(official, x, 3, num_heads=HEADS)).abs().max() <= TOL32  # tail.3 is derain


def test_the_installed_command_writes_the_value_range_and_keeps_an_existing_output(tmp_path, capsys):
    torch.save(official_state_dict((1,), rgb_range=1), tmp_path / "IPT_denoise50.pt")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = ["ipt", "--input", str(tmp_path / "IPT_denoise50.pt"), "--output", str(out), "--num_attention_heads", "3"]
    with pytest.raises(SystemExit) as exit_:
        hf_xcv_convert(args)
    assert exit_.value.code == 2 and "exists and is not empty" in capsys.readouterr().err  # one line, status 2
    assert (out / "keep.txt").read_text() == "mine"
    hf_xcv_convert([*args, "--overwrite", "--verify", "--rgb_range", "1"])
    assert sorted(p.name for p in out.iterdir()) == CONVERTED_FILES
    config = json.loads((out / "config.json").read_text())
    assert config["tasks"] == ["denoise_50"] and config["rgb_range"] == 1
    assert json.loads((out / "preprocessor_config.json").read_text())["rgb_range"] == 1


def test_a_conversion_that_fails_verification_is_deleted(tmp_path, monkeypatch, repo_root):
    torch.save(official_state_dict((4,)), tmp_path / "IPT_sr4.pt")
    out = tmp_path / "out"
    # a mapping bug that every shape check lets through: the encoder's two norms exchanged
    layer = r"body\.encoder\.layers\.(\d+)\."
    swap = [(layer + r"norm1\.(weight|bias)", r"ipt.body.encoder.\1.final_layer_norm.\2"),
            (layer + r"norm2\.(weight|bias)", r"ipt.body.encoder.\1.self_attn_layer_norm.\2")]  # fmt: skip
    monkeypatch.setattr(mapping, "BODY_RULES", swap + mapping.BODY_RULES)
    monkeypatch.syspath_prepend(str(repo_root))  # the checkout's entry point: python -m conversion.ipt
    entry = importlib.import_module("conversion.ipt")
    args = ["--input", str(tmp_path / "IPT_sr4.pt"), "--output", str(out), "--num_attention_heads", str(HEADS)]
    with pytest.raises(SystemExit, match=r"verification failed.*'sr_x4'.*removed"):
        entry.main([*args, "--verify"])
    assert not out.exists()
    monkeypatch.undo()
    entry.main([*args, "--verify"])
    assert (out / "model.safetensors").exists()


def test_float_position_ids_are_refused_by_name(tmp_path):
    official = official_state_dict(PRETRAIN)
    official[mapping.POSITION_IDS] = official[mapping.POSITION_IDS].float()
    with pytest.raises(ValueError, match="position_ids holds torch.float32 values"):
        mapping.check_position_ids(official)
