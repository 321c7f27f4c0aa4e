"""TTSR conversion: official researchmm/TTSR state dicts (TTSR.pt / TTSR-rec.pt layout) onto hf_xcv's names, the
config read from the shapes, strictness (every bad source an error naming the problem, and no output), and fidelity:
the converted model against the functional reference of the official forward pass (``ttsr_reference``), which
reads the official names itself."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from torch.nn import functional as F
from transformers import AutoImageProcessor, AutoModelForImageToImage

import hf_xcv
from hf_xcv.cli import convert_ttsr
from hf_xcv.conversion import CheckpointMismatchError
from hf_xcv.conversion import ttsr as mapping
from hf_xcv.conversion.ttsr_reference import (
    compare_with_original,
    official_state_dict,
    original_forward,
    random_inputs,
    texture_features,
)
from hf_xcv.convert import main as hf_xcv_convert
from hf_xcv.models.ttsr.conversion_ttsr import convert_official
from hf_xcv.presets import preset_config

PAPER = dict(n_feats=64, blocks=(16, 16, 8, 4), channels=(64, 128, 256))
TINY = dict(n_feats=8, blocks=(2, 1, 1, 1), channels=(4, 8, 16))
CONVERTED_FILES = ["config.json", "model.safetensors", "preprocessor_config.json", "xcv_ttsr.py"]  # (+ remote code)
PAPER_PARAMETERS = 6_729_603  # "6.7M"; the official count (research notes: 6.73M saved) adds the 12 MeanShift numbers
TOL64 = 1e-12  # float64 rounding: measured <= 3e-15
TOL32 = 1e-5  # float32 rounding through 40+ convolutions: measured <= 1e-6
MARGIN32 = 2e-6  # the float32 checks use inputs whose best reference patch wins by more than this (no near-tie)


# ---------------------------------------------------------------------------------------------------------------
# official-layout state dicts, built from the official module structure (model/MainNet.py, model/LTE.py)
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> dict[str, torch.Tensor]:
    return official_state_dict(**TINY)


def converted_model(state_dict: dict[str, torch.Tensor], **overrides) -> hf_xcv.TTSRForReferenceSuperResolution:
    config, converted, _ = convert_official(state_dict)
    model = hf_xcv.TTSRForReferenceSuperResolution(hf_xcv.TTSRConfig.from_dict({**config, **overrides}))
    model.load_state_dict(converted, strict=True)
    return model.eval()


def relevance_margin(state_dict: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]) -> float:
    """The smallest gap, over every query, between its best and second-best reference patch (float64, dense)."""
    inputs = {k: v.double() for k, v in inputs.items()}
    queries = F.unfold(texture_features(state_dict, inputs["upsampled_pixel_values"])[2], 3, padding=1)
    keys = F.unfold(texture_features(state_dict, inputs["degraded_reference_pixel_values"])[2], 3, padding=1)
    relevance = torch.bmm(F.normalize(keys, dim=1).transpose(1, 2), F.normalize(queries, dim=1))
    top = relevance.topk(2, dim=1).values  # (B, 2, queries)
    return (top[:, 0] - top[:, 1]).min().item()


# ---------------------------------------------------------------------------------------------------------------
# layout and config
# ---------------------------------------------------------------------------------------------------------------


def test_the_paper_layout_has_316_keys_and_converts_to_the_6_7m_paper_model():
    official = official_state_dict(**PAPER)
    assert len(official) == 316
    config, converted, dropped = convert_official(official)
    assert config == {
        "model_type": "xcv_ttsr",
        "architectures": ["TTSRForReferenceSuperResolution"],
        "n_feats": 64,
        "num_res_blocks": "16+16+8+4",
        "texture_channels": [64, 128, 256],
    }
    assert sorted(dropped) == ["LTE.sub_mean.bias", "LTE.sub_mean.weight"]
    assert len(converted) == 314 and sum(t.numel() for t in converted.values()) == PAPER_PARAMETERS
    assert sum(t.numel() for t in official.values()) == PAPER_PARAMETERS + 12
    paper = preset_config("ttsr")
    ours = hf_xcv.TTSRConfig.from_dict(config)
    for field in ("n_feats", "res_blocks", "texture_channels", "res_scale", "upscale"):
        assert getattr(ours, field) == getattr(paper, field), field
    with torch.device("meta"):
        model = hf_xcv.TTSRForReferenceSuperResolution(ours)
    model.load_state_dict(converted, strict=True, assign=True)


def test_names_map_one_to_one_and_keep_the_tensors(tiny):
    converted, dropped = mapping.convert_state_dict(tiny)
    assert len(converted) + len(dropped) == len(tiny)
    expected = {
        "LTE.slice1.0.weight": "ttsr.texture_extractor.slice1.0.weight",
        "LTE.slice2.5.bias": "ttsr.texture_extractor.slice2.5.bias",
        "LTE.slice3.10.weight": "ttsr.texture_extractor.slice3.10.weight",
        "MainNet.SFE.RBs.1.conv1.weight": "ttsr.main_network.sfe.blocks.1.conv1.weight",
        "MainNet.SFE.conv_tail.bias": "ttsr.main_network.sfe.conv_tail.bias",
        "MainNet.RB11.0.conv2.bias": "ttsr.main_network.blocks11.0.conv2.bias",
        "MainNet.RB22.0.conv1.weight": "ttsr.main_network.blocks22.0.conv1.weight",
        "MainNet.RB33.0.conv2.weight": "ttsr.main_network.blocks33.0.conv2.weight",
        "MainNet.conv33_head.weight": "ttsr.main_network.conv33_head.weight",
        "MainNet.ex12.conv_merge2.weight": "ttsr.main_network.ex12.conv_merge2.weight",
        "MainNet.ex123.conv31_2.bias": "ttsr.main_network.ex123.conv31_2.bias",
        "MainNet.merge_tail.conv_merge.weight": "ttsr.main_network.merge_tail.conv_merge.weight",
        "MainNet.merge_tail.conv_tail1.weight": "head.conv_tail1.weight",
        "MainNet.merge_tail.conv_tail2.bias": "head.conv_tail2.bias",
    }
    for official, ours in expected.items():
        assert converted[ours] is tiny[official]
    model = hf_xcv.TTSRForReferenceSuperResolution(hf_xcv.TTSRConfig.from_dict(mapping.convert_config(tiny)))
    assert set(model.state_dict()) == set(converted)


def test_data_parallel_prefix_and_the_keys_the_trainer_drops_are_handled(tiny):
    raw = {f"module.{k}": v for k, v in tiny.items()}  # a DataParallel model's state_dict() before the trainer's filter
    raw.update(
        {f"module.LTE_copy.{k.removeprefix('LTE.')}": v.clone() for k, v in tiny.items() if k.startswith("LTE.")}
    )
    raw["module.SearchNet.conv.weight"] = torch.zeros(2, 2, 1, 1)
    assert mapping.convert_config(raw) == mapping.convert_config(tiny)
    converted, dropped = mapping.convert_state_dict(raw)
    plain, _ = mapping.convert_state_dict(tiny)
    assert converted.keys() == plain.keys() and all(converted[k] is plain[k] for k in plain)
    assert "LTE_copy.slice3.10.weight" in dropped and "LTE_copy.sub_mean.bias" in dropped
    assert "SearchNet.conv.weight" in dropped and "LTE.sub_mean.weight" in dropped
    assert len(dropped) == 2 + 12 + 1  # MeanShift, the copy (5 convolutions and its MeanShift), SearchNet
    with pytest.raises(ValueError, match=r"holds 'MainNet\.conv12\.bias' twice"):
        mapping.convert_state_dict({**tiny, "module.MainNet.conv12.bias": tiny["MainNet.conv12.bias"]})


@pytest.mark.parametrize(
    ("blocks", "expected"), [((0, 2, 1, 3), "0+2+1+3"), ((3, 1, 2, 1), "3+1+2+1")], ids=["no-sfe-blocks", "3+1+2+1"]
)
def test_the_config_is_read_from_the_shapes(blocks, expected):
    official = official_state_dict(n_feats=6, blocks=blocks, channels=(5, 7, 9))
    config = mapping.convert_config(official)
    assert config["num_res_blocks"] == expected and config["n_feats"] == 6 and config["texture_channels"] == [5, 7, 9]
    converted_model(official)  # strict load


# ---------------------------------------------------------------------------------------------------------------
# fidelity: the converted model against the functional reference of the official forward pass
# ---------------------------------------------------------------------------------------------------------------

SIZES = {  # batch, LR (h, w), reference (H, W), a seed whose inputs have no near-tie (relevance margin >= 5e-6)
    "10x12-ref48x40": (1, (10, 12), (48, 40), 0),
    "batch2-7x5-ref24x36": (2, (7, 5), (24, 36), 0),
    "smallest-3x3-ref12x12": (1, (3, 3), (12, 12), 0),
    "batch2-12x9-ref64x52": (2, (12, 9), (64, 52), 2),
}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("chunk", [4096, 64], ids=["one-block", "blocks-of-64"])
def test_the_converted_model_computes_the_official_forward_pass_in_float64(tiny, size, chunk):
    batch, lr_size, ref_size, seed = SIZES[size]
    model = converted_model(tiny, relevance_chunk_size=chunk).double()
    inputs = random_inputs(batch, lr_size, ref_size, seed=seed, dtype=torch.float64)
    deltas = compare_with_original(model, tiny, inputs)
    assert max(deltas.values()) <= TOL64, deltas


@pytest.mark.parametrize("size", list(SIZES))
def test_the_converted_model_computes_the_official_forward_pass_in_float32(tiny, size):
    batch, lr_size, ref_size, seed = SIZES[size]
    inputs = random_inputs(batch, lr_size, ref_size, seed=seed)
    # hf_xcv computes the relevances in blocks and recomputes S from the matched pair: float32 rounding (S differs by
    # <= 4e-7) could flip an arg-max only between two reference patches about that close, which these inputs lack
    assert relevance_margin(tiny, inputs) > MARGIN32
    model = converted_model(tiny)
    deltas = compare_with_original(model, tiny, inputs)
    assert max(deltas.values()) <= TOL32, deltas
    with torch.no_grad():
        sr = model(**inputs).reconstruction
    assert sr.std() > 0.05 and (sr.abs() == 1).float().mean() < 0.01  # not degenerate, not clamped away


def test_the_paper_sized_model_computes_the_official_forward_pass():
    official = official_state_dict(**PAPER, seed=3)
    model = converted_model(official)
    inputs = random_inputs(1, (8, 8), (32, 32), seed=0)
    assert relevance_margin(official, inputs) > MARGIN32
    assert max(compare_with_original(model, official, inputs).values()) <= TOL32
    inputs = {k: v.double() for k, v in inputs.items()}
    deltas = compare_with_original(model.double(), official, inputs)
    assert max(deltas.values()) <= TOL64, deltas


def test_every_weight_gets_the_official_gradient(tiny):
    """Training follows the original too: the gradient of a loss on the reconstruction, S and every T reaches each
    weight as through the official graph (the extractor through S, the max's arg-max entry, and through T)."""
    official = {k: v.double().requires_grad_(True) for k, v in tiny.items()}
    model = converted_model(tiny).double().train()
    inputs = random_inputs(2, (7, 5), (24, 36), seed=0, dtype=torch.float64)
    target = torch.rand(2, 3, 28, 20, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2 - 1

    def loss(sr, soft, t3, t2, t1):
        return (sr - target).abs().mean() + soft.square().mean() + t3.mean() + t2.square().mean() + t1.abs().mean()

    out = model(**inputs)
    loss(out.reconstruction, out.soft_attention, *out.transferred_textures).backward()
    names = ("pixel_values", "upsampled_pixel_values", "reference_pixel_values", "degraded_reference_pixel_values")
    loss(*original_forward(official, *(inputs[name] for name in names))).backward()
    renamed, _ = mapping.convert_state_dict(official)  # the same tensors under hf_xcv's names
    params = dict(model.named_parameters())
    assert params.keys() == renamed.keys()
    for name, tensor in renamed.items():
        scale = tensor.grad.abs().max()
        assert scale > 0, name
        assert (params[name].grad - tensor.grad).abs().max() <= 1e-10 * scale, name


def test_a_misplaced_weight_is_seen_by_the_reference(tiny):
    """The comparison is sensitive: the two x2-stage branches' blocks swapped (same shapes) fail it by far."""
    swapped = dict(tiny)
    for key in [k for k in tiny if k.startswith("MainNet.RB21.")]:
        twin = key.replace("RB21", "RB22")
        swapped[key], swapped[twin] = tiny[twin], tiny[key]
    inputs = random_inputs(dtype=torch.float64)
    deltas = compare_with_original(converted_model(swapped).double(), tiny, inputs)
    assert deltas["reconstruction"] > 1e-3 and deltas["S"] < TOL64


# ---------------------------------------------------------------------------------------------------------------
# strictness: each bad source is an error that names the problem, and nothing is written
# ---------------------------------------------------------------------------------------------------------------


def _reshaped(state_dict: dict, key: str, shape: tuple) -> dict:
    return {**state_dict, key: torch.zeros(shape)}


def _without(state_dict: dict, *keys: str) -> dict:
    return {k: v for k, v in state_dict.items() if k not in keys}


BROKEN = {
    "unknown-key": (lambda sd: {**sd, "MainNet.conv99.weight": torch.zeros(1)}, r"no conversion rule.*MainNet\.conv99"),
    "missing-key": (
        lambda sd: _without(sd, "MainNet.RB22.0.conv2.bias"),
        r"lacks 1 weights.*ttsr\.main_network\.blocks22\.0\.conv2\.bias",
    ),
    "missing-head": (
        lambda sd: _without(sd, "MainNet.merge_tail.conv_tail2.bias"),
        r"lacks 1 weights.*head\.conv_tail2",
    ),
    "branches-of-other-depths": (
        lambda sd: _without(sd, *[k for k in sd if k.startswith("MainNet.RB32.")]),
        r"MainNet\.RB32 has 0 residual blocks and MainNet\.RB31 1",
    ),
    "gap-in-the-blocks": (
        lambda sd: {k.replace("SFE.RBs.1.", "SFE.RBs.2."): v for k, v in sd.items()},
        r"MainNet\.SFE\.RBs\.N are numbered \[0, 2\]",
    ),
    "wrong-shape": (
        lambda sd: _reshaped(sd, "MainNet.ex123.conv32.weight", (8, 8, 1, 1)),
        r"shapes do not match.*ex123\.conv32\.weight \(converted \[8, 8, 1, 1\], model \[8, 8, 3, 3\]\)",
    ),
    "modified-mean-shift": (
        lambda sd: {**sd, "LTE.sub_mean.bias": sd["LTE.sub_mean.bias"] + 0.01},
        r"LTE\.sub_mean\.bias .* is not the ImageNet normalisation",
    ),
    "mean-shift-for-0-255": (  # the original's rgb_range=255: another normalisation
        lambda sd: {**sd, "LTE.sub_mean.weight": sd["LTE.sub_mean.weight"] / 255},
        r"LTE\.sub_mean\.weight .* is not the ImageNet normalisation",
    ),
    "no-mean-shift": (lambda sd: _without(sd, "LTE.sub_mean.weight"), r"lacks \['LTE\.sub_mean\.weight'\]"),
    "not-ttsr": (
        lambda sd: {"conv.weight": torch.zeros(1)},
        r"has 'MainNet\.SFE\.conv_head\.weight'; this one does not",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_state_dict_is_refused_by_name_and_nothing_is_written(tiny, tmp_path, case):
    change, message = BROKEN[case]
    torch.save(change(tiny), tmp_path / "broken.pt")
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=message):
        convert_ttsr.main(["--input", str(tmp_path / "broken.pt"), "--output", str(out)])
    assert not out.exists()
    with pytest.raises((ValueError, CheckpointMismatchError), match=message):  # the pure mapping says the same
        convert_official(change(tiny))


def _truncated(path, tiny, legacy=False):
    torch.save(tiny, path, _use_new_zipfile_serialization=not legacy)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


FILES = {
    "missing": (lambda path, sd: None, r"no such file"),
    "truncated": (_truncated, r"not a readable PyTorch checkpoint \(truncated or corrupt\?\)"),
    "truncated-legacy-format": (
        lambda path, sd: _truncated(path, sd, legacy=True),
        r"not a readable PyTorch checkpoint \(truncated or corrupt\?\)",
    ),
    "text": (lambda path, sd: path.write_text("not a checkpoint"), r"not a readable PyTorch checkpoint"),
    "wrapped-model": (lambda path, sd: torch.save({"model": sd, "epoch": 3}, path), r"not a plain state dict.*'epoch'"),
    "wrapped-state-dict": (lambda path, sd: torch.save({"state_dict": sd}, path), r"not a plain state dict"),
    "a-list": (lambda path, sd: torch.save(list(sd.values()), path), r"holds a list, not a state dict"),
    "empty": (lambda path, sd: torch.save({}, path), r"holds an empty dict, not a state dict"),
}


@pytest.mark.parametrize("case", list(FILES))
def test_a_file_that_is_no_state_dict_is_refused_by_name_and_nothing_is_written(tiny, tmp_path, case):
    make, message = FILES[case]
    path, out = tmp_path / "TTSR.pt", tmp_path / "out"
    make(path, tiny)
    with pytest.raises(SystemExit, match=(re.escape(str(path)) + ".*" if case != "missing" else "") + message):
        convert_ttsr.main(["--input", str(path), "--output", str(out)])
    assert not out.exists()


def test_an_existing_output_is_kept_unless_overwrite(tiny, tmp_path):
    torch.save(tiny, tmp_path / "TTSR.pt", _use_new_zipfile_serialization=False)  # the pre-1.6 format reads too
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit, match="exists and is not empty"):
        convert_ttsr.main(["--input", str(tmp_path / "TTSR.pt"), "--output", str(out)])
    assert (out / "keep.txt").read_text() == "mine"
    convert_ttsr.main(["--input", str(tmp_path / "TTSR.pt"), "--output", str(out), "--overwrite"])
    assert sorted(p.name for p in out.iterdir()) == CONVERTED_FILES


def test_a_half_precision_checkpoint_converts_and_the_tolerance_must_be_positive(tiny, tmp_path, capsys):
    half = {key: value.half() for key, value in tiny.items()}  # its MeanShift holds the constants to ~1e-3
    config, converted, _ = convert_official(half)
    assert converted["head.conv_tail1.weight"].dtype == torch.float16
    torch.save(half, tmp_path / "TTSR.pt")
    with pytest.raises(SystemExit):
        convert_ttsr.main(["--input", str(tmp_path / "TTSR.pt"), "--output", str(tmp_path / "o"), "--tolerance", "-1"])
    assert "--tolerance must be a positive number" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a file converter: no Hub revision to choose
        convert_ttsr.main(["--input", str(tmp_path / "TTSR.pt"), "--output", str(tmp_path / "o"), "--revision", "v1"])


# ---------------------------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------------------------


def test_the_command_converts_and_verifies_in_a_fresh_process(tiny, tmp_path, subprocess_env):
    raw = {f"module.{k}": v for k, v in tiny.items()}  # as a DataParallel run would have saved it
    torch.save(raw, tmp_path / "TTSR.pt")
    out = tmp_path / "ttsr-xcv"
    result = subprocess.run(
        [sys.executable, "-m", "hf_xcv.convert", "ttsr", "--input", str(tmp_path / "TTSR.pt"), "--output", str(out),
         "--verify"],
        env=subprocess_env, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dropped 2 keys: ['LTE.sub_mean.weight', 'LTE.sub_mean.bias']" in result.stdout
    assert "(float64): reconstruction" in result.stdout and "verified: max |delta|" in result.stdout
    worst = float(result.stdout.split("verified: max |delta| = ")[1].split()[0])
    assert worst <= TOL64
    assert sorted(p.name for p in out.iterdir()) == CONVERTED_FILES
    assert json.loads((out / "config.json").read_text())["num_res_blocks"] == "2+1+1+1"
    assert set(load_file(out / "model.safetensors")) == set(mapping.convert_state_dict(tiny)[0])
    processor = AutoImageProcessor.from_pretrained(out)
    assert isinstance(processor, hf_xcv.TTSRImageProcessor)
    assert processor.to_dict() == hf_xcv.TTSRImageProcessor().to_dict()
    model = AutoModelForImageToImage.from_pretrained(out).eval()
    assert isinstance(model, hf_xcv.TTSRForReferenceSuperResolution)
    inputs = random_inputs(2, (6, 7), (28, 32), seed=0)
    assert relevance_margin(tiny, inputs) > MARGIN32
    assert max(compare_with_original(model, tiny, inputs).values()) <= TOL32


def test_a_conversion_that_fails_verification_is_deleted(tiny, tmp_path, monkeypatch, repo_root):
    torch.save(tiny, tmp_path / "TTSR.pt")
    out = tmp_path / "out"
    # a mapping bug that every shape check lets through: the x2 stage's two branches exchanged
    swap = [(r"MainNet\.RB21\.(\d+)\.(conv[12])\.(weight|bias)", r"ttsr.main_network.blocks22.\1.\2.\3"),
            (r"MainNet\.RB22\.(\d+)\.(conv[12])\.(weight|bias)", r"ttsr.main_network.blocks21.\1.\2.\3")]  # fmt: skip
    monkeypatch.setattr(mapping, "RULES", swap + mapping.RULES)
    monkeypatch.syspath_prepend(str(repo_root))  # the checkout's entry point: python -m conversion.ttsr
    entry = importlib.import_module("conversion.ttsr")
    with pytest.raises(SystemExit, match=r"verification failed.*'reconstruction'.*removed"):
        entry.main(["--input", str(tmp_path / "TTSR.pt"), "--output", str(out), "--verify"])
    assert not out.exists()
    monkeypatch.undo()
    hf_xcv_convert(["ttsr", "--input", str(tmp_path / "TTSR.pt"), "--output", str(out)])  # the installed command
    assert (out / "model.safetensors").exists()
