"""Deformable DETR conversion: the original fundamentalvision/Deformable-DETR layout and transformers' (on-disk v4,
in-memory v5, timm backbone) onto hf_xcv's names, strictness, and parity with transformers'
DeformableDetrForObjectDetection for the base, box-refinement and two-stage models."""

from __future__ import annotations

import argparse
import importlib
import json
import re

import pytest
import torch
import transformers
from detection_testing import assert_same_detections, padded_batch, torchvision_names
from detection_testing import original_layout as detr_original_layout
from safetensors.torch import load_file
from transformers import ResNetConfig

import hf_xcv
from hf_xcv.cli import convert_deformable_detr
from hf_xcv.conversion import deformable_detr as mapping
from hf_xcv.convert import main as hf_xcv_convert

RESNET = dict(
    out_features=["stage2", "stage3", "stage4"],
    depths=[1, 1, 1, 1],
    hidden_sizes=[16, 32, 64, 128],
    embedding_size=16,
    layer_type="basic",
)
SIZES = dict(
    d_model=32,  # GroupNorm(32, d_model) after each input projection
    encoder_layers=2,
    decoder_layers=3,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_n_points=2,
    decoder_n_points=3,
    num_queries=5,
    two_stage_num_proposals=5,
    num_labels=3,
)
VARIANTS = {
    "base": {},
    "box_refine": {"with_box_refine": True},
    "two_stage": {"with_box_refine": True, "two_stage": True},
}


def randomize(model: torch.nn.Module, seed: int = 0) -> None:
    """Every weight and BatchNorm statistic drawn anew from a seeded generator: transformers' init leaves heads
    and offsets degenerate (zero sampling offsets, equal heads), which would hide a misplaced weight. Norms get
    scales near 1 and small shifts; the sampling offsets reach a few cells."""
    generator = torch.Generator().manual_seed(seed)

    def draw(tensor: torch.Tensor, std: float, mean: float = 0.0) -> None:
        tensor.copy_(mean + std * torch.randn(tensor.shape, generator=generator))

    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            norm = re.search(r"(norm|normalization|input_proj\.\d+\.1)\.", name)
            if name.endswith("running_var") or (norm and name.endswith("weight")):
                tensor.copy_(torch.rand(tensor.shape, generator=generator) + 0.5)
            elif name.endswith("running_mean") or (norm and name.endswith("bias")):
                draw(tensor, 0.1)
            elif "sampling_offsets" in name:
                draw(tensor, 1.0 if name.endswith("bias") else 0.05)
            elif tensor.is_floating_point() and tensor.dim() >= 2:
                draw(tensor, tensor[0].numel() ** -0.5)
            elif tensor.is_floating_point():
                draw(tensor, 0.2)


def transformers_detector(variant: str, seed: int = 0, **overrides) -> transformers.DeformableDetrForObjectDetection:
    config = transformers.DeformableDetrConfig(
        **{"backbone_config": ResNetConfig(**RESNET), **SIZES, **VARIANTS[variant], **overrides}
    )
    model = transformers.DeformableDetrForObjectDetection(config).eval()
    randomize(model, seed)
    return model


def original_like(variant: str, seed: int = 0, **overrides) -> transformers.DeformableDetrForObjectDetection:
    """transformers' detector with the original's heads: one shared without box refinement, independent ones with
    it (transformers ties them by default, research D10). Untied, transformers also refines the boxes with copies
    of the heads (``model.decoder.bbox_embed``); the original uses the heads themselves, so the copies are set equal."""
    model = transformers_detector(variant, seed, tie_word_embeddings=variant == "base", **overrides)
    for name in ("bbox_embed", "class_embed"):
        if getattr(model.model.decoder, name, None) is not None:
            getattr(model.model.decoder, name).load_state_dict(getattr(model, name).state_dict())
    return model


@pytest.fixture(scope="module", params=list(VARIANTS))
def theirs(request) -> transformers.DeformableDetrForObjectDetection:
    """transformers' detector with its default (tied) heads, per variant."""
    return transformers_detector(request.param)


def original_layout(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The fundamentalvision/Deformable-DETR state dict of the same weights (the inverse of the conversion): DETR's
    original layout (torchvision backbone names, ``transformer.`` layers with numbered norms, fused self-attention,
    ``linear1``/``linear2``, ``query_embed``), then what Deformable-DETR names otherwise: the decoder's norm1 follows
    the cross-attention (``cross_attn``) and norm2 the self-attention, the transformer holds the level embedding,
    the reference points, the two-stage modules and the decoder's aliases of the heads."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in detr_original_layout(model).items():
        if match := re.fullmatch(r"(transformer\.decoder\.layers\.\d+\.)norm([12])\.(.+)", key):
            key = f"{match.group(1)}norm{3 - int(match.group(2))}.{match.group(3)}"
        key = key.replace(".multihead_attn.", ".cross_attn.").replace("model.input_proj.", "input_proj.")
        out[
            re.sub(r"^model\.(level_embed|reference_points|enc_output|pos_trans|decoder\.)", r"transformer.\1", key)
        ] = tensor
    return out


# ---------------------------------------------------------------------------------------------------------------
# key level
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_original_layout_maps_onto_the_same_weights_as_transformers(variant):
    theirs = original_like(variant)
    original = original_layout(theirs)
    names = {"input_proj.3.1.weight", "transformer.level_embed", "backbone.0.body.layer2.0.bn1.running_var"}
    names |= {
        "transformer.decoder.layers.2.cross_attn.sampling_offsets.bias",
        "transformer.encoder.layers.1.norm2.bias",
    }
    names |= {"transformer.decoder.layers.0.self_attn.in_proj_weight", "transformer.decoder.layers.0.norm3.weight"}
    names |= {"two_stage": {"transformer.enc_output.weight", "transformer.decoder.class_embed.3.bias"}}.get(
        variant, set()
    )
    names |= {"query_embed.weight", "transformer.reference_points.weight"} if variant != "two_stage" else set()
    names |= {"transformer.decoder.bbox_embed.2.layers.2.bias"} if variant != "base" else set()
    assert names <= original.keys()
    expected, _ = mapping.convert_state_dict(theirs.state_dict(), theirs.config.to_dict())
    config, converted, dropped = mapping.convert_official(original, num_heads=4, num_queries=5)
    assert converted.keys() == expected.keys()
    assert all(torch.equal(converted[k], expected[k]) for k in expected)
    heads = mapping.num_heads_of(config)
    assert heads == {"base": 1, "box_refine": 3, "two_stage": 4}[variant]
    assert sorted(k for k in converted if k.endswith("bias") and k.startswith("class_embed")) == [
        f"class_embed.{j}.bias" for j in range(heads)
    ]
    assert not any(".decoder.class_embed" in k or ".decoder.bbox_embed" in k for k in converted)
    assert all(k.startswith(("transformer.decoder.", "class_embed.", "bbox_embed.")) for k in dropped)
    assert (config["with_box_refine"], config["two_stage"]) == (variant != "base", variant == "two_stage")
    assert (config["encoder_n_points"], config["decoder_n_points"], config["num_feature_levels"]) == (2, 3, 4)
    assert config["backbone_config"]["out_features"] == RESNET["out_features"]
    assert config["backbone_config"]["depths"] == RESNET["depths"]
    assert config["num_labels"] == 3 and config["d_model"] == 32 and config["num_queries"] == 5
    assert config["decoder_layers"] == 3 and config["encoder_ffn_dim"] == 64


def test_decoder_norms_follow_the_original_module_order_and_in_proj_splits_into_thirds():
    original = original_layout(transformers_detector("base"))
    _, converted, _ = mapping.convert_official(original, num_heads=4)
    layer, out = "transformer.decoder.layers.1.", "model.decoder.layers.1."
    assert converted[out + "encoder_attn_layer_norm.weight"] is original[layer + "norm1.weight"]  # after cross
    assert converted[out + "self_attn_layer_norm.weight"] is original[layer + "norm2.weight"]  # after self
    assert converted[out + "final_layer_norm.bias"] is original[layer + "norm3.bias"]
    encoder = "transformer.encoder.layers.0."
    assert converted["model.encoder.layers.0.self_attn_layer_norm.bias"] is original[encoder + "norm1.bias"]
    assert converted["model.encoder.layers.0.final_layer_norm.bias"] is original[encoder + "norm2.bias"]
    fused, bias = original[layer + "self_attn.in_proj_weight"], original[layer + "self_attn.in_proj_bias"]
    for index, name in enumerate("qkv"):
        torch.testing.assert_close(
            converted[f"{out}self_attn.{name}_proj.weight"], fused[32 * index : 32 * (index + 1)]
        )
        torch.testing.assert_close(converted[f"{out}self_attn.{name}_proj.bias"], bias[32 * index : 32 * (index + 1)])
    assert converted[out + "self_attn.o_proj.weight"] is original[layer + "self_attn.out_proj.weight"]
    assert converted[out + "mlp.fc1.weight"] is original[layer + "linear1.weight"]


def test_original_conversion_is_strict():
    base = original_layout(transformers_detector("base"))
    with pytest.raises(ValueError, match=r"no conversion rule.*transformer\.decoder\.layers\.0\.extra\.weight"):
        mapping.convert_official({**base, "transformer.decoder.layers.0.extra.weight": torch.zeros(1)}, num_heads=4)
    with pytest.raises(ValueError, match="have no norm4"):
        mapping.convert_official({**base, "transformer.decoder.layers.0.norm4.weight": torch.zeros(1)}, num_heads=4)
    with pytest.raises(ValueError, match="linear1"):
        mapping.convert_official({k: v for k, v in base.items() if "encoder.layers.0.linear1" not in k}, num_heads=4)
    shared = {**base, "class_embed.2.bias": base["class_embed.2.bias"] + 1}  # a copy of the shared head differs
    with pytest.raises(ValueError, match=r"class_embed\.2\.bias differs from class_embed\.0\.bias"):
        mapping.convert_official(shared, num_heads=4)
    with pytest.raises(ValueError, match="--num_heads"):
        mapping.convert_official(base, num_heads=5)
    refine = original_layout(original_like("box_refine"))
    alias = "transformer.decoder.bbox_embed.1.layers.2.weight"
    with pytest.raises(ValueError, match=re.escape(alias) + r" differs from bbox_embed\.1\.layers\.2\.weight"):
        mapping.convert_official({**refine, alias: refine[alias] * 2}, num_heads=4)
    with pytest.raises(ValueError, match=r"lacks 1 weights of the class_embed heads.*class_embed\.1\.weight"):
        mapping.convert_official({k: v for k, v in refine.items() if k != "class_embed.1.weight"}, num_heads=4)
    with pytest.raises(ValueError, match="has 3 bbox_embed heads.*bbox_embed.3"):
        mapping.convert_official({**refine, "bbox_embed.3.layers.0.bias": torch.zeros(32)}, num_heads=4)
    detr = {"input_proj.weight": torch.zeros(32, 128, 1, 1), **base}
    with pytest.raises(ValueError, match="DETR checkpoint, not a Deformable DETR"):
        mapping.convert_official(detr)


def test_transformers_on_disk_and_in_memory_names_convert_alike(theirs, tmp_path):
    config = theirs.config.to_dict()
    in_memory, _ = mapping.convert_state_dict(theirs.state_dict(), config)
    theirs.save_pretrained(tmp_path)
    on_disk_state = load_file(tmp_path / "model.safetensors")
    assert any(".fc1." in k for k in on_disk_state) and not any(".mlp." in k for k in on_disk_state)  # v4 names
    on_disk, dropped = mapping.convert_state_dict(on_disk_state, json.load(open(tmp_path / "config.json")))
    assert on_disk.keys() == in_memory.keys() and all(torch.equal(on_disk[k], in_memory[k]) for k in in_memory)
    assert not any("num_batches_tracked" in k or "decoder.bbox_embed" in k for k in on_disk)
    bare = transformers.DeformableDetrModel(theirs.config).state_dict()  # no prefix, no heads
    converted, _ = mapping.convert_state_dict(bare, config)
    assert converted.keys() == {k.removeprefix("model.") for k in in_memory if k.startswith("model.")}


def test_tied_class_heads_are_replicated_and_untied_ones_kept():
    """transformers ties the box-refined class heads by default (research D10) and saves one; hf_xcv's model
    holds one per decoder layer."""
    tied = transformers_detector("box_refine")
    converted, _ = mapping.convert_state_dict(
        {k: v for k, v in tied.state_dict().items() if not re.match(r"class_embed\.[1-9]", k)}, tied.config.to_dict()
    )
    assert all(torch.equal(converted[f"class_embed.{j}.weight"], tied.class_embed[0].weight) for j in range(3))
    untied = original_like("box_refine")
    config = untied.config.to_dict()
    converted, _ = mapping.convert_state_dict(untied.state_dict(), config)
    assert not torch.equal(converted["class_embed.1.weight"], converted["class_embed.2.weight"])
    with pytest.raises(ValueError, match=r"lacks 1 weights.*class_embed\.1\.bias"):
        mapping.convert_state_dict({k: v for k, v in untied.state_dict().items() if k != "class_embed.1.bias"}, config)


def test_timm_backbone_and_config_conversion():
    """A timm ResNet (torchvision names) maps onto transformers' ResNet; configs keep the architecture (the stages
    the weights were computed with) and leave the training recipe to hf_xcv's defaults."""
    theirs = transformers_detector("base")
    config = theirs.config.to_dict()
    timm_layout = torchvision_names(theirs.state_dict(), "model.backbone.model.", "model.backbone.conv_encoder.model.")
    assert "model.backbone.conv_encoder.model.layer2.0.bn2.running_var" in timm_layout
    converted, _ = mapping.convert_state_dict(timm_layout, config)
    expected, _ = mapping.convert_state_dict(theirs.state_dict(), config)
    assert converted.keys() == expected.keys()
    timm = mapping.convert_config({"model_type": "deformable_detr", "backbone": "resnet101", "auxiliary_loss": False})
    assert timm["backbone_config"]["depths"] == [3, 4, 23, 3]
    assert timm["backbone_config"]["out_features"] == ["stage2", "stage3", "stage4"]
    assert "auxiliary_loss" not in timm
    single = mapping.convert_config({"model_type": "deformable_detr", "num_feature_levels": 1})
    assert single["backbone_config"]["out_features"] == ["stage4"]
    # transformers' ResNet default without timm reads C5 alone (research D9): the weights are for that
    assert mapping.convert_config({"model_type": "deformable_detr", "use_timm_backbone": False})["backbone_config"][
        "out_features"
    ] == ["stage4"]
    ours = mapping.convert_config(config)
    assert ours["backbone_config"]["out_features"] == RESNET["out_features"] and ours["decoder_n_points"] == 3
    for recipe in ("auxiliary_loss", "class_cost", "attention_dropout", "activation_dropout", "tie_word_embeddings"):
        assert recipe not in ours
    with pytest.raises(ValueError, match="model_type 'deformable_detr'"):
        mapping.convert_config({"model_type": "detr"})


# ---------------------------------------------------------------------------------------------------------------
# parity with transformers' detector
# ---------------------------------------------------------------------------------------------------------------


def detections(model: torch.nn.Module, transformers_model: bool = False):
    pixels, mask = padded_batch()  # 128x96 and 64x64, padded bottom and right
    with torch.no_grad():
        return model(pixel_values=pixels, pixel_mask=mask) if transformers_model else model.eval()(pixels, mask)


def test_transformers_folder_loads_by_conversion_and_converts_with_the_cli(theirs, tmp_path, capsys):
    theirs.save_pretrained(tmp_path / "theirs")  # transformers writes the v4 names and each tied head once
    expected = detections(theirs, transformers_model=True)
    assert expected.pred_boxes.std() > 0.05 and expected.logits.std() > 0.1  # not degenerate
    ours = hf_xcv.DeformableDetrForObjectDetection.from_pretrained(tmp_path / "theirs")
    assert_same_detections(expected, detections(ours))
    assert ours.config.auxiliary_loss and ours.config.class_cost == 2 and ours.config.attention_dropout == 0.1
    out = tmp_path / "converted"
    verify = ["--verify"] if theirs.config.two_stage else []  # the CLI's own check, at 320x384, once (CPU time)
    convert_deformable_detr.main(["--input", str(tmp_path / "theirs"), "--output", str(out), *verify])
    assert ("verified: max |delta|" in capsys.readouterr().out) == bool(verify)
    assert_same_detections(expected, detections(hf_xcv.DeformableDetrForObjectDetection.from_pretrained(out)))
    assert json.load(open(out / "config.json"))["model_type"] == "xcv_deformable_detr"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_original_checkpoint_converts_strictly_and_verifies(variant, tmp_path, capsys):
    theirs = original_like(variant, seed=1)
    path = tmp_path / "original.pth"  # as released: the training's args travel along
    torch.save({"model": original_layout(theirs), "args": argparse.Namespace(lr=2e-4), "epoch": 49}, path)
    out = tmp_path / "converted"
    verify = ["--verify"] if variant == "two_stage" else []
    convert_deformable_detr.main(
        ["--input", str(path), "--output", str(out), "--num_heads", "4", "--num_queries", "5", *verify]
    )
    assert ("verified" in capsys.readouterr().out) == bool(verify)
    ours = hf_xcv.DeformableDetrForObjectDetection.from_pretrained(out)
    assert (ours.config.with_box_refine, ours.config.two_stage) == (variant != "base", variant == "two_stage")
    assert_same_detections(detections(theirs, transformers_model=True), detections(ours))
    processor = json.load(open(out / "preprocessor_config.json"))
    assert processor["image_processor_type"] == "XcvDeformableDetrImageProcessor"


def test_cli_refuses_broken_sources_and_deletes_what_fails_verification(tmp_path, monkeypatch, repo_root):
    theirs = original_like("box_refine")
    original = original_layout(theirs)
    broken = {k: v for k, v in original.items() if k != "transformer.decoder.layers.1.norm3.bias"}
    torch.save({"model": broken}, tmp_path / "broken.pth")
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=r"lacks 1 weights.*decoder\.layers\.1\.final_layer_norm\.bias"):
        convert_deformable_detr.main(
            ["--input", str(tmp_path / "broken.pth"), "--output", str(out), "--num_heads", "4"]
        )
    assert not out.exists()
    with pytest.raises(SystemExit, match="no such file"):
        convert_deformable_detr.main(["--input", str(tmp_path / "missing.pth"), "--output", str(out)])
    with pytest.raises(SystemExit, match="cannot check a DC5"):
        convert_deformable_detr.main(
            ["--input", str(tmp_path / "broken.pth"), "--output", str(out), "--dilation", "--verify"]
        )
    assert not out.exists()
    torch.save({"model": original}, tmp_path / "original.pth")
    other = original_like("box_refine", seed=5)  # verification against other weights must fail
    monkeypatch.setattr(convert_deformable_detr, "transformers_model", lambda *args: other)
    monkeypatch.syspath_prepend(str(repo_root))  # the checkout's entry point: python -m conversion.deformable_detr
    entry = importlib.import_module("conversion.deformable_detr")
    with pytest.raises(SystemExit, match="verification failed.*removed"):
        entry.main(["--input", str(tmp_path / "original.pth"), "--output", str(out), "--num_heads", "4", "--verify"])
    assert not out.exists()
    # the installed command knows the format
    hf_xcv_convert(
        ["deformable-detr", "--input", str(tmp_path / "original.pth"), "--output", str(out), "--num_heads", "4"]
    )
    assert (out / "model.safetensors").exists()


@pytest.mark.parametrize("levels", [1, 4])
def test_backbones_reading_c5_alone_convert_from_both_layouts(levels, tmp_path):
    """Single-scale models (one level, C5) and transformers' default ResNet without timm (C5 alone, then three
    3x3 stride-2 levels: research D9) keep the stages their weights were computed with."""
    c5 = ResNetConfig(**{**RESNET, "out_features": ["stage4"]})
    theirs = original_like("box_refine", backbone_config=c5, num_feature_levels=levels)
    config, converted, _ = mapping.convert_official(original_layout(theirs), num_heads=4)
    assert config["num_feature_levels"] == levels and config["backbone_config"]["out_features"] == ["stage4"]
    ours = hf_xcv.DeformableDetrForObjectDetection(hf_xcv.DeformableDetrConfig(**config))
    ours.load_state_dict(converted, strict=True)
    expected = detections(theirs, transformers_model=True)
    assert_same_detections(expected, detections(ours))
    theirs.save_pretrained(tmp_path)
    assert_same_detections(expected, detections(hf_xcv.DeformableDetrForObjectDetection.from_pretrained(tmp_path)))


def test_return_dict_false_tuples_and_attention_maps_are_transformers(theirs, tmp_path):
    """``return_dict=False`` gives transformers' fields in its order and presence, with its values: the deformable
    maps as (B, N|Q, heads, levels, points), ``intermediate_hidden_states`` (B, layers, Q, d) and
    ``intermediate_reference_points`` (B, layers, Q, 2|4), ``auxiliary_outputs`` only with labels."""
    from model_testing import assert_same_tuple

    theirs.save_pretrained(tmp_path)
    reference = transformers.DeformableDetrForObjectDetection.from_pretrained(
        tmp_path, attn_implementation="eager"
    ).eval()
    ours = hf_xcv.DeformableDetrForObjectDetection.from_pretrained(tmp_path).eval()
    pixels, mask = padded_batch()
    outputs = dict(output_attentions=True, output_hidden_states=True, return_dict=False)
    with torch.no_grad():
        a = reference(pixel_values=pixels, pixel_mask=mask, **outputs)
        b = ours(pixels, mask, **outputs)
    assert_same_tuple(a, b[: len(a)])
    assert len(b) == len(a) + theirs.config.two_stage  # hf_xcv's own enc_outputs after transformers' fields
    config = theirs.config
    encoder_map = b[8][0]  # encoder_attentions, where transformers' tuple places them
    assert encoder_map.shape[2:] == (config.encoder_attention_heads, config.num_feature_levels, config.encoder_n_points)
    cross = (config.num_queries, config.decoder_attention_heads, config.num_feature_levels, config.decoder_n_points)
    assert b[5][0].shape[1:] == cross  # cross_attentions
