"""IPT: parameter counts at the paper's settings, tasks, tiled inference (exact on one tile, seam-free, any batch),
the x8 self-ensemble, the contrastive loss in the training loss, and bad inputs refused by name."""

from __future__ import annotations

import pytest
import torch

import hf_xcv
from hf_xcv import IPTConfig, IPTForImageRestoration, IPTModel
from hf_xcv.models.ipt.modeling_ipt import blend_ramp, ensemble_x8, tile_starts, tiled

PRETRAINING = ["sr_x2", "sr_x3", "sr_x4", "denoise_30", "denoise_50", "derain"]


def tiny(**overrides) -> IPTConfig:
    return hf_xcv.preset_config("ipt-test-tiny", **overrides)


def model(**overrides) -> IPTForImageRestoration:
    torch.manual_seed(0)
    return IPTForImageRestoration(tiny(**overrides)).eval()


def images(batch: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(batch, 3, height, width, generator=torch.Generator().manual_seed(seed)) * 255


@pytest.mark.parametrize(
    ("tasks", "count"),
    [
        (["sr_x2"], 115_460_419),  # the paper's 115.5M (the official checkpoint's parameters, mean shifts excluded)
        (["sr_x3"], 115_645_059),
        (["sr_x4"], 115_608_131),
        (["denoise_30"], 115_312_707),
        (PRETRAINING, 118_892_370),  # IPT_pretrain.pt: six heads, tails and task queries
    ],
)
def test_parameter_counts_at_the_papers_settings(tasks, count):
    with torch.device("meta"):
        ipt = IPTForImageRestoration(IPTConfig(tasks=tasks))
    assert sum(p.numel() for p in ipt.parameters()) == count
    assert ipt.config.hidden_size == 576 and ipt.config.num_patches == 256 and ipt.config.intermediate_size == 2304


def test_shapes_per_task_and_the_task_parts_used():
    ipt = model(tasks=["sr_x2", "sr_x3", "sr_x4", "denoise_30", "derain", "deblur"], task_scales={"deblur": 1})
    x = images(2, 12, 12)
    for task, scale in [("sr_x2", 2), ("sr_x3", 3), ("sr_x4", 4), ("denoise_30", 1), ("derain", 1), ("deblur", 1)]:
        assert ipt(x, task=task).reconstruction.shape == (2, 3, 12 * scale, 12 * scale)
    ipt.train()
    ipt(x, task="sr_x3").reconstruction.square().mean().backward()
    touched = {name.split(".")[2] for name, p in ipt.named_parameters() if p.grad is not None and "heads" in name}
    tails = {name.split(".")[1] for name, p in ipt.named_parameters() if p.grad is not None and "tails" in name}
    assert touched == {"sr_x3"} and tails == {"sr_x3"}
    queries = {name: query.grad for name, query in ipt.ipt.body.query_embeddings.items()}
    assert queries.pop("sr_x3").abs().sum() > 0 and all(grad is None for grad in queries.values())  # its own only


def test_tasks_load_by_name_in_any_order():
    """Heads, tails and task queries are keyed by task name: a checkpoint loads with its tasks listed in another
    order, each task giving the same output."""
    import tempfile

    original = model(tasks=["sr_x2", "denoise_30"])
    x = images(1, 12, 12)
    with tempfile.TemporaryDirectory() as folder:
        original.save_pretrained(folder)
        swapped = IPTForImageRestoration.from_pretrained(folder, tasks=["denoise_30", "sr_x2"]).eval()
    with torch.no_grad():
        for task in ("sr_x2", "denoise_30"):
            assert torch.equal(swapped(x, task=task).reconstruction, original(x, task=task).reconstruction)


def test_tasks_differ_and_default_task_needs_a_single_one():
    ipt = model(tasks=["denoise_30", "derain"])
    x = images(1, 12, 12)
    with torch.no_grad():
        assert not torch.allclose(ipt(x, task="denoise_30").reconstruction, ipt(x, task="derain").reconstruction)
    with pytest.raises(ValueError, match=r"holds 2 tasks: choose one with task=, one of \['denoise_30', 'derain'\]"):
        ipt(x)
    with pytest.raises(ValueError, match=r"unknown task 'sr_x4'; this IPT was built for \['denoise_30', 'derain'\]"):
        ipt(x, task="sr_x4")
    single = model()
    with torch.no_grad():
        torch.testing.assert_close(single(x).reconstruction, single(x, task="sr_x2").reconstruction)


def test_mean_shift_is_the_official_constant():
    ipt = model(rgb_range=1)
    expected = torch.tensor([0.4488, 0.4371, 0.4040]).view(1, 3, 1, 1)
    torch.testing.assert_close(ipt.ipt.sub_mean.shift, -expected)
    torch.testing.assert_close(ipt.add_mean.shift, expected)
    assert "ipt.sub_mean.shift" not in ipt.state_dict()  # a constant of the config, not a weight


# ----------------------------------------------------------------------------------------------------------
# Tiled inference


def test_tile_starts_cover_the_image_flush_with_its_end():
    assert tile_starts(48, 48, 12) == [0]
    assert tile_starts(100, 48, 12) == [0, 36, 52]
    assert tile_starts(84, 48, 12) == [0, 36]
    with pytest.raises(ValueError, match="smaller than one tile"):
        tile_starts(40, 48, 12)


def test_tiled_equals_whole_on_a_one_tile_image_and_the_model_tiles_beyond():
    ipt = model()
    x = images(2, 12, 12)
    with torch.no_grad():
        whole = ipt.restore_tiles(x, "sr_x2")
        assert torch.equal(ipt(x).reconstruction, whole)
        assert torch.equal(tiled(lambda t: ipt.restore_tiles(t, "sr_x2"), x, 12, 3, 2, 2), whole)
        big = images(2, 30, 41)
        assert ipt(big).reconstruction.shape == (2, 3, 60, 82)


def test_tiled_batches_equal_one_image_at_a_time_and_any_tile_batch():
    ipt = model()
    x = images(3, 20, 27)
    with torch.no_grad():
        together = ipt(x).reconstruction
        alone = torch.cat([ipt(x[i : i + 1]).reconstruction for i in range(3)])
        ipt.config.tile_batch_size = 2
        small_batches = ipt(x).reconstruction
    torch.testing.assert_close(together, alone, atol=1e-3, rtol=1e-5)
    torch.testing.assert_close(small_batches, together, atol=1e-3, rtol=1e-5)


def test_each_output_pixel_is_a_weighted_mean_of_the_tiles_predictions():
    """A tile function that returns a constant per tile: every pixel lies between the constants of the tiles that
    cover it, and a pixel covered by one tile is exactly its constant."""
    counter = iter(range(1000))

    def constant_per_tile(tiles: torch.Tensor) -> torch.Tensor:
        values = torch.tensor([float(next(counter)) for _ in range(tiles.shape[0])])
        return values.view(-1, 1, 1, 1).expand(-1, 3, 10, 10).clone()

    out = tiled(constant_per_tile, torch.zeros(1, 3, 16, 10), 10, 4, 1, 8)  # rows: tiles at 0 and 6
    assert torch.equal(out[0, :, :6], torch.zeros(3, 6, 10)) and torch.equal(out[0, :, 10:], torch.ones(3, 6, 10))
    overlap = out[0, 0, 6:10, 0]
    assert (overlap > 0).all() and (overlap < 1).all() and (overlap.diff() > 0).all()  # from the upper tile's value
    assert torch.equal(out[0, 0, 6:10], overlap[:, None].expand(4, 10))  # to the lower one's, row by row


def test_blending_removes_seams_that_stitching_leaves():
    """Tile predictions with an artefact near every tile edge (as a network's zero padding makes): stitching without
    overlap leaves a jump at the tile borders; the blended output is as smooth there as inside the tiles, and differs
    from a larger overlap's output at the borders by no more than elsewhere."""
    edge = 1.0 - blend_ramp(16, 4, torch.float32, torch.device("cpu"))  # ~1 at the tile's edges, 0 from 4 pixels in
    side = torch.where(torch.arange(16) < 8, edge, -edge)  # + near the left / top edge, - near the right / bottom
    artefact = 20.0 * (side[:, None] + side[None, :])

    def with_edge_artefact(tiles: torch.Tensor) -> torch.Tensor:
        return tiles + artefact

    ramp = torch.linspace(0, 100, 64)
    image = (ramp[None, :] + ramp[:, None]).expand(1, 3, 64, 64).contiguous()

    def excess_jump(overlap: int) -> float:
        """The largest jump between neighbouring columns beyond the image's own slope (100 / 63 per column)."""
        out = tiled(with_edge_artefact, image, 16, overlap, 1, 64)[0, 0]
        jumps = (out[:, 1:] - out[:, :-1]).abs().amax(0)  # (63,) between column j and j + 1
        return float(jumps.max()) - 100 / 63

    stitched, blended = excess_jump(0), excess_jump(8)
    assert stitched > 30  # the artefacts of neighbouring tiles meet: a seam of about 2 x 17.5
    assert blended < 0.1 * stitched  # blending leaves a tenth of it at most
    far = tiled(with_edge_artefact, image, 16, 12, 1, 64)  # the larger overlap
    inner = (slice(None), slice(None), slice(16, 48), slice(16, 48))  # away from the image's own borders
    stitched_gap = (tiled(with_edge_artefact, image, 16, 0, 1, 64) - far)[inner].abs().max()
    blended_gap = (tiled(with_edge_artefact, image, 16, 8, 1, 64) - far)[inner].abs().max()
    assert blended_gap < 0.3 * stitched_gap  # 4.7 against 35


def test_self_ensemble_is_the_mean_over_the_eight_symmetries_and_equivariant():
    ipt = model(tasks=["denoise_30"])
    x = images(1, 12, 16)
    with torch.no_grad():
        ensemble = ipt(x, self_ensemble=True).reconstruction
        manual = []
        for flip in (False, True):
            for turns in range(4):
                view = torch.rot90(x.flip(-1) if flip else x, turns, (-2, -1))
                out = torch.rot90(ipt(view).reconstruction, -turns, (-2, -1))
                manual.append(out.flip(-1) if flip else out)
        torch.testing.assert_close(ensemble, torch.stack(manual).mean(0), atol=1e-3, rtol=1e-5)
        flipped = ipt(x.flip(-1), self_ensemble=True).reconstruction
        torch.testing.assert_close(flipped, ensemble.flip(-1), atol=1e-3, rtol=1e-5)
    torch.testing.assert_close(ensemble_x8(lambda t: t * 2, x), x * 2)


# ----------------------------------------------------------------------------------------------------------
# Loss


def test_loss_is_l1_plus_the_weighted_contrastive_loss():
    from hf_xcv.losses.contrastive import supervised_contrastive_loss

    x, labels = images(2, 12, 12), images(2, 24, 24, seed=1)
    plain = model()
    out = plain(x, labels=labels)
    torch.testing.assert_close(out.loss, (out.reconstruction - labels).abs().mean())
    weighted = model(contrastive_loss_weight=0.1, contrastive_temperature=0.07)
    out = weighted(x, labels=labels, output_patch_features=True)
    expected = (out.reconstruction - labels).abs().mean() + 0.1 * supervised_contrastive_loss(
        out.patch_features, temperature=0.07
    )
    torch.testing.assert_close(out.loss, expected)
    assert out.patch_features.shape == (2, 16, 72)


# ----------------------------------------------------------------------------------------------------------
# Bad inputs and configs


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (dict(pixel_values=torch.rand(1, 4, 12, 12)), "4 channels but the model expects num_channels=3"),
        (dict(pixel_values=torch.rand(1, 1, 12, 12)), "1 channels but the model expects num_channels=3"),
        (dict(pixel_values=torch.rand(1, 3, 10, 30)), r"the image \(10x30\) is smaller than one tile \(12x12\)"),
        (dict(pixel_values=torch.zeros(1, 3, 12, 12, dtype=torch.uint8)), "IPT takes float images in"),
        (dict(pixel_values=torch.rand(1, 3, 12, 12), labels=torch.rand(1, 3, 12, 12)), "task's scale times"),
        (dict(pixel_values=torch.rand(1, 3, 24, 24), output_attentions=True), "need an input of one tile"),
        (dict(pixel_values=torch.rand(1, 3, 12, 12), self_ensemble=True, output_patch_features=True), "8 passes"),
        (dict(pixel_values=torch.rand(1, 3, 12, 12), mask=torch.ones(1)), "unexpected arguments"),
    ],
)
def test_bad_inputs_are_refused_by_name(inputs, message):
    with pytest.raises(ValueError, match=message):
        model()(**inputs)


def test_the_bare_model_tiles_its_features_too():
    torch.manual_seed(0)
    bare = IPTModel(tiny()).eval()
    with torch.no_grad():
        assert bare(images(1, 12, 12)).last_hidden_state.shape == (1, 8, 12, 12)
        assert bare(images(1, 20, 15)).last_hidden_state.shape == (1, 8, 20, 15)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(tasks=[]), "non-empty list"),
        (dict(tasks=["sr_x2", "sr_x2"]), "distinct"),
        (dict(tasks=["sr_x5"]), "x3 and powers of 2"),
        (dict(tasks=["SR"]), "lower-case letters"),
        (dict(tasks=["deblur"], task_scales={"denoise": 1}), r"task_scales names \['denoise'\]"),
        (dict(tasks=["denoise_30"], task_scales={"denoise_30": 2}), "keeps the image size"),
        (dict(image_size=13), "multiple of patch_size=3"),
        (dict(num_attention_heads=5), "not divisible by num_attention_heads=5"),
        (dict(tile_overlap=12), "smaller than a tile"),
        (dict(num_channels=1), "RGB images"),
        (dict(rgb_range=0), "rgb_range must be"),
        (dict(image_mean=[0.5, 0.5]), "three numbers"),
        (dict(head_kernel_size=4), "odd"),
        (dict(contrastive_loss_weight=-1), "contrastive_loss_weight"),
        (dict(attention_type="nope"), "attention_type='nope' is not allowed"),
    ],
)
def test_bad_configs_are_refused_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny(**overrides)


def test_hidden_size_follows_from_the_patches():
    config = tiny()
    assert config.hidden_size == 8 * 9
    with pytest.raises(ValueError, match="n_feats \\* patch_size\\*\\*2 = 72"):
        config.hidden_size = 64
    assert "hidden_size" not in config.to_dict()


def test_encoder_attention_goes_through_the_registry():
    ipt = model(attention_type="linear")
    encoder, decoder = ipt.ipt.body.encoder[0].self_attn.core, ipt.ipt.body.decoder[0].self_attn.core
    assert type(encoder).__name__ != type(decoder).__name__
    with torch.no_grad():
        assert torch.isfinite(ipt(images(1, 12, 12)).reconstruction).all()
