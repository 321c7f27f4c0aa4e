"""TTSR: the paper's size, the texture attention against naive computations (dense relevance, the original's unfold /
gather / fold written as loops), chunked = unchunked, the weighted-transfer ablation, gradients, bad inputs and
configs. The registry-driven tests (tests/test_models_common.py, test_export.py, ...) cover save/load, Auto classes,
export and the attention entries."""

from __future__ import annotations

import pytest
import torch
from model_specs.ttsr import ttsr_dummy_inputs
from torch.nn import functional as F
from transformers import AutoModel, AutoModelForImageToImage

import hf_xcv
from hf_xcv import TTSRConfig, TTSRForReferenceSuperResolution, TTSRModel, preset_config
from hf_xcv.attention.operators.texture import best_matches, matched_relevance, patch_vectors, transfer_textures
from hf_xcv.models.ttsr.modeling_ttsr import upsample


def tiny(**overrides) -> TTSRConfig:
    return preset_config("ttsr-test-tiny", **overrides)


def inputs_of(lr_size, ref_size, batch=2, seed=0, generator=None) -> dict[str, torch.Tensor]:
    """Random LR and reference in [-1, 1] with their bicubic companions (the model takes any values)."""
    generator = generator or torch.Generator().manual_seed(seed)
    lr = torch.rand(batch, 3, *lr_size, generator=generator) * 2 - 1
    ref = torch.rand(batch, 3, *ref_size, generator=generator) * 2 - 1
    return {
        "pixel_values": lr,
        "upsampled_pixel_values": upsample(lr, 4),
        "reference_pixel_values": ref,
        "degraded_reference_pixel_values": upsample(F.avg_pool2d(ref, 4), 4),
    }


# ---------------------------------------------------------------------------------------------------------------
# size


def test_paper_settings_build_the_published_model_with_the_published_shapes():
    torch.manual_seed(0)
    model = TTSRForReferenceSuperResolution(preset_config("ttsr")).eval()
    count = sum(p.numel() for p in model.parameters())
    extractor = sum(p.numel() for p in model.ttsr.texture_extractor.parameters())
    assert count == 6_729_603  # the research notes' 6.73M: 6.174M main network + 0.555M texture extractor
    assert extractor == 555_328
    with torch.no_grad():  # LR 40x40, reference 160x160 (CUFED's training sizes)
        out = model(**inputs_of((40, 40), (160, 160), batch=1))
    assert out.reconstruction.shape == (1, 3, 160, 160)
    assert out.soft_attention.shape == (1, 1, 40, 40)
    assert [tuple(t.shape) for t in out.transferred_textures] == [(1, 256, 40, 40), (1, 128, 80, 80), (1, 64, 160, 160)]
    assert out.reconstruction.abs().max() <= 1.0


# ---------------------------------------------------------------------------------------------------------------
# the texture attention against naive computations


def dense_matches(queries: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The original's relevance: the whole (queries x keys) matrix at once, then its max and arg-max, in float64."""
    relevance = torch.bmm(queries.double(), keys.double().transpose(1, 2))  # (B, Lq, Lk)
    return relevance.max(dim=2)


def test_best_matches_and_soft_attention_equal_the_dense_relevance_matrix():
    generator = torch.Generator().manual_seed(1)
    query_maps, key_maps = torch.randn(2, 5, 9, 7, generator=generator), torch.randn(2, 5, 8, 11, generator=generator)
    queries, keys = patch_vectors(query_maps), patch_vectors(key_maps)
    # the original: F.unfold(3, padding=1) and F.normalize over the patch vector
    expected_q = F.normalize(F.unfold(query_maps, 3, padding=1), dim=1).transpose(1, 2)
    torch.testing.assert_close(queries, expected_q)
    values, indices = dense_matches(queries, keys)
    index = best_matches(queries, keys, chunk_size=64)
    assert torch.equal(index, indices)
    torch.testing.assert_close(matched_relevance(queries, keys, index).double(), values, atol=1e-6, rtol=0)


def naive_transfer(values: torch.Tensor, index: torch.Tensor, grid, reference_grid, scale: int) -> torch.Tensor:
    """The original's transfer written as loops: for each query, the 3s x 3s reference patch (stride s, padding s)
    at its match, added into the output where the query's own patch lies, then everything divided by 9."""
    batch, channels = values.shape[:2]
    (height, width), (_, ref_width) = grid, reference_grid
    kernel = 3 * scale
    padded = F.pad(values, (scale, scale, scale, scale))
    out = torch.zeros(batch, channels, scale * height + 2 * scale, scale * width + 2 * scale, dtype=values.dtype)
    for b in range(batch):
        for qy in range(height):
            for qx in range(width):
                ry, rx = divmod(int(index[b, qy * width + qx]), ref_width)
                patch = padded[b, :, scale * ry : scale * ry + kernel, scale * rx : scale * rx + kernel]
                out[b, :, scale * qy : scale * qy + kernel, scale * qx : scale * qx + kernel] += patch
    return out[:, :, scale : scale + scale * height, scale : scale + scale * width] / 9


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_the_hard_attention_transfer_equals_a_naive_loop(scale):
    generator = torch.Generator().manual_seed(scale)
    grid, reference_grid = (5, 4), (3, 6)
    values = torch.randn(2, 3, scale * 3, scale * 6, generator=generator, dtype=torch.float64)
    index = torch.randint(0, 18, (2, 20), generator=generator)
    ours = transfer_textures(values, index, grid, reference_grid, scale)
    torch.testing.assert_close(ours, naive_transfer(values, index, grid, reference_grid, scale), atol=1e-12, rtol=0)


def reference_with_repeats(batch: int = 2) -> torch.Tensor:
    """A 96x88 reference with flat areas and a repeated tile: many 3x3 patches are exactly equal (ties)."""
    generator = torch.Generator().manual_seed(3)
    ref = torch.rand(batch, 3, 96, 88, generator=generator) * 2 - 1
    tile = ref[:, :, :16, :16].clone()
    ref[:, :, 48:64, :16], ref[:, :, 48:64, 32:48], ref[:, :, 80:96, 64:80] = tile, tile, tile
    ref[:, :, 16:40, 40:88] = 0.25  # flat
    return ref


def test_chunked_relevance_gives_results_identical_to_one_block():
    """The memory bound changes nothing: 64-position blocks (9 x 9 of them) and one block of everything give the same
    matches, soft attention, textures and reconstruction, bit for bit, also where many reference patches tie."""
    ref = reference_with_repeats()
    lr = torch.rand(2, 3, 24, 22, generator=torch.Generator().manual_seed(4)) * 2 - 1
    lr[:, :, 5:12, 3:9] = 0.25  # flat where the reference is flat too: exact ties across blocks
    inputs = {
        "pixel_values": lr,
        "upsampled_pixel_values": upsample(lr, 4),
        "reference_pixel_values": ref,
        "degraded_reference_pixel_values": upsample(F.avg_pool2d(ref, 4), 4),
    }
    torch.manual_seed(0)
    chunked = TTSRForReferenceSuperResolution(tiny(relevance_chunk_size=64)).eval()
    whole = TTSRForReferenceSuperResolution(tiny(relevance_chunk_size=100_000)).eval()
    whole.load_state_dict(chunked.state_dict())
    with torch.no_grad():
        a, b = chunked(**inputs, output_attentions=True), whole(**inputs, output_attentions=True)
    assert torch.equal(a.attentions[0], b.attentions[0])  # the same match for every position
    assert torch.equal(a.soft_attention, b.soft_attention)
    for x, y in zip(a.transferred_textures, b.transferred_textures):
        assert torch.equal(x, y)
    assert torch.equal(a.reconstruction, b.reconstruction)
    # and the matches are the dense matrix's (the first among equals)
    features = chunked.ttsr.texture_extractor
    queries = patch_vectors(features(inputs["upsampled_pixel_values"])[2])
    keys = patch_vectors(features(inputs["degraded_reference_pixel_values"])[2])
    assert torch.equal(a.attentions[0].argmax(-1).squeeze(1), torch.bmm(queries, keys.transpose(1, 2)).argmax(-1))


def test_the_weighted_transfer_tends_to_the_hard_attention_as_its_temperature_falls():
    """The ablation's core (softmax over the relevances) with a temperature near 0 copies the best patch, as the hard
    attention does: the same textures, so both implementations of the transfer agree."""
    torch.manual_seed(0)
    hard = TTSRModel(tiny()).double().eval()  # float64: the best and second-best relevances lie far apart at 1e-7
    soft = TTSRModel(tiny(attention_type="full", transfer_temperature=1e-7)).double().eval()
    soft.load_state_dict(hard.state_dict())
    inputs = {k: v.double() for k, v in inputs_of((6, 7), (32, 28)).items()}
    with torch.no_grad():
        a, b = hard(**inputs), soft(**inputs)
    for x, y in zip(a.transferred_textures, b.transferred_textures):
        torch.testing.assert_close(x, y, atol=1e-9, rtol=0)
    warm = TTSRModel(tiny(attention_type="full", transfer_temperature=1.0)).double().eval()
    warm.load_state_dict(hard.state_dict())
    with torch.no_grad():  # a warm softmax averages the patches instead: blurred textures
        blurred = warm(**inputs).transferred_textures[2]
    assert blurred.std() < 0.5 * a.transferred_textures[2].std()


def test_gradients_reach_the_texture_extractor_through_the_textures_and_the_soft_attention():
    torch.manual_seed(0)
    model = TTSRForReferenceSuperResolution(tiny()).train()
    out = model(**inputs_of((6, 5), (24, 20)))
    extractor = model.ttsr.texture_extractor
    first = extractor.slice1[0].weight
    (grad_texture,) = torch.autograd.grad(out.transferred_textures[2].sum(), first, retain_graph=True)
    (grad_soft,) = torch.autograd.grad(out.soft_attention.sum(), extractor.slice3[3].weight, retain_graph=True)
    assert grad_texture.abs().sum() > 0 and grad_soft.abs().sum() > 0
    image = out.reconstruction.detach().requires_grad_()
    frozen = extractor.frozen(image)[2].sum()  # LTE_copy: the input gets a gradient, the weights none
    grads = torch.autograd.grad(frozen, [image, first], allow_unused=True)
    assert grads[0].abs().sum() > 0 and (grads[1] is None or grads[1].abs().sum() == 0)


def test_compiles_into_one_graph():
    torch.manual_seed(0)
    model = TTSRForReferenceSuperResolution(tiny()).eval()
    inputs = inputs_of((6, 5), (28, 24))
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(**inputs).reconstruction, model(**inputs).reconstruction)


def test_loss_is_the_weighted_l1_and_honours_num_items_in_batch():
    torch.manual_seed(0)
    model = TTSRForReferenceSuperResolution(tiny(reconstruction_loss_weight=2.0)).eval()
    inputs = ttsr_dummy_inputs(model)
    with torch.no_grad():
        out = model(**inputs)
        expected = 2.0 * (out.reconstruction - inputs["labels"]).abs().mean()
        torch.testing.assert_close(out.loss, expected)
        summed = model(**inputs, num_items_in_batch=10).loss
    torch.testing.assert_close(summed, 2.0 * (out.reconstruction - inputs["labels"]).abs().sum() / 10)


def test_auto_classes_load_the_model_and_its_base(tmp_path):
    model = TTSRForReferenceSuperResolution(tiny()).eval()
    model.save_pretrained(tmp_path)
    hf_xcv.TTSRImageProcessor().save_pretrained(tmp_path)
    assert type(AutoModelForImageToImage.from_pretrained(tmp_path)) is TTSRForReferenceSuperResolution
    base = AutoModel.from_pretrained(tmp_path)  # the task head is left over: allowed
    assert type(base) is TTSRModel
    inputs = inputs_of((6, 5), (24, 24))
    with torch.no_grad():
        assert torch.equal(base(**inputs).last_hidden_state, model.ttsr(**inputs).last_hidden_state)


# ---------------------------------------------------------------------------------------------------------------
# bad inputs and configs


def bad(**changes) -> dict[str, torch.Tensor]:
    inputs = inputs_of((6, 5), (24, 24))
    inputs.update(changes)
    return {k: v for k, v in inputs.items() if v is not None}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"degraded_reference_pixel_values": None}, r"\['degraded_reference_pixel_values'\] missing"),
        ({"reference_pixel_values": torch.zeros(2, 4, 24, 24)}, "reference_pixel_values have 4 channels"),
        ({"upsampled_pixel_values": torch.zeros(2, 3, 20, 24)}, r"not 4x the input's \(6, 5\)"),
        ({"pixel_values": torch.zeros(2, 3, 24, 20), "upsampled_pixel_values": torch.zeros(2, 3, 6, 5)}, "swapped"),
        ({"reference_pixel_values": torch.zeros(2, 3, 26, 24)}, "multiples of 4"),
        (
            {"pixel_values": torch.zeros(2, 3, 30, 30), "upsampled_pixel_values": torch.zeros(2, 3, 120, 120)},
            r"input \(30x30\) is larger than the reference \(24x24\)",
        ),
        ({"pixel_values": torch.zeros(2, 3, 2, 5), "upsampled_pixel_values": torch.zeros(2, 3, 8, 20)}, "3x3"),
        ({"labels": torch.zeros(2, 3, 20, 20)}, "labels of shape"),
        ({"pixel_values": torch.zeros(1, 3, 6, 5)}, "different batch sizes"),
        ({"pixel_values": torch.zeros(3, 6, 5)}, r"pixel_values must have shape \(batch, channels"),
        ({"reference_pixel_values": torch.zeros(2, 3, 24, 24, dtype=torch.uint8)}, "are torch.uint8: TTSR takes"),
        ({"labels": torch.zeros(2, 3, 24, 20, dtype=torch.uint8)}, "labels are torch.uint8"),
    ],
)
def test_bad_inputs_are_refused_by_name(changes, message):
    model = TTSRForReferenceSuperResolution(tiny()).eval()
    with pytest.raises(ValueError, match=message):
        model(**bad(**changes))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"upscale": 2}, "TTSR is x4 only"),
        ({"num_res_blocks": "16+16+8"}, "num_res_blocks must give"),
        ({"num_res_blocks": [1, 1, -1, 1]}, "num_res_blocks must give"),
        ({"n_feats": 7}, "n_feats must be even"),
        ({"texture_channels": [64, 128]}, "texture_channels must be three widths"),
        ({"relevance_chunk_size": 8}, "relevance_chunk_size must be an integer >= 64"),
        ({"attention_kwargs": {"nb_features": 8}}, "with attention_type=None"),
        ({"attention_type": "axial"}, r"attention_type='axial' cannot serve TTSR's texture transfer"),
        ({"attention_type": "nope"}, "is not allowed"),
        ({"transfer_temperature": 0}, "transfer_temperature must be a finite positive number"),
        ({"num_channels": 1}, "TTSR takes RGB images"),
        ({"num_attention_heads": 4}, "follows from texture_channels"),
        ({"num_hidden_layers": 2}, "TTSR's 3 stages"),
    ],
)
def test_bad_configs_are_refused_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny(**overrides)
