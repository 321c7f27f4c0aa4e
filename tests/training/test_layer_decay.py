"""Layer-wise learning-rate decay (hf_xcv.training.layer_decay): every parameter's learning rate is
``lr * decay ** (L + 1 - layer_id)`` for the layer id its module has (embeddings at the bottom, the blocks in order,
the head at the top), with the weight-decay split of the recipes, and every trainable parameter in exactly one group.

The expected ids are found here from the modules (walking the blocks in order), not from parameter names."""

from __future__ import annotations

import pytest
import torch
from model_testing import tiny_config

import hf_xcv
from hf_xcv.training import layer_decay_parameter_groups, layer_ids, parameter_groups
from hf_xcv.training.optim import decays
from hf_xcv.utils.errors import UsageError

LR, WEIGHT_DECAY, DECAY = 1e-3, 0.05, 0.7


def ids_by_module(embeddings: torch.nn.Module, blocks: list[list[torch.nn.Module]], model: torch.nn.Module):
    """Parameter id -> expected layer: ``embeddings`` 0, the i-th module of ``blocks`` (counting from 1, in order; a
    list of modules sharing an id) i, every other parameter ``len(blocks) + 1``."""
    expected = {id(p): 0 for p in embeddings.parameters()}
    for layer, modules in enumerate(blocks, start=1):
        for module in modules:
            expected |= {id(p): layer for p in module.parameters()}
    top = len(blocks) + 1
    return {name: expected.get(id(param), top) for name, param in model.named_parameters()}, len(blocks)


def swin_blocks(encoder: torch.nn.Module) -> list[list[torch.nn.Module]]:
    """Swin's blocks across its stages; a stage's patch merging with the stage's last block (the Swin authors'
    fine-tuning convention)."""
    blocks = []
    for stage in encoder.layers:
        blocks += [[block] for block in stage.blocks]
        if stage.downsample is not None:
            blocks[-1].append(stage.downsample)
    return blocks


def check_groups(model: torch.nn.Module, expected: dict[str, int], num_layers: int) -> list[dict]:
    groups = layer_decay_parameter_groups(model, LR, WEIGHT_DECAY, DECAY)
    found = {}
    for group in groups:
        for param in group["params"]:
            assert id(param) not in found, "a parameter in two groups"
            found[id(param)] = group
    names = dict(model.named_parameters())
    trainable = {name for name, param in names.items() if param.requires_grad}
    assert {id(names[name]) for name in trainable} == set(found), "every trainable parameter, and no other"
    for name in trainable:
        group, param = found[id(names[name])], names[name]
        assert group["lr"] == pytest.approx(LR * DECAY ** (num_layers + 1 - expected[name]), rel=1e-12), name
        assert group["layer_id"] == expected[name], name
        assert group["weight_decay"] == (WEIGHT_DECAY if decays(name, param) else 0.0), name
    assert layer_ids(model) == (expected, num_layers)
    return groups


def test_vit_embeddings_at_the_bottom_blocks_in_order_head_at_the_top():
    model = hf_xcv.ViTForImageClassification(tiny_config("xcv_vit", num_hidden_layers=3))
    expected, num_layers = ids_by_module(model.vit.embeddings, [[b] for b in model.vit.encoder.layers], model)
    assert num_layers == 3
    groups = check_groups(model, expected, num_layers)
    assert expected["vit.embeddings.cls_token"] == expected["vit.embeddings.position_embeddings"] == 0
    assert expected["classifier.weight"] == expected["vit.layernorm.weight"] == 4
    assert groups[-1]["lr"] == LR and groups[0]["lr"] == pytest.approx(LR * DECAY**4)


def test_swin_blocks_numbered_across_stages_with_their_patch_merging():
    model = hf_xcv.SwinForImageClassification(tiny_config("xcv_swin"))
    expected, num_layers = ids_by_module(model.swin.embeddings, swin_blocks(model.swin.encoder), model)
    assert num_layers == sum(model.config.depths)
    check_groups(model, expected, num_layers)
    assert expected["swin.encoder.layers.0.downsample.reduction.weight"] == model.config.depths[0]
    assert expected["swin.encoder.layers.1.blocks.0.mlp.fc1.weight"] == model.config.depths[0] + 1
    assert expected["classifier.weight"] == num_layers + 1


@pytest.mark.parametrize("model_type", ["xcv_detr", "xcv_deformable_detr"])
def test_detectors_decay_within_their_resnet_backbone_and_train_the_rest_at_the_full_rate(model_type):
    from hf_xcv.auto import AutoModelForObjectDetection

    model = AutoModelForObjectDetection.from_config(tiny_config(model_type))
    resnet = model.model.backbone.model
    blocks = [[block] for stage in resnet.encoder.stages for block in stage.layers]
    expected, num_layers = ids_by_module(resnet.embedder, blocks, model)
    groups = check_groups(model, expected, num_layers)
    frozen = [name for name, param in model.named_parameters() if not param.requires_grad]
    assert frozen and all(name.startswith("model.backbone.") for name in frozen)  # left out of every group
    assert all(expected[name] == num_layers + 1 for name in expected if ".backbone." not in name)
    assert {group["layer_id"] for group in groups} >= {num_layers, num_layers + 1}


def test_a_detector_with_a_swin_backbone_decays_within_it():
    from hf_xcv.auto import AutoModelForObjectDetection

    swin = {"model_type": "xcv_swin", "embed_dim": 16, "depths": [1, 1, 2, 1], "num_heads": [2, 2, 4, 4]}
    swin.update(window_size=2, image_size=64, out_features=["stage4"])
    model = AutoModelForObjectDetection.from_config(tiny_config("xcv_detr", backbone_config=swin))
    backbone = model.model.backbone.model
    expected, num_layers = ids_by_module(backbone.swin.embeddings, swin_blocks(backbone.swin.encoder), model)
    assert num_layers == 5
    check_groups(model, expected, num_layers)


def test_no_decay_gives_the_recipe_groups_and_an_unknown_model_is_refused():
    model = hf_xcv.ViTForImageClassification(tiny_config("xcv_vit"))
    flat = layer_decay_parameter_groups(model, LR, WEIGHT_DECAY, layer_decay=1.0)
    assert {group["lr"] for group in flat} == {LR}
    by_decay = {wd: {id(p) for g in flat if g["weight_decay"] == wd for p in g["params"]} for wd in (WEIGHT_DECAY, 0.0)}
    recipe = {g["weight_decay"]: {id(p) for p in g["params"]} for g in parameter_groups(model, WEIGHT_DECAY)}
    assert by_decay == recipe
    with pytest.raises(UsageError, match="layer_decay must lie in"):
        layer_decay_parameter_groups(model, LR, WEIGHT_DECAY, layer_decay=0.0)
    translator = hf_xcv.TransformerForConditionalGeneration(hf_xcv.preset_config("transformer-test-tiny"))
    with pytest.raises(UsageError, match="knows the layers of"):
        layer_decay_parameter_groups(translator, LR, WEIGHT_DECAY)
