"""Swin: parity with transformers' Swin (classifier, bare model and backbone; both checkpoint formats and the
original .pth layout), window attention against masks built by hand, bias-table resampling, padding of odd
sizes, the processor against a hand computation, and bad inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors.torch
import torch
import transformers
from PIL import Image
from torch.nn import functional as F

import hf_xcv
from hf_xcv.attention import build_attention, dense_attention
from hf_xcv.attention.shifted_window import region_bias, window_and_shift, window_maps_to_tokens
from hf_xcv.cli import convert_swin
from hf_xcv.conversion.swin import convert_config, convert_state_dict

SMALL = dict(image_size=224, embed_dim=24, depths=[2, 2, 2, 2], num_heads=[2, 4, 8, 8], drop_path_rate=0.0)
TOL = 1e-4  # the bar; measured ~1e-7


def their_classifier(seed: int = 0, **overrides) -> transformers.SwinForImageClassification:
    """transformers' Swin with random weights, the bias tables too (transformers starts them at zero)."""
    torch.manual_seed(seed)
    model = transformers.SwinForImageClassification(transformers.SwinConfig(**{**SMALL, "num_labels": 5, **overrides}))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "relative_position_bias_table" in name:
                param.normal_(0, 0.5)
    return model.eval()


def ours_from(theirs: torch.nn.Module, cls=hf_xcv.SwinForImageClassification) -> torch.nn.Module:
    config = {k: v for k, v in convert_config(theirs.config.to_dict()).items() if k != "model_type"}
    model = cls(hf_xcv.SwinConfig(**config)).eval()
    model.load_state_dict(convert_state_dict(theirs.state_dict())[0], strict=True)
    return model


def pixels(height: int, width: int, batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("size", [(224, 224), (200, 250)], ids=["224", "200x250"])
def test_logits_and_hidden_states_match_transformers(size):
    theirs = their_classifier()
    ours = ours_from(theirs)
    x = pixels(*size)
    with torch.no_grad():
        a, b = theirs(x, output_hidden_states=True), ours(x, output_hidden_states=True)
    assert (a.logits - b.logits).abs().max() <= TOL
    assert len(a.reshaped_hidden_states) == len(b.reshaped_hidden_states) == 5
    for theirs_map, ours_map in zip(a.reshaped_hidden_states, b.reshaped_hidden_states):
        assert theirs_map.shape == ours_map.shape
        assert (theirs_map - ours_map).abs().max() <= TOL * 10
    for theirs_tokens, ours_tokens in zip(a.hidden_states, b.hidden_states):
        assert (theirs_tokens - ours_tokens).abs().max() <= TOL * 10


@pytest.mark.parametrize("size", [(224, 224), (200, 250)], ids=["224", "200x250"])
def test_attentions_are_transformers_per_window_maps_and_token_attentions_the_same_in_token_order(size):
    """``attentions`` equal transformers' on the same weights, count, shapes and values: one per stage (its last
    block's, a shifted one), (B * windows, heads, w * w, w * w) over the padded, rolled grid; ``token_attentions`` are
    the same maps in token order (B, heads, L, L). A ``return_dict=False`` tuple reads the same as transformers'."""
    theirs, x = their_classifier(), pixels(*size)
    ours = ours_from(theirs)
    theirs.set_attn_implementation("eager")  # transformers' sdpa path returns no maps
    with torch.no_grad():
        a, b = theirs(x, output_attentions=True), ours(x, output_attentions=True)
        as_tuple = ours(x, output_attentions=True, return_dict=False)
    assert len(a.attentions) == len(b.attentions) == len(b.token_attentions) == 4
    grid = (-(-size[0] // 4), -(-size[1] // 4))
    for theirs_maps, ours_maps, tokens in zip(a.attentions, b.attentions, b.token_attentions):
        assert theirs_maps.shape == ours_maps.shape
        torch.testing.assert_close(ours_maps, theirs_maps, atol=1e-5, rtol=1e-4)
        window, shift = window_and_shift(grid, 7, 3)
        assert tokens.shape == (2, ours_maps.shape[1], grid[0] * grid[1], grid[0] * grid[1])
        torch.testing.assert_close(tokens, window_maps_to_tokens(ours_maps, grid, window, shift, batch=2))
        grid = (-(-grid[0] // 2), -(-grid[1] // 2))
    assert len(as_tuple) == 3  # logits, attentions, token_attentions: transformers' (logits, attentions) first
    for theirs_maps, ours_maps in zip(a.attentions, as_tuple[1]):
        torch.testing.assert_close(ours_maps, theirs_maps, atol=1e-5, rtol=1e-4)


def test_a_core_that_is_not_windowed_keeps_the_vit_like_layout():
    config = hf_xcv.preset_config("swin-test-tiny", attention_type="full", attention_kwargs={})
    model = hf_xcv.SwinModel(config).eval()
    with torch.no_grad():
        out = model(pixels(32, 32, batch=1), output_attentions=True)
    for maps, tokens in zip(out.attentions, out.token_attentions):
        assert maps is tokens and maps.shape[-1] == maps.shape[-2] and maps.shape[0] == 1


def test_a_transformers_folder_loads_by_converting_on_load(tmp_path):
    theirs = their_classifier()
    theirs.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "swin"
    ours = hf_xcv.SwinForImageClassification.from_pretrained(tmp_path).eval()
    auto = transformers.AutoModelForImageClassification.from_pretrained(tmp_path)
    assert type(auto).__module__.startswith("transformers")  # import hf_xcv changes nothing of transformers' own
    x = pixels(224, 224)
    with torch.no_grad():
        assert (theirs(x).logits - ours(x).logits).abs().max() <= TOL


def test_the_backbone_matches_transformers_feature_maps_with_strides_and_channels():
    stages = ["stem", "stage1", "stage2", "stage3", "stage4"]
    torch.manual_seed(0)
    theirs = transformers.SwinBackbone(transformers.SwinConfig(**SMALL, out_features=stages)).eval()
    with torch.no_grad():
        for name, param in theirs.named_parameters():
            if "relative_position_bias_table" in name or "hidden_states_norms" in name:
                param.normal_(0, 0.5)
    config = {k: v for k, v in convert_config(theirs.config.to_dict()).items() if k not in ("model_type",)}
    ours = hf_xcv.SwinBackbone(hf_xcv.SwinConfig(**config)).eval()
    state_dict = convert_state_dict(theirs.state_dict())[0]
    state_dict = {k: v for k, v in state_dict.items() if not k.startswith("swin.layernorm.")}  # unused by both
    ours.load_state_dict(state_dict, strict=True)
    assert ours.out_features == stages and ours.strides == [4, 4, 8, 16, 32]
    assert ours.channels == [24, 24, 48, 96, 192]
    for size in [(224, 224), (200, 250)]:
        x = pixels(*size)
        with torch.no_grad():
            a, b = theirs(x).feature_maps, ours(x).feature_maps
        for stride, channels, theirs_map, ours_map in zip(ours.strides, ours.channels, a, b):
            assert ours_map.shape == (2, channels, -(-size[0] // stride), -(-size[1] // stride))
            assert (theirs_map - ours_map).abs().max() <= TOL * 10


def official_layout(model: transformers.SwinForImageClassification) -> dict[str, torch.Tensor]:
    """transformers' weights in the original repo's layout (inverse of the research notes' verified mapping):
    fused qkv, the index and mask buffers, ``head``."""
    names = [
        ("swin.embeddings.patch_embeddings.projection", "patch_embed.proj"),
        ("swin.embeddings.norm", "patch_embed.norm"),
        ("swin.encoder.layers", "layers"),
        (".layernorm_before", ".norm1"),
        (".layernorm_after", ".norm2"),
        (".attention.relative_position_bias.relative_position_bias_table", ".attn.relative_position_bias_table"),
        (".attention.o_proj", ".attn.proj"),
        ("swin.layernorm", "norm"),
        ("classifier", "head"),
    ]
    config, out = model.config, {}
    state_dict = model.state_dict()
    for key, tensor in state_dict.items():
        if ".attention.k_proj" in key or ".attention.v_proj" in key:
            continue
        if ".attention.q_proj" in key:
            parts = [state_dict[key.replace("q_proj", p)] for p in ("q_proj", "k_proj", "v_proj")]
            key, tensor = key.replace(".attention.q_proj", ".attn.qkv"), torch.cat(parts)
        if key.endswith("relative_position_index"):
            key = key.replace(".attention.relative_position_bias.", ".attn.")
            tensor = tensor.view(config.window_size**2, config.window_size**2)
        for old, new in names:
            key = key.replace(old, new)
        out[key] = tensor
    windows = (config.image_size // 4 // config.window_size) ** 2
    n = config.window_size**2
    for stage, depth in enumerate(config.depths[:-1]):  # stage 4 is one window: no shift, no mask
        for block in range(1, depth, 2):
            out[f"layers.{stage}.blocks.{block}.attn_mask"] = torch.zeros(windows // 4**stage, n, n)
    return out


def test_an_original_pth_converts_strictly_and_verifies(tmp_path):
    theirs = their_classifier()
    path = tmp_path / "swin_small_patch4_window7_224.pth"
    torch.save({"model": official_layout(theirs), "epoch": 300}, path)
    out = tmp_path / "converted"
    convert_swin.main(["--input", str(path), "--output", str(out), "--verify"])
    config = json.loads((out / "config.json").read_text())
    assert (config["embed_dim"], config["depths"], config["num_heads"]) == (24, [2, 2, 2, 2], [2, 4, 8, 8])
    assert (config["window_size"], config["image_size"], config["num_labels"]) == (7, 224, 5)
    ours = transformers.AutoModelForImageClassification.from_pretrained(out).eval()
    assert isinstance(ours, hf_xcv.SwinForImageClassification)
    processor = json.loads((out / "preprocessor_config.json").read_text())
    assert processor["image_processor_type"] == "XcvSwinImageProcessor"
    with torch.no_grad():
        assert (theirs(pixels(224, 224)).logits - ours(pixels(224, 224)).logits).abs().max() <= TOL


def test_conversion_is_strict_and_writes_nothing_on_error(tmp_path):
    theirs = their_classifier()
    layout = official_layout(theirs)
    path, out = tmp_path / "extra.pth", tmp_path / "out"
    torch.save({"model": {**layout, "layers.0.blocks.0.attn.unknown": torch.zeros(1)}}, path)
    with pytest.raises(SystemExit, match=r"no conversion rule \(first: layers\.0\.blocks\.0\.attn\.unknown\)"):
        convert_swin.main(["--input", str(path), "--output", str(out)])
    assert not out.exists()
    del layout["layers.1.blocks.0.mlp.fc2.weight"]
    torch.save({"model": layout}, path)
    with pytest.raises(SystemExit, match=r"lacks 1 weights .*layers\.1\.blocks\.0\.mlp\.fc2\.weight"):
        convert_swin.main(["--input", str(path), "--output", str(out)])
    with pytest.raises(SystemExit, match="missing.pth: no such file"):
        convert_swin.main(["--input", str(tmp_path / "missing.pth"), "--output", str(out)])
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit, match="not a readable PyTorch checkpoint"):
        convert_swin.main(["--input", str(path), "--output", str(out)])
    assert not out.exists()
    theirs.save_pretrained(tmp_path / "hf")
    weights = tmp_path / "hf" / "model.safetensors"
    from safetensors.torch import load_file, save_file

    state_dict = load_file(weights)
    state_dict["swin.encoder.layers.0.blocks.0.attention.self.extra"] = torch.zeros(1)
    save_file(state_dict, weights)
    with pytest.raises(SystemExit, match=r"attention\.self\.extra"):
        convert_swin.main(["--input", str(tmp_path / "hf"), "--output", str(out)])
    assert not out.exists()


def test_loading_at_another_window_resamples_every_bias_table_bicubically(tmp_path, caplog):
    config = hf_xcv.SwinConfig(**{**SMALL, "num_labels": 3})
    torch.manual_seed(0)
    seven = hf_xcv.SwinForImageClassification(config).eval()
    seven.save_pretrained(tmp_path)
    with caplog.at_level("WARNING"):
        twelve = hf_xcv.SwinForImageClassification.from_pretrained(tmp_path, window_size=12).eval()
    assert "resampled 8 weights" in caplog.text
    by_hand = hf_xcv.SwinForImageClassification(hf_xcv.SwinConfig(**{**SMALL, "num_labels": 3, "window_size": 12}))
    state_dict = seven.state_dict()
    for key, table in list(state_dict.items()):
        if key.endswith("relative_position_bias_table"):  # ((2*7-1)^2, heads) -> ((2*12-1)^2, heads), per head
            image = table.t().reshape(1, -1, 13, 13)
            state_dict[key] = F.interpolate(image, size=(23, 23), mode="bicubic").reshape(-1, 23 * 23).t()
    by_hand.load_state_dict(state_dict)
    x = pixels(384, 384, batch=1)
    with torch.no_grad():
        assert torch.allclose(twelve(x).logits, by_hand.eval()(x).logits, atol=1e-6)


def test_absolute_position_embeddings_follow_the_input_size_and_resample_on_load(tmp_path):
    config = hf_xcv.SwinConfig(**{**SMALL, "use_absolute_embeddings": True, "num_labels": 2})
    model = hf_xcv.SwinForImageClassification(config).eval()
    with torch.no_grad():
        assert model(pixels(160, 96)).logits.shape == (2, 2)
    model.save_pretrained(tmp_path)
    bigger = hf_xcv.SwinForImageClassification.from_pretrained(tmp_path, image_size=448)
    assert bigger.swin.embeddings.position_embeddings.shape == (1, 112 * 112, 24)


TINY = dict(image_size=32, embed_dim=16, depths=[1, 2], num_heads=[2, 4], window_size=4, patch_size=2)


def randomized(model: torch.nn.Module) -> torch.nn.Module:
    """Random values in every tensor, the LayerNorms too (they start as ones and zeros): loaded weights are then
    told apart from new ones."""
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.5)
    return model


def test_a_classifier_loads_into_the_bare_model_and_the_backbone_and_back(tmp_path, caplog):
    """The base model's ``swin.`` prefix is removed or added as transformers does; what one class has and the
    checkpoint's class has not (the backbone's per-stage output norms, a final norm, a head) starts new with a
    warning naming it; everything else is the checkpoint's, and a weight its own architecture has stays required."""
    classifier = randomized(hf_xcv.SwinForImageClassification(hf_xcv.SwinConfig(**TINY, num_labels=3)))
    classifier.save_pretrained(tmp_path / "classifier")
    body = {k.removeprefix("swin."): v for k, v in classifier.state_dict().items() if k.startswith("swin.")}
    with caplog.at_level("WARNING"):
        bare = hf_xcv.SwinModel.from_pretrained(tmp_path / "classifier")
        backbone = hf_xcv.SwinBackbone.from_pretrained(tmp_path / "classifier", out_features=["stage1", "stage2"])
    report = "that this SwinBackbone (attention_type='shifted_window') has and the checkpoint (a SwinForImage"
    assert caplog.text.count(report) == 1
    assert "parameters hidden_states_norms.stage1.bias, hidden_states_norms.stage1.weight, hidden_states_norms" in (
        caplog.text
    )
    for name, tensor in bare.state_dict().items():
        assert torch.equal(tensor, body[name]), name
    for name, tensor in backbone.state_dict().items():
        if name.startswith("hidden_states_norms."):  # new: a LayerNorm's start
            assert torch.equal(tensor, torch.ones_like(tensor) if name.endswith("weight") else torch.zeros_like(tensor))
        else:
            assert torch.equal(tensor, body[name.removeprefix("swin.")]), name
    # and back: each saved, then loaded as the classifier (its final norm or head new where the source had none)
    for source in (bare, randomized(backbone)):
        folder = tmp_path / type(source).__name__
        source.save_pretrained(folder)
        caplog.clear()
        with caplog.at_level("WARNING"):
            again = hf_xcv.SwinForImageClassification.from_pretrained(folder)
        assert "newly initialised task-head weights (train before use): classifier.bias, classifier" in caplog.text
        if source is backbone:
            assert "(attention_type='shifted_window') has and the checkpoint (a SwinBackbone as saved)" in caplog.text
            assert "checkpoint weights this model does not use: hidden_states_norms.stage1.bias" in caplog.text
        ours = again.state_dict()
        for name, tensor in source.state_dict().items():
            if not name.startswith("hidden_states_norms."):
                assert torch.equal(ours[name if name.startswith("swin.") else f"swin.{name}"], tensor), name
    weights = safetensors.torch.load_file(tmp_path / "classifier" / "model.safetensors")
    del weights["swin.encoder.layers.1.blocks.1.mlp.fc1.weight"]
    safetensors.torch.save_file(weights, tmp_path / "classifier" / "model.safetensors", metadata={"format": "pt"})
    for cls in (hf_xcv.SwinModel, hf_xcv.SwinBackbone):
        with pytest.raises(ValueError, match=r"missing 1 weights of the model: (swin\.)?encoder\.layers\.1\.blocks\.1"):
            cls.from_pretrained(tmp_path / "classifier")


def test_a_transformers_swin_classifier_loads_into_the_backbone_by_converting_on_load(tmp_path):
    theirs = their_classifier()
    theirs.save_pretrained(tmp_path)
    ours = hf_xcv.SwinBackbone.from_pretrained(tmp_path, out_features=["stage2", "stage4"]).eval()
    reference = transformers.SwinBackbone(transformers.SwinConfig(**SMALL, out_features=["stage2", "stage4"]))
    reference.load_state_dict(theirs.state_dict(), strict=False)  # the body; its norms start as ours do
    x = pixels(224, 224, batch=1)
    with torch.no_grad():
        for a, b in zip(reference.eval()(x).feature_maps, ours(x).feature_maps):
            assert (a - b).abs().max() <= TOL * 10


def test_attention_maps_are_on_the_graph_with_transformers_gradients_per_window():
    """The maps returned are what the values are computed from: the retained gradients of ``attentions`` are
    transformers' per-window ones, and those of ``token_attentions`` the same scattered into token order (padding
    tokens left out), at a padded size with shifted windows."""
    theirs = their_classifier()
    ours = ours_from(theirs)
    theirs.set_attn_implementation("eager")
    x = pixels(200, 250)
    a, b = theirs(x, output_attentions=True), ours(x, output_attentions=True)
    for maps in (*a.attentions, *b.attentions, *b.token_attentions):
        maps.retain_grad()
    a.logits.sin().sum().backward()
    b.logits.sin().sum().backward()
    grid = (50, 63)
    for theirs_maps, ours_maps, tokens in zip(a.attentions, b.attentions, b.token_attentions):
        window, shift = window_and_shift(grid, 7, 3)  # the last block of every stage is a shifted one
        torch.testing.assert_close(ours_maps.grad, theirs_maps.grad, atol=1e-7, rtol=1e-4)
        expected = window_maps_to_tokens(theirs_maps.grad, grid, window, shift, batch=2)
        assert tokens.grad is not None and tokens.grad.shape == expected.shape
        torch.testing.assert_close(tokens.grad, expected, atol=1e-7, rtol=1e-4)
        grid = (-(-grid[0] // 2), -(-grid[1] // 2))


def test_the_shifted_window_bias_is_the_nine_regions_of_the_paper():
    """The region mask built as the original code does: nine slices of the rolled image, -100 between regions."""
    size, window, shift = 8, 4, 2
    img = torch.zeros(size, size)
    count = 0
    for rows in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
        for cols in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
            img[rows, cols] = count
            count += 1
    windows = img.view(size // window, window, size // window, window).permute(0, 2, 1, 3).reshape(-1, window**2)
    expected = (windows[:, None, :] != windows[:, :, None]).float() * -100.0
    assert torch.equal(region_bias((size, size), window, shift), expected)
    assert region_bias((size, size), window, 0) is None


def test_window_attention_is_dense_attention_inside_windows_with_the_table_bias():
    """Window 7 on a 3x3 grid: one window, no shift, the offsets read from the 13x13 table."""
    core = build_attention("shifted_window", 2, 8, window_size=7, shift_size=3).double().eval()
    q, k, v = (torch.randn(1, 2, 9, 8, dtype=torch.float64) for _ in range(3))
    rows, cols = torch.arange(9) // 3, torch.arange(9) % 3
    index = (rows[:, None] - rows[None] + 6) * 13 + (cols[:, None] - cols[None] + 6)
    bias = core.relative_position_bias_table[index].permute(2, 0, 1)  # (H, 9, 9)
    expected = dense_attention(q, k, v, bias=bias[None])[0]
    assert (core(q, k, v, grid=(3, 3)).values - expected).abs().max() < 1e-12
    assert core.window_and_shift((3, 3)) == (3, 0)
    keep_shift = build_attention("shifted_window", 2, 8, window_size=7, shift_size=3, shrink_to_grid=False)
    assert keep_shift.window_and_shift((3, 3)) == (7, 3)


def test_vit_uses_window_attention_on_its_patch_grid_by_one_field():
    config = hf_xcv.ViTConfig(
        image_size=32, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        attention_type="shifted_window", attention_kwargs={"window_size": 4, "shift_size": 2},
    )  # fmt: skip
    model = hf_xcv.ViTModel(config).eval()
    x = pixels(32, 32, batch=1)
    with torch.no_grad():
        out = model(x, output_attentions=True)
    weights = out.attentions[0][0, 0]  # (1 + 64, 1 + 64): [CLS] sees everything, a patch its window and [CLS]
    assert (weights[0] > 0).all()
    assert (weights[1:, 0] > 0).all()
    # patch (1, 1) rolls by -2 to (7, 7): the last window's corner region, the 2x2 patches of the image's corners
    seen = sorted(int(i) - 1 for i in torch.nonzero(weights[1 + 9] > 1e-30) if i > 0)
    assert seen == [0, 1, 8, 9] and weights[1 + 9, 0] > 0


def test_shrunken_windows_and_odd_sizes_run_where_transformers_fails():
    ours = ours_from(their_classifier())
    with torch.no_grad():
        logits = ours(pixels(96, 130)).logits  # stage 4 grid 3x5: window 3, no shift; transformers raises
    assert logits.shape == (2, 5) and torch.isfinite(logits).all()


def test_the_processor_is_the_original_evaluation_transform():
    array = np.random.default_rng(0).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    image = Image.fromarray(array)
    processor = hf_xcv.XcvSwinImageProcessor()
    out = processor(image, return_tensors="pt")["pixel_values"]
    resized = image.resize((341, 256), Image.BICUBIC)  # short side 256 = int(224 / 0.875)
    left, top = (341 - 224) // 2, (256 - 224) // 2
    cropped = np.asarray(resized.crop((left, top, left + 224, top + 224)), dtype=np.float32) / 255.0
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    expected = torch.from_numpy(((cropped - mean) / std).transpose(2, 0, 1)).float()[None]
    assert out.shape == (1, 3, 224, 224)
    assert (out - expected).abs().max() < 1e-4
    assert processor.to_dict()["image_processor_type"] == "XcvSwinImageProcessor"
    assert not hasattr(transformers, "XcvSwinImageProcessor")
    gray = Image.fromarray(array[..., 0])  # coerced to RGB as hf_xcv's ViT processor does
    assert processor(gray, return_tensors="pt")["pixel_values"].shape == (1, 3, 224, 224)
    at_384 = hf_xcv.XcvSwinImageProcessor(crop_size={"height": 384, "width": 384}, crop_pct=0.875)
    assert at_384.size == {"shortest_edge": 438}
    with pytest.raises(ValueError, match="crop_pct must be a fraction"):
        hf_xcv.XcvSwinImageProcessor(crop_pct=1.5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"depths": [2, 2], "num_heads": [2, 4, 8]}, "depths .* and num_heads .* one entry per stage"),
        ({"embed_dim": 30, "num_heads": [4, 4, 4, 4]}, r"num_heads\[0\]=4 does not divide stage 1's width"),
        ({"window_size": 0}, "window_size must be an integer >= 1"),
        ({"depths": []}, "depths must be a non-empty list"),
        ({"drop_path_rate": 1.0}, "drop_path_rate must be a probability"),
        ({"attention_kwargs": {"window_size": 5}}, r"attention_kwargs \['window_size'\] are set by each Swin block"),
        ({"attention_type": "xl"}, "attention_type='xl' cannot serve a Swin stage"),
    ],
)
def test_config_errors_name_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        hf_xcv.SwinConfig(**{**SMALL, **overrides})


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (torch.randn(2, 1, 64, 64), "have 1 channels but the model expects num_channels=3"),
        (torch.randn(3, 64, 64), r"must have shape \(batch, channels, height, width\)"),
        (torch.randn(1, 3, 0, 64), "empty side"),
        (np.zeros((1, 3, 64, 64)), "must be a torch.Tensor"),
    ],
)
def test_bad_pixels_are_refused_by_name(x, message):
    model = hf_xcv.SwinModel(hf_xcv.SwinConfig(**SMALL))
    with pytest.raises(ValueError, match=message):
        model(x)


def test_the_paper_presets_have_the_published_sizes():
    expected = {
        "swin-tiny-patch4-window7-224": 28.29,
        "swin-small-patch4-window7-224": 49.61,
        "swin-base-patch4-window7-224": 87.77,
        "swin-base-patch4-window12-384": 87.90,
    }
    for name, millions in expected.items():
        with torch.device("meta"):
            model = hf_xcv.SwinForImageClassification(hf_xcv.preset_config(name, num_labels=1000))
        assert round(sum(p.numel() for p in model.parameters()) / 1e6, 2) == millions, name


def test_no_weight_decay_on_bias_tables_positions_norms_and_biases():
    from hf_xcv.training import parameter_groups

    model = hf_xcv.SwinForImageClassification(hf_xcv.SwinConfig(**{**SMALL, "use_absolute_embeddings": True}))
    decayed, exempt = parameter_groups(model, 0.05)
    names = {id(p): n for n, p in model.named_parameters()}
    exempt_names = {names[id(p)] for p in exempt["params"]}
    assert exempt["weight_decay"] == 0.0 and decayed["weight_decay"] == 0.05
    assert {n for n in names.values() if "relative_position_bias_table" in n} <= exempt_names
    assert "swin.embeddings.position_embeddings" in exempt_names
    assert all(names[id(p)].endswith("weight") and p.ndim > 1 for p in decayed["params"])
    assert len(decayed["params"]) + len(exempt["params"]) == len(names)


def test_swin_compiles_into_one_graph_at_any_size():
    model = hf_xcv.SwinForImageClassification(hf_xcv.preset_config("swin-test-tiny", num_labels=3)).eval()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    for size in [(16, 16), (18, 22)]:  # the second padded to the patch, the windows and the merging
        x = pixels(*size)
        with torch.no_grad():
            assert torch.equal(compiled(pixel_values=x).logits, model(pixel_values=x).logits)


def test_swin_traces_its_loss_with_dynamic_sizes_after_another_size():
    """Once dynamo has seen two sizes it traces the next Swin with symbolic sizes, where the windows per image are
    written two ways (ceil(H / 2 / 2) and H // 4): the attention's input checks must not refuse what they cannot
    prove equal (a failure seen only when this ran after another compile in one process)."""
    torch._dynamo.reset()
    first = hf_xcv.SwinForImageClassification(hf_xcv.preset_config("swin-test-tiny", num_labels=3)).eval()
    compiled = torch.compile(first, fullgraph=True, backend="eager")
    with torch.no_grad():
        for size in [(16, 16), (18, 22)]:
            compiled(pixel_values=pixels(*size))
    model = hf_xcv.SwinForImageClassification(hf_xcv.preset_config("swin-test-tiny", num_labels=3)).eval()
    x, labels = pixels(16, 16).expand(2, -1, -1, -1), torch.tensor([0, 2])
    loss = torch.compile(model, fullgraph=True, backend="eager")(pixel_values=x, labels=labels).loss
    torch.testing.assert_close(loss, model(pixel_values=x, labels=labels).loss)
