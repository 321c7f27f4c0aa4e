"""DETR: parity with transformers' DetrForObjectDetection, conversion (transformers on-disk / in-memory / timm
layouts, the original .pth), the original training behaviour where transformers departs from it, backbones,
padding invariance, export, the pipeline and bad inputs."""

from __future__ import annotations

import json
import math

import pytest
import torch
import transformers
from detection_testing import assert_same_detections, original_layout, padded_batch, randomize_norms, torchvision_names
from model_testing import make_inputs
from transformers import AutoModelForObjectDetection, ResNetConfig

import hf_xcv
from hf_xcv import DetrConfig, DetrForObjectDetection, DetrModel, preset_config
from hf_xcv.cli import convert_detr
from hf_xcv.conversion import detr as mapping
from hf_xcv.layers import FrozenBatchNorm2d
from hf_xcv.utils.errors import UsageError

RESNET = dict(out_features=["stage4"], depths=[1, 2, 1, 1], hidden_sizes=[16, 32, 64, 128], embedding_size=16)
SIZES = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    num_queries=5,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    num_labels=3,
)


@pytest.fixture(scope="module")
def theirs() -> transformers.DetrForObjectDetection:
    torch.manual_seed(0)
    config = transformers.DetrConfig(use_timm_backbone=False, backbone_config=ResNetConfig(**RESNET), **SIZES)
    model = transformers.DetrForObjectDetection(config).eval()
    randomize_norms(model)
    return model


def test_transformers_folder_loads_by_conversion_with_the_same_detections(theirs, tmp_path):
    theirs.save_pretrained(tmp_path)  # transformers writes its v4 names (conv_encoder, fc1, out_proj)
    keys = json.load(open(tmp_path / "config.json"))
    assert keys["model_type"] == "detr"
    # transformers' own Auto class still gives transformers' model (import hf_xcv changes nothing); ours converts
    assert type(AutoModelForObjectDetection.from_pretrained(tmp_path)) is transformers.DetrForObjectDetection
    ours = DetrForObjectDetection.from_pretrained(tmp_path)
    pixels, mask = padded_batch()
    with torch.no_grad():
        assert_same_detections(theirs(pixel_values=pixels, pixel_mask=mask), ours.eval()(pixels, mask))
    # transformers' inference-time settings become the original's training recipe (see the converter)
    assert ours.config.auxiliary_loss and ours.config.attention_dropout == 0.1


def test_in_memory_names_convert_too(theirs):
    state_dict, dropped = mapping.convert_state_dict(theirs.state_dict())
    assert not dropped
    ours = DetrForObjectDetection(DetrConfig(backbone_config=ResNetConfig(**RESNET), **SIZES)).eval()
    ours.load_state_dict(state_dict, strict=True)
    pixels, mask = padded_batch()
    with torch.no_grad():
        assert_same_detections(theirs(pixel_values=pixels, pixel_mask=mask), ours(pixels, mask))


def test_timm_backed_transformers_checkpoints_map_onto_transformers_resnet(theirs):
    """The Hub's facebook/detr-resnet-50 has a timm ResNet (torchvision names) under backbone.conv_encoder.model."""
    timm_layout = torchvision_names(theirs.state_dict(), "model.backbone.model.", "model.backbone.conv_encoder.model.")
    assert "model.backbone.conv_encoder.model.layer2.1.bn3.running_var" in timm_layout
    state_dict, _ = mapping.convert_state_dict(timm_layout)
    torch.testing.assert_close(state_dict, dict(theirs.state_dict()))
    config = mapping.convert_config({"model_type": "detr", "use_timm_backbone": True, "backbone": "resnet101"})
    assert config["backbone_config"]["depths"] == [3, 4, 23, 3]


def test_original_checkpoint_converts_strictly_and_verifies(theirs, tmp_path, capsys):
    original = original_layout(theirs)
    assert "transformer.decoder.layers.1.multihead_attn.in_proj_weight" in original
    path = tmp_path / "detr.pth"
    torch.save({"model": original, "args": None}, path)
    out = tmp_path / "converted"
    convert_detr.main(["--input", str(path), "--output", str(out), "--num_heads", "4", "--verify"])
    assert "verified" in capsys.readouterr().out
    ours = DetrForObjectDetection.from_pretrained(out).eval()
    assert ours.config.num_labels == 3 and ours.config.backbone_config.depths == RESNET["depths"]
    pixels, mask = padded_batch()
    with torch.no_grad():
        assert_same_detections(theirs(pixel_values=pixels, pixel_mask=mask), ours(pixels, mask))
    assert json.load(open(out / "preprocessor_config.json"))["image_processor_type"] == "XcvDetrImageProcessor"


def test_conversion_is_strict(theirs, tmp_path):
    state_dict = dict(theirs.state_dict())
    with pytest.raises(ValueError, match="no conversion rule"):
        mapping.convert_state_dict({**state_dict, "model.mask_head.lay1.weight": torch.zeros(1)})
    original = original_layout(theirs)
    del original["transformer.encoder.layers.0.linear1.weight"]
    torch.save({"model": original}, tmp_path / "broken.pth")
    with pytest.raises(SystemExit, match="linear1|fc1"):
        convert_detr.main(["--input", str(tmp_path / "broken.pth"), "--output", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
    torch.save({"model": {"detr.class_embed.weight": torch.zeros(2, 2)}}, tmp_path / "panoptic.pth")
    with pytest.raises(SystemExit, match="panoptic"):
        convert_detr.main(["--input", str(tmp_path / "panoptic.pth"), "--output", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="no such file"):
        convert_detr.main(["--input", str(tmp_path / "missing.pth"), "--output", str(tmp_path / "out")])


def test_auxiliary_loss_does_not_change_the_forward_as_in_the_original(theirs):
    """transformers' DETR norms the decoder's chain itself when auxiliary_loss is on (research D4); the original
    and hf_xcv apply the final LayerNorm to a copy."""
    state_dict, _ = mapping.convert_state_dict(theirs.state_dict())
    pixels, mask = padded_batch()
    outputs = {}
    for aux in (False, True):
        ours = DetrForObjectDetection(DetrConfig(backbone_config=ResNetConfig(**RESNET), auxiliary_loss=aux, **SIZES))
        ours.load_state_dict(state_dict)
        with torch.no_grad():
            outputs[aux] = ours.eval()(pixels, mask)
    assert_same_detections(outputs[False], outputs[True], atol=0)
    assert outputs[True].auxiliary_outputs is None  # as transformers: only with labels
    theirs.config.auxiliary_loss = True
    try:
        with torch.no_grad():
            moved = theirs(pixel_values=pixels, pixel_mask=mask).logits
    finally:
        theirs.config.auxiliary_loss = False
    assert (moved - outputs[True].logits).abs().max() > 1e-3  # transformers' forward moved; ours did not


def test_padding_invariance_one_image_alone_or_next_to_a_larger_one():
    """Everything after the backbone sees an image the same whatever the batch's padding: sine positions over the
    valid extent only, padded keys masked in the encoder and the decoder's cross-attention, so whatever the padded
    cells of the feature map hold never reaches an image's detections. (A CNN's receptive field crosses the image
    border into the padding, in the original and transformers alike — the parity tests run padded batches —
    which is why the original's AP moves a little with the evaluation batch size.) The backbone is replaced by
    one that computes each image's features at its own size and fills the padded cells with noise."""
    model = DetrForObjectDetection(preset_config("detr-test-tiny", num_labels=3)).eval()
    randomize_norms(model)
    backbone = model.model.backbone
    real_forward = backbone.forward

    def per_image_features(pixel_values, valid):
        features, mask = real_forward(pixel_values, valid)
        noisy = torch.randn_like(features) * 10
        for index in range(pixel_values.shape[0]):
            rows, cols = int(valid[index].any(1).sum()), int(valid[index].any(0).sum())
            own, _ = real_forward(
                pixel_values[index : index + 1, :, :rows, :cols], valid[index : index + 1, :rows, :cols]
            )
            noisy[index, :, : own.shape[2], : own.shape[3]] = own[0]
        return noisy, mask

    backbone.forward = per_image_features
    small = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    batch = torch.zeros(2, 3, 128, 96)
    batch[0], batch[1, :, :64, :64] = torch.randn(3, 128, 96, generator=torch.Generator().manual_seed(4)), small[0]
    mask = torch.zeros(2, 128, 96, dtype=torch.long)
    mask[0], mask[1, :64, :64] = 1, 1
    with torch.no_grad():
        alone, together = model(small), model(batch, mask)
    torch.testing.assert_close(together.logits[1], alone.logits[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(together.pred_boxes[1], alone.pred_boxes[0], atol=1e-5, rtol=0)


def test_backbone_trains_as_the_original_batchnorm_frozen_stem_and_first_stage_frozen(tmp_path):
    model = DetrForObjectDetection(preset_config("detr-test-tiny", num_labels=3))
    backbone = model.model.backbone.model
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    assert any(isinstance(m, FrozenBatchNorm2d) for m in backbone.modules())
    assert not any(p.requires_grad for p in backbone.embedder.parameters())
    assert not any(p.requires_grad for p in backbone.encoder.stages[0].parameters())
    assert all(p.requires_grad for stage in backbone.encoder.stages[1:] for p in stage.parameters())
    statistics = {n: b.clone() for n, b in backbone.named_buffers()}
    inputs = make_inputs(model.train())
    model(**inputs).loss.backward()
    assert all(torch.equal(statistics[n], b) for n, b in backbone.named_buffers())  # BatchNorm does not update
    model.save_pretrained(tmp_path)  # loading materialises parameters anew: the frozen stages stay frozen
    reloaded = DetrForObjectDetection.from_pretrained(tmp_path).model.backbone.model
    assert [p.requires_grad for p in reloaded.parameters()] == [p.requires_grad for p in backbone.parameters()]
    everything = DetrModel(preset_config("detr-test-tiny", frozen_backbone_stages=-1))
    assert not any(p.requires_grad for p in everything.backbone.parameters())  # transformers' behaviour, on request


def test_from_scratch_backbones_keep_ordinary_batchnorm_and_load_frozen_checkpoints(tmp_path):
    """freeze_batch_norm=False (a backbone without ImageNet weights): BatchNorm normalises with batch statistics
    and updates them; the weights keep their names, so checkpoints move between the two settings."""
    frozen = DetrForObjectDetection(preset_config("detr-test-tiny", num_labels=3))
    frozen.save_pretrained(tmp_path)
    trainable = DetrForObjectDetection.from_pretrained(tmp_path, freeze_batch_norm=False, frozen_backbone_stages=0)
    norms = [m for m in trainable.model.backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and not any(isinstance(m, FrozenBatchNorm2d) for m in trainable.modules())
    assert all(p.requires_grad for p in trainable.model.backbone.parameters())
    before = norms[0].running_mean.clone()
    trainable.train()(**make_inputs(trainable)).loss.backward()
    assert not torch.equal(before, norms[0].running_mean)
    pixels, mask = padded_batch()
    with torch.no_grad():  # in eval mode ordinary BatchNorm with the same statistics is the frozen map
        assert_same_detections(
            frozen.eval()(pixels, mask),
            DetrForObjectDetection.from_pretrained(tmp_path, freeze_batch_norm=False).eval()(pixels, mask),
            atol=1e-5,
        )


def test_dc5_dilates_the_last_stage_and_keeps_the_weights():
    plain = DetrModel(preset_config("detr-test-tiny"))
    dc5 = DetrModel(preset_config("detr-test-tiny", dilation=True))
    dc5.load_state_dict(plain.state_dict())
    pixels = torch.randn(1, 3, 128, 96)
    with torch.no_grad():
        assert plain.backbone(pixels, torch.ones(1, 128, 96, dtype=torch.bool))[0].shape[-2:] == (4, 3)
        assert dc5.backbone(pixels, torch.ones(1, 128, 96, dtype=torch.bool))[0].shape[-2:] == (8, 6)


def test_swin_backbone_plugs_in_through_the_backbone_api():
    swin = {"model_type": "xcv_swin", "embed_dim": 16, "depths": [1, 1, 2, 1], "num_heads": [2, 2, 4, 4]}
    swin.update(window_size=2, image_size=64, out_features=["stage4"])
    config = preset_config("detr-test-tiny", backbone_config=swin, num_labels=3)
    model = DetrForObjectDetection(config).train()
    inputs = make_inputs(model)
    model(**inputs).loss.backward()
    swin_model = model.model.backbone.model.swin
    assert not any(p.requires_grad for p in swin_model.embeddings.parameters())
    assert all(p.grad is not None for p in swin_model.encoder.layers[1].parameters())


def test_imagenet_backbone_weights_load_from_a_transformers_resnet_folder(tmp_path):
    config = preset_config("detr-test-tiny")
    resnet = transformers.ResNetForImageClassification(ResNetConfig(**config.backbone_config.to_dict()))
    randomize_norms(resnet)
    resnet.save_pretrained(tmp_path / "resnet")
    model = DetrModel(config)
    model.backbone.load_pretrained(tmp_path / "resnet")
    ours = model.backbone.model.state_dict()
    for key, tensor in resnet.resnet.state_dict().items():
        if not key.endswith("num_batches_tracked"):
            assert torch.equal(ours[key], tensor), key
    other = transformers.ResNetModel(ResNetConfig(depths=[1, 1], hidden_sizes=[8, 16], embedding_size=8))
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match="lacks .* weights|other shapes"):
        model.backbone.load_pretrained(tmp_path / "other")


TINY_SWIN = dict(embed_dim=16, depths=[1, 1, 2, 1], num_heads=[2, 2, 4, 4], window_size=2, image_size=64)
# detr-test-tiny without its backbone: the backbone comes from backbone= or backbone_config=
TINY_DETR = {k: v for k, v in hf_xcv.PRESETS["detr-test-tiny"].config.items() if k != "backbone_config"}


def random_swin(cls=hf_xcv.SwinForImageClassification, **overrides):
    """An hf_xcv Swin with random values in every tensor (its LayerNorms too), so loaded weights are told apart."""
    model = cls(hf_xcv.SwinConfig(**{**TINY_SWIN, **overrides}))
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.5)
    return model


def test_detr_fine_tunes_from_a_swin_classifier_folder(tmp_path, caplog):
    """backbone= names the checkpoint whose config the detector builds and use_pretrained_backbone=True loads its
    weights (the classifier's body; the backbone's output norms start new, named in a warning); a few steps then
    lower the loss, and the saved detector reloads without the classifier's folder."""
    classifier = random_swin(num_labels=5)
    classifier.save_pretrained(tmp_path / "swin")
    with caplog.at_level("WARNING"):
        config = DetrConfig(**TINY_DETR, backbone=str(tmp_path / "swin"), use_pretrained_backbone=True, num_labels=3)
        model = DetrForObjectDetection(config)
    assert "has and the checkpoint (a SwinForImageClassification as saved) does not" in caplog.text
    assert "hidden_states_norms.stage4.bias, hidden_states_norms.stage4.weight" in caplog.text
    assert isinstance(config.backbone_config, hf_xcv.SwinConfig) and config.backbone_config.out_features == ["stage4"]
    backbone = model.model.backbone.model
    for name, tensor in backbone.state_dict().items():
        if not name.startswith("hidden_states_norms."):
            assert torch.equal(tensor, classifier.state_dict()[name]), name
    inputs = make_inputs(model.train())
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    losses = []
    for _ in range(6):
        loss = model(**inputs).loss
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[-1] < losses[0]
    model.save_pretrained(tmp_path / "detr")
    assert "pretrained_backbone" not in (tmp_path / "detr" / "config.json").read_text()  # how it was built
    for file in (tmp_path / "swin").iterdir():
        file.unlink()
    reloaded = DetrForObjectDetection.from_pretrained(tmp_path / "detr").eval()
    inputs = make_inputs(model, labels=False)
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).logits, model.eval()(**inputs).logits)


def test_load_pretrained_takes_swin_classifiers_bare_models_and_transformers_swin(tmp_path):
    config = preset_config("detr-test-tiny", backbone_config={**TINY_SWIN, "model_type": "xcv_swin"})
    model = DetrModel(config)
    for name, source in [("bare", random_swin(hf_xcv.SwinModel)), ("classifier", random_swin(num_labels=2))]:
        source.save_pretrained(tmp_path / name)
        model.backbone.load_pretrained(tmp_path / name)
        ours = model.backbone.model.swin.state_dict()
        body = source.state_dict() if name == "bare" else source.swin.state_dict()
        for key, tensor in ours.items():
            assert torch.equal(tensor, body[key]), key
    theirs = transformers.SwinForImageClassification(transformers.SwinConfig(**TINY_SWIN))
    with torch.no_grad():
        theirs.swin.embeddings.norm.weight.normal_()
    theirs.save_pretrained(tmp_path / "transformers")
    model.backbone.load_pretrained(tmp_path / "transformers")  # converted on load
    assert torch.equal(model.backbone.model.swin.embeddings.norm.weight, theirs.swin.embeddings.norm.weight)
    random_swin(depths=[1, 1, 1, 1], num_heads=[2, 2, 4, 4]).save_pretrained(tmp_path / "shallower")
    with pytest.raises(ValueError, match=r"lacks 17 weights .*layers\.2\.blocks\.1"):
        model.backbone.load_pretrained(tmp_path / "shallower")


@pytest.mark.parametrize("as_dict", [False, True], ids=["config", "dict"])
def test_a_transformers_swin_config_is_the_backbone_converted_to_hf_xcvs(as_dict, tmp_path):
    theirs = transformers.SwinConfig(**TINY_SWIN, out_features=["stage3"])
    config = DetrConfig(**TINY_DETR, backbone_config=theirs.to_dict() if as_dict else theirs, num_labels=3)
    swin = config.backbone_config
    assert isinstance(swin, hf_xcv.SwinConfig) and swin.out_features == ["stage3"]
    assert (swin.embed_dim, swin.depths, swin.num_heads, swin.window_size) == (16, [1, 1, 2, 1], [2, 2, 4, 4], 2)
    model = DetrForObjectDetection(config).eval()
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["backbone_config"]["model_type"] == "xcv_swin"
    inputs = make_inputs(model, labels=False)
    with torch.no_grad():
        assert torch.equal(DetrForObjectDetection.from_pretrained(tmp_path)(**inputs).logits, model(**inputs).logits)


def test_backbone_names_the_checkpoint_whose_config_is_built_never_another(tmp_path, monkeypatch):
    assert DetrConfig(backbone="resnet50").backbone_config.to_dict() == DetrConfig().backbone_config.to_dict()
    resnet101 = DetrConfig(backbone="resnet101").backbone_config  # was silently a ResNet-50
    assert (resnet101.model_type, resnet101.depths, resnet101.out_features) == ("resnet", [3, 4, 23, 3], ["stage4"])
    transformers.ResNetModel(ResNetConfig(depths=[1, 1], hidden_sizes=[8, 16], embedding_size=8)).save_pretrained(
        tmp_path / "resnet"
    )
    config = DetrConfig(**TINY_DETR, backbone=str(tmp_path / "resnet"), backbone_kwargs={"out_features": ["stage1"]})
    assert (config.backbone_config.hidden_sizes, config.backbone_config.out_features) == ([8, 16], ["stage1"])
    deformable = hf_xcv.DeformableDetrConfig(backbone=str(tmp_path / "resnet"))  # its stages 2-4, as far as they go
    assert deformable.backbone_config.out_features == ["stage1", "stage2"]
    hf_xcv.ViTModel(preset_config("vit-test-tiny")).save_pretrained(tmp_path / "vit")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    refusals = [
        (dict(backbone="microsoft/swin-tiny-patch4-window7-224"), r"'microsoft/swin-tiny-patch4-window7-224' is no"),
        (dict(backbone=str(tmp_path / "vit")), r"model_type 'xcv_vit'; a detector's backbone is one of"),
        (dict(backbone="resnet50", use_pretrained_backbone=True), r"those ImageNet weights are timm's"),
        (dict(use_pretrained_backbone=True), r"use_pretrained_backbone=True needs backbone="),
        (dict(backbone="resnet50", backbone_config={"model_type": "resnet"}), r"or backbone_config, not both"),
        (dict(backbone_kwargs={"out_indices": [3]}), r"apply to the checkpoint named by backbone="),
    ]
    for kwargs, message in refusals:
        with pytest.raises(UsageError, match=message):
            DetrConfig(**kwargs)


def test_backbone_takes_a_hub_repo_and_use_pretrained_backbone_its_weights(tmp_path):
    classifier = random_swin(num_labels=2)
    repo = "testuser/swin-tiny-for-detr"
    classifier.push_to_hub(repo)  # to the test session's own Hub server
    config = DetrConfig(**TINY_DETR, backbone=repo, use_pretrained_backbone=True)
    model = DetrModel(config)
    assert torch.equal(model.backbone.model.swin.embeddings.norm.weight, classifier.swin.embeddings.norm.weight)


def test_positions_stay_float32_under_bfloat16_and_export_matches_eager(tmp_path):
    model = DetrForObjectDetection(preset_config("detr-test-tiny", num_labels=3)).eval()
    pixels, mask = padded_batch()
    with torch.no_grad():
        expected = model(pixels, mask)
        exported = torch.export.export(model, (pixels, mask), strict=False)
        got = exported.module()(pixels, mask)
    torch.testing.assert_close(got["logits"], expected.logits, atol=1e-5, rtol=0)
    half = DetrForObjectDetection(preset_config("detr-test-tiny", num_labels=3)).to(torch.bfloat16).eval()
    with torch.no_grad():
        out = half(pixels.to(torch.bfloat16), mask)
    assert out.logits.dtype == torch.bfloat16 and torch.isfinite(out.pred_boxes).all()


def test_pipeline_object_detection_runs_on_a_saved_detector(tmp_path):
    from PIL import Image

    model = DetrForObjectDetection(preset_config("detr-test-tiny", num_labels=3)).eval()
    model.save_pretrained(tmp_path)
    hf_xcv.XcvDetrImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}).save_pretrained(tmp_path)
    detector = transformers.pipeline("object-detection", model=str(tmp_path))
    image = Image.fromarray((torch.rand(48, 80, 3) * 255).to(torch.uint8).numpy())
    results = detector(image, threshold=0.0)
    assert len(results) == model.config.num_queries
    for result in results:
        box = result["box"]
        assert 0 <= box["xmin"] <= box["xmax"] <= 80 and 0 <= box["ymin"] <= box["ymax"] <= 48
        assert result["label"] in model.config.id2label.values()


def test_bad_inputs_are_refused_by_name():
    model = DetrForObjectDetection(preset_config("detr-test-tiny", num_labels=3))
    pixels, mask = padded_batch()
    with pytest.raises(ValueError, match="pixel_mask has shape"):
        model(pixels, mask[:, :10])
    with pytest.raises(ValueError, match="channels"):
        model(pixels[:, :1], mask)
    with pytest.raises(ValueError, match="one dict per image"):
        model(pixels, mask, labels=[{"class_labels": torch.zeros(0, dtype=torch.long), "boxes": torch.zeros(0, 4)}])
    bad = {"class_labels": torch.tensor([7]), "boxes": torch.tensor([[0.5, 0.5, 0.2, 0.2]])}
    empty = {"class_labels": torch.zeros(0, dtype=torch.long), "boxes": torch.zeros(0, 4)}
    with pytest.raises(ValueError, match=r"\b7\b"):
        model(pixels, mask, labels=[empty, bad])
    for field, value, words in [
        ("encoder_layerdrop", 0.1, "drops no layers"),
        ("frozen_backbone_stages", 9, "frozen_backbone_stages"),
        ("encoder_attention_heads", 3, "does not divide"),
        ("position_embedding_type", "learned", "position_embedding_type"),
        ("use_timm_backbone", True, "timm"),
        ("backbone_config", {"model_type": "resnet", "out_features": ["stage3", "stage4"]}, "one stage"),
    ]:
        with pytest.raises(ValueError, match=words):
            preset_config("detr-test-tiny", **{field: value}) if field != "use_timm_backbone" else DetrConfig(
                use_timm_backbone=True
            )


def test_compiles_into_one_graph_on_a_padded_batch():
    """No Python branch on tensor values in the forward: torch.compile(fullgraph=True) captures it whole (the
    eager backend: graph capture is what is tested, not code generation)."""
    model = DetrForObjectDetection(preset_config("detr-test-tiny", num_labels=3)).eval()
    pixels, mask = padded_batch()
    with torch.no_grad():
        expected = model(pixels, mask)
        compiled = torch.compile(model, fullgraph=True, backend="eager")(pixels, mask)
    assert_same_detections(compiled, expected, atol=1e-6)


def test_the_original_initialisation_is_applied_xavier_matrices_and_zero_attention_biases():
    """nn.Transformer's init in the original: Xavier-uniform matrices in every layer (fan 256 + 2048 for the FFN,
    not PyTorch's default bound 1/sqrt(256)), zero attention biases (transformers skips such module-level
    inits in code outside its library: a regression test)."""
    model = DetrForObjectDetection(preset_config("detr-resnet-50"))
    layer = model.model.encoder.layers[0]
    bound = math.sqrt(6 / (256 + 2048))
    assert bound * 0.98 < layer.mlp.fc1.weight.abs().max() <= bound
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert getattr(layer.self_attn, name).bias.abs().max() == 0
    decoder = model.model.decoder.layers[0].encoder_attn
    assert decoder.q_proj.bias.abs().max() == 0


@pytest.mark.parametrize("auxiliary_loss", [False, True], ids=["plain", "auxiliary_loss"])
def test_return_dict_false_tuples_index_as_transformers(theirs, auxiliary_loss, tmp_path):
    """``model(..., return_dict=False)`` gives transformers' fields in its order and presence (the bare model's
    ``intermediate_hidden_states`` last and only with ``auxiliary_loss``, ``auxiliary_outputs`` only with labels),
    with its values; with ``auxiliary_loss`` transformers norms the decoder's chain itself (research D4), so there
    the shapes are compared."""
    from model_testing import assert_same_tuple

    theirs.save_pretrained(tmp_path)
    reference = transformers.DetrForObjectDetection.from_pretrained(
        tmp_path, auxiliary_loss=auxiliary_loss, attn_implementation="eager"
    ).eval()
    ours = DetrForObjectDetection.from_pretrained(tmp_path, auxiliary_loss=auxiliary_loss).eval()
    pixels, mask = padded_batch()
    outputs = dict(output_attentions=True, output_hidden_states=True, return_dict=False)
    with torch.no_grad():
        a = reference(pixel_values=pixels, pixel_mask=mask, **outputs)
        b = ours(pixels, mask, **outputs)
        assert_same_tuple(a, b, values=not auxiliary_loss)
        a = reference.model(pixel_values=pixels, pixel_mask=mask, **outputs)
        b = ours.model(pixels, mask, **outputs)
        assert_same_tuple(a, b, values=not auxiliary_loss)
        assert len(b) == 7 + auxiliary_loss  # intermediate_hidden_states (layers, B, Q, d) last, with auxiliary_loss
        labels = [{"class_labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.5, 0.2, 0.2]])}] * 2
        a = reference(pixel_values=pixels, pixel_mask=mask, labels=labels, return_dict=False)
        b = ours(pixels, mask, labels=labels, return_dict=False)
    assert len(a) == len(b) == 4 + auxiliary_loss + 2  # loss, loss_dict, logits, pred_boxes, [aux], last, encoder
    assert_same_tuple(a[2:], b[2:], values=False)
