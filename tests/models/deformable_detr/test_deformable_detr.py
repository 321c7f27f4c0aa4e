"""Deformable DETR: the deformable attention operator against the grid-sample formulation and transformers'
(forward and gradients in float64, points outside the map, gradcheck), padding, the original's initialisation,
box refinement with stopped gradients, the two-stage proposals and encoder loss, save/load and the Auto classes,
the pipeline, export, compile and bad inputs. Parity with transformers and conversion are in
test_deformable_detr_conversion.py."""

from __future__ import annotations

import math

import pytest
import torch
import transformers
from detection_testing import assert_same_detections, padded_batch, randomize_norms
from model_testing import make_inputs
from transformers import AutoImageProcessor, AutoModelForObjectDetection
from transformers.models.deformable_detr.modeling_deformable_detr import (
    MultiScaleDeformableAttention as TransformersMSDA,
)

import hf_xcv
from hf_xcv import DeformableDetrConfig, DeformableDetrForObjectDetection, DeformableDetrModel, preset_config
from hf_xcv.attention.operators.deformable import (
    MultiScaleDeformableAttention,
    deformable_offset_bias,
    level_start_index,
    multi_scale_deformable_attention,
    multi_scale_deformable_attention_reference,
)
from hf_xcv.losses import SetCriterion
from hf_xcv.models.deformable_detr.modeling_deformable_detr import encoder_proposals, inverse_sigmoid

TINY = "deformable-detr-test-tiny"
VARIANTS = {
    "base": {},
    "box_refine": {"with_box_refine": True},
    "two_stage": {"with_box_refine": True, "two_stage": True},
}


def tiny(variant: str = "base", **more) -> DeformableDetrConfig:
    return preset_config(TINY, num_labels=3, **VARIANTS[variant], **more)


def operands(dtype=torch.float64, spread: float = 1.6, seed: int = 0):
    """value, shapes, locations (many outside [0, 1]: ``spread`` around the map), weights for 2 images,
    3 heads of width 4, levels 5x7, 3x2 and 1x1, 3 points, 6 queries."""
    generator = torch.Generator().manual_seed(seed)
    shapes = [(5, 7), (3, 2), (1, 1)]
    rows = sum(h * w for h, w in shapes)
    value = torch.randn(2, rows, 3, 4, generator=generator, dtype=dtype)
    locations = (torch.rand(2, 6, 3, 3, 3, 2, generator=generator, dtype=dtype) - 0.5) * spread + 0.5
    weights = torch.rand(2, 6, 3, 3, 3, generator=generator, dtype=dtype)
    weights = (weights / weights.sum((-1, -2), keepdim=True)).contiguous()
    return value, shapes, locations, weights


# ----------------------------------------------------------------------------------------------------------
# the operator
# ----------------------------------------------------------------------------------------------------------


def transformers_operator(value, shapes, locations, weights):
    return TransformersMSDA()(
        value, torch.tensor(shapes), shapes, torch.tensor(level_start_index(shapes)), locations, weights, 64
    )


@pytest.mark.parametrize("reference", [multi_scale_deformable_attention_reference, transformers_operator])
def test_operator_equals_the_grid_sample_formulation_forward_and_gradients_in_float64(reference):
    value, shapes, locations, weights = operands()
    outside = ((locations < 0) | (locations > 1)).any(-1)
    assert outside.float().mean() > 0.2  # many samples fall (partly or wholly) outside the map
    inputs = [t.clone().requires_grad_() for t in (value, locations, weights)]
    expected_inputs = [t.clone().requires_grad_() for t in (value, locations, weights)]
    got = multi_scale_deformable_attention(inputs[0], shapes, inputs[1], inputs[2])
    expected = reference(expected_inputs[0], shapes, expected_inputs[1], expected_inputs[2])
    assert got.shape == (2, 6, 12)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    grad = torch.randn_like(got)
    for a, b, name in zip(
        torch.autograd.grad(got, inputs, grad),
        torch.autograd.grad(expected, expected_inputs, grad),
        ("value", "sampling_locations", "attention_weights"),
    ):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0, msg=name)
    with torch.no_grad():  # the inference path (no autograd function) is the same computation
        torch.testing.assert_close(
            multi_scale_deformable_attention(value, shapes, locations, weights), expected.detach()
        )


def test_operator_passes_gradcheck():
    value, shapes, locations, weights = operands(spread=1.3, seed=1)
    inputs = tuple(t.requires_grad_() for t in (value, locations, weights))
    assert torch.autograd.gradcheck(lambda v, loc, w: multi_scale_deformable_attention(v, shapes, loc, w), inputs)


def test_operator_in_float32_and_with_a_spatial_shapes_tensor():
    value, shapes, locations, weights = operands(torch.float32)
    got = multi_scale_deformable_attention(value, torch.tensor(shapes), locations, weights)
    expected = multi_scale_deformable_attention_reference(value.double(), shapes, locations.double(), weights.double())
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=0)


def test_samples_wholly_outside_every_map_read_nothing():
    value, shapes, locations, weights = operands()
    far = torch.cat([locations[..., :1] + 3.0, locations[..., 1:] - 2.5], -1)  # at least 1.5 maps away
    assert multi_scale_deformable_attention(value, shapes, far, weights).abs().max() == 0
    edge = torch.full_like(locations, 1.0 + 0.4 / 7)  # within a pixel of the border: partly inside
    assert multi_scale_deformable_attention(value, shapes, edge, weights).abs().max() > 0


def test_operator_refuses_mismatched_operands_by_name():
    value, shapes, locations, weights = operands()
    with pytest.raises(ValueError, match="rows but spatial_shapes"):
        multi_scale_deformable_attention(value[:, 1:], shapes, locations, weights)
    with pytest.raises(ValueError, match="attention_weights must be"):
        multi_scale_deformable_attention(value, shapes, locations, weights[..., :2])
    with pytest.raises(ValueError, match="3 levels"):
        multi_scale_deformable_attention(value, shapes, locations[:, :, :, :2], weights[:, :, :, :2])
    with pytest.raises(ValueError, match="spatial_shapes"):
        multi_scale_deformable_attention(value, [(0, 3)], locations, weights)


def test_module_ignores_padded_values_and_takes_points_or_boxes():
    """Values at padded pixels are zeroed before sampling: whatever they hold, the output is the same; 2-d
    references sample at ``ref + offset / (w, h)``, boxes at ``centre + offset / points * size / 2``."""
    torch.manual_seed(0)
    attention = MultiScaleDeformableAttention(d_model=8, n_levels=2, n_heads=2, n_points=3).double()
    with torch.no_grad():
        for p in attention.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    shapes = [(4, 5), (2, 3)]
    rows = sum(h * w for h, w in shapes)
    value = torch.randn(1, rows, 8, dtype=torch.float64)
    padding = torch.zeros(1, rows, dtype=torch.bool)
    padding[0, [4, 9, 14, 19, 22, 25]] = True  # the last column of each level
    queries = torch.randn(1, 5, 8, dtype=torch.float64)
    points = torch.rand(1, 5, 2, dtype=torch.float64)
    ratios = torch.tensor([[[0.8, 1.0], [2 / 3, 1.0]]], dtype=torch.float64)
    out, _ = attention(queries, points, value, shapes, valid_ratios=ratios, padding_mask=padding)
    noisy = value.masked_fill(padding[..., None], 0) + torch.randn_like(value) * 100 * padding[..., None]
    again, weights = attention(queries, points, noisy, shapes, ratios, padding, output_attentions=True)
    torch.testing.assert_close(out, again)
    assert weights.shape == (1, 5, 2, 2, 3)  # (B, Q, heads, levels, points): transformers' layout
    torch.testing.assert_close(weights.sum((-2, -1)), torch.ones(1, 5, 2, dtype=torch.float64))
    # boxes of size (w, h) = 2 * points / offsets-scale: the same locations as the points with offsets / (w_l, h_l)
    boxes = torch.cat([points, torch.full_like(points, 1.0)], -1)
    offsets = attention.sampling_offsets(queries).view(1, 5, 2, 2, 3, 2)
    per_level = boxes[:, :, None] * torch.cat([ratios, ratios], -1)[:, None]
    expected_locations = per_level[:, :, None, :, None, :2] + offsets / 3 * per_level[:, :, None, :, None, 2:] * 0.5
    values = attention.value_proj(value).masked_fill(padding[..., None], 0).view(1, rows, 2, 4)
    weights = attention.attention_weights(queries).view(1, 5, 2, 6).softmax(-1).view(1, 5, 2, 2, 3)
    expected = attention.output_proj(
        multi_scale_deformable_attention_reference(values, shapes, expected_locations, weights)
    )
    got, _ = attention(queries, boxes, value, shapes, ratios, padding)
    torch.testing.assert_close(got, expected)


def test_offset_bias_points_in_eight_directions_scaled_by_point_index():
    bias = deformable_offset_bias(heads=8, levels=4, points=4).view(8, 4, 4, 2)
    directions = [(1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1)]
    for head, (dx, dy) in enumerate(directions):
        for point in range(4):
            expected = torch.tensor([dx, dy], dtype=torch.float32) * (point + 1)
            torch.testing.assert_close(bias[head, :, point], expected.expand(4, 2), atol=1e-6, rtol=0)
    attention = MultiScaleDeformableAttention()
    assert attention.sampling_offsets.weight.abs().max() == 0
    assert attention.attention_weights.weight.abs().max() == 0 and attention.attention_weights.bias.abs().max() == 0
    torch.testing.assert_close(attention.sampling_offsets.bias, deformable_offset_bias(8, 4, 4))
    assert attention.value_proj.bias.abs().max() == 0 and attention.output_proj.bias.abs().max() == 0


# ----------------------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------------------


def test_original_initialisation_of_heads_offsets_and_references():
    prior = -math.log((1 - 0.01) / 0.01)
    for variant in VARIANTS:
        model = DeformableDetrForObjectDetection(tiny(variant))
        heads = model.config.num_prediction_heads
        assert len(model.class_embed) == len(model.bbox_embed) == heads
        assert heads == {"base": 1, "box_refine": 2, "two_stage": 3}[variant]
        size_bias = 0.0 if variant == "two_stage" else -2.0
        for index in range(heads):
            torch.testing.assert_close(model.class_embed[index].bias, torch.full((3,), prior))
            last = model.bbox_embed[index].layers[-1]
            assert last.weight.abs().max() == 0 and last.bias[:2].abs().max() == 0
            expected = size_bias if index == 0 else 0.0  # the original sets -2 on the first head only
            torch.testing.assert_close(last.bias[2:], torch.full((2,), expected))
            # the other heads start as copies of the first (the original clones it), as separate parameters
            torch.testing.assert_close(model.class_embed[index].weight, model.class_embed[0].weight)
            torch.testing.assert_close(model.bbox_embed[index].layers[0].weight, model.bbox_embed[0].layers[0].weight)
        if heads > 1:
            assert model.class_embed[0].weight.data_ptr() != model.class_embed[1].weight.data_ptr()
        for layer in [*model.model.encoder.layers, *(layer for layer in model.model.decoder.layers)]:
            msda = layer.self_attn if hasattr(layer.self_attn, "sampling_offsets") else layer.encoder_attn
            assert msda.attention_weights.weight.abs().max() == 0
            assert msda.sampling_offsets.weight.abs().max() == 0
        for projection in model.model.input_proj:
            assert projection[0].bias.abs().max() == 0
        if variant != "two_stage":
            assert model.model.reference_points.bias.abs().max() == 0


def test_every_refined_head_is_its_own_and_references_are_detached_between_layers():
    """With box refinement every layer has its own heads, and each layer's boxes become the next layer's
    reference with the gradient stopped: the last layer's boxes send no gradient to the heads before it."""
    config = tiny("box_refine", decoder_layers=3, auxiliary_loss=False)
    model = DeformableDetrForObjectDetection(config).train()
    with torch.no_grad():
        for head in model.bbox_embed:
            for p in head.parameters():
                p.copy_(torch.randn_like(p) * 0.3)
    pixels, mask = padded_batch()
    out = model(pixels, mask, output_hidden_states=True)
    out.pred_boxes.sum().backward()
    assert model.bbox_embed[2].layers[0].weight.grad.abs().sum() > 0
    for index in (0, 1):
        grad = model.bbox_embed[index].layers[0].weight.grad
        assert grad is None or grad.abs().sum() == 0, f"bbox_embed[{index}] reached through a reference"
    with torch.no_grad():
        inner = model.model(pixels, mask, class_heads=model.class_embed, box_heads=model.bbox_embed)
    # (B, layers, Q, 4): the references after each layer (the next one's), as transformers'; points before the first
    references, boxes = inner.intermediate_reference_points, inner.intermediate_predicted_boxes
    assert inner.init_reference_points.shape[-1] == 2
    assert references.shape == boxes.shape == (2, 3, config.num_queries, 4)
    torch.testing.assert_close(references, boxes)
    torch.testing.assert_close(boxes[:, -1], out.pred_boxes.detach())


def test_without_refinement_every_layer_reads_the_initial_references_with_one_shared_head():
    model = DeformableDetrForObjectDetection(tiny("base", decoder_layers=3)).eval()
    pixels, mask = padded_batch()
    with torch.no_grad():
        out = model(pixels, mask)
        inner = model.model(pixels, mask)
    for layer in range(3):
        torch.testing.assert_close(inner.intermediate_reference_points[:, layer], inner.init_reference_points)
    assert out.auxiliary_outputs is None  # as transformers: only with labels
    with torch.no_grad():
        empty = {"class_labels": torch.zeros(0, dtype=torch.long), "boxes": torch.zeros(0, 4)}
        out = model(pixels, mask, labels=[empty, empty])
    assert len(out.auxiliary_outputs) == 2
    expected = model.class_embed[0](inner.intermediate_hidden_states[:, 0])
    torch.testing.assert_close(out.auxiliary_outputs[0]["logits"], expected)


def test_two_stage_proposals_on_a_hand_checked_case():
    """One image, two levels (2x3 with the last column padded; 1x2), four channels: boxes at the cell
    centres normalised by the valid extent, sizes 0.05 and 0.1, logits inverse-sigmoid; padded or too-close-to
    -the-border proposals get +inf and their memory zeroed."""
    shapes = [(2, 3), (1, 2)]
    memory = torch.arange(32, dtype=torch.float32).view(1, 8, 4) + 1
    padding = torch.tensor([[False, False, True, False, False, True, False, False]])
    out_memory, logits = encoder_proposals(memory, padding, shapes)
    boxes = logits.sigmoid()
    # level 0: valid 2 columns x 2 rows: centres (0.25 | 0.75, 0.25 | 0.75), size 0.05
    expected = {0: (0.25, 0.25, 0.05), 1: (0.75, 0.25, 0.05), 3: (0.25, 0.75, 0.05), 4: (0.75, 0.75, 0.05)}
    # level 1: 1x2 all valid: centres (0.25, 0.5) and (0.75, 0.5), size 0.1
    expected.update({6: (0.25, 0.5, 0.1), 7: (0.75, 0.5, 0.1)})
    for index, (x, y, size) in expected.items():
        torch.testing.assert_close(boxes[0, index], torch.tensor([x, y, size, size]), atol=1e-6, rtol=0)
        torch.testing.assert_close(
            logits[0, index], inverse_sigmoid(torch.tensor([x, y, size, size])), atol=1e-4, rtol=0
        )
        torch.testing.assert_close(out_memory[0, index], memory[0, index])
    for index in (2, 5):  # padded
        assert torch.isinf(logits[0, index]).all() and out_memory[0, index].abs().max() == 0
    row = encoder_proposals(torch.ones(1, 60, 4), torch.zeros(1, 60, dtype=torch.bool), [(1, 60)])[1]
    assert torch.isinf(row[0, 0]).all() and torch.isinf(row[0, 59]).all()  # centres 0.0083 and 0.9917
    torch.testing.assert_close(row[0, 1, 0].sigmoid(), torch.tensor(1.5 / 60))


def test_two_stage_supervises_the_encoder_proposals_class_agnostically():
    """The two-stage loss adds the set loss of the encoder's proposals with every target as class 0 (the
    original's ``_enc`` losses; transformers drops them, D7), so the proposal heads learn."""
    model = DeformableDetrForObjectDetection(tiny("two_stage")).train()
    inputs = make_inputs(model)
    out = model(**inputs)
    for name in ("loss_ce_enc", "loss_bbox_enc", "loss_giou_enc"):
        assert name in out.loss_dict
    agnostic = [{**t, "class_labels": torch.zeros_like(t["class_labels"])} for t in inputs["labels"]]
    enc_loss, enc_dict = model.criterion()(out.enc_outputs, agnostic)
    torch.testing.assert_close(enc_dict["loss_ce"], out.loss_dict["loss_ce_enc"])
    rest, _ = model.criterion()(
        {"logits": out.logits, "pred_boxes": out.pred_boxes, "auxiliary_outputs": out.auxiliary_outputs},
        inputs["labels"],
    )
    torch.testing.assert_close(out.loss, rest + enc_loss)
    assert out.enc_outputs["logits"].shape[1] == out.encoder_last_hidden_state.shape[1]  # one per encoder pixel
    out.loss.backward()
    assert model.class_embed[-1].weight.grad.abs().sum() > 0
    assert model.bbox_embed[-1].layers[-1].weight.grad.abs().sum() > 0  # (its earlier layers: zero by the init)
    weights = model.config
    assert (weights.class_cost, weights.class_loss_coefficient, weights.bbox_cost, weights.giou_cost) == (2, 2, 5, 2)


@pytest.mark.parametrize("variant", ["base", "box_refine"])
def test_padding_invariance_one_image_alone_or_next_to_a_larger_one(variant):
    """After the input projections an image is seen the same whatever the batch's padding: positions over the
    valid extent, references scaled by the valid ratios, padded values zeroed before sampling. The levels are
    computed per image and the padded cells filled with noise (the CNN and the projections' GroupNorm see the
    padding, in the original as here). The two-stage model is not invariant in the original either: padded
    pixels can win the top-k proposals."""
    model = DeformableDetrForObjectDetection(tiny(variant)).eval()
    randomize_norms(model)
    real_levels = model.model.levels

    def per_image_levels(pixel_values, valid):
        sources, masks = real_levels(pixel_values, valid)
        noisy = [torch.randn_like(s) * 10 for s in sources]
        for index in range(pixel_values.shape[0]):
            rows, cols = int(valid[index].any(1).sum()), int(valid[index].any(0).sum())
            own, _ = real_levels(
                pixel_values[index : index + 1, :, :rows, :cols], valid[index : index + 1, :rows, :cols]
            )
            for level, source in enumerate(own):
                noisy[level][index, :, : source.shape[2], : source.shape[3]] = source[0]
        return noisy, masks

    model.model.levels = per_image_levels
    # 128 px: at least 2x2 at stride 64 (GroupNorm of the tiny model's one channel per group needs 2 values)
    small = torch.randn(1, 3, 128, 128, generator=torch.Generator().manual_seed(3))
    batch = torch.zeros(2, 3, 192, 256)  # multiples of 64: the valid extents are whole cells on every level
    batch[0], batch[1, :, :128, :128] = torch.randn(3, 192, 256, generator=torch.Generator().manual_seed(4)), small[0]
    mask = torch.zeros(2, 192, 256, dtype=torch.long)
    mask[0], mask[1, :128, :128] = 1, 1
    with torch.no_grad():
        alone, together = model(small), model(batch, mask)
    torch.testing.assert_close(together.logits[1], alone.logits[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(together.pred_boxes[1], alone.pred_boxes[0], atol=1e-5, rtol=0)


def test_backbone_reads_stages_two_to_four_plus_a_stride_64_level():
    model = DeformableDetrModel(preset_config("deformable-detr"))
    assert [layer[0].in_channels for layer in model.input_proj] == [512, 1024, 2048, 2048]
    assert model.input_proj[3][0].stride == (2, 2) and model.input_proj[3][0].kernel_size == (3, 3)
    backbone = model.backbone.model
    assert not any(p.requires_grad for p in backbone.embedder.parameters())
    assert not any(p.requires_grad for p in backbone.encoder.stages[0].parameters())
    assert all(p.requires_grad for p in backbone.encoder.stages[1].parameters())
    single = DeformableDetrModel(preset_config("deformable-detr-single-scale"))
    assert len(single.input_proj) == 1 and single.input_proj[0][0].in_channels == 2048
    tiny_model = DeformableDetrModel(tiny()).eval()
    with torch.no_grad():
        sources, masks = tiny_model.levels(*padded_batch()[:1], torch.ones(2, 128, 96, dtype=torch.bool))
    assert [tuple(s.shape[-2:]) for s in sources] == [(16, 12), (8, 6), (4, 3), (2, 2)]  # strides 8, 16, 32, 64


def test_module_returns_the_attention_weights_its_sampling_reads():
    """The maps are on the autograd graph (a retained gradient, attribution): their gradient is the output's
    gradient with respect to the weights the sampling used."""
    torch.manual_seed(0)
    module = MultiScaleDeformableAttention(d_model=16, n_levels=2, n_heads=2, n_points=2)
    with torch.no_grad():
        module.attention_weights.weight.normal_()
    shapes = [(4, 5), (2, 3)]
    query, value = torch.randn(2, 3, 16), torch.randn(2, 26, 16)
    reference = torch.rand(2, 3, 2)
    output, maps = module(query, reference, value, shapes, output_attentions=True)
    assert maps.shape == (2, 3, 2, 2, 2) and maps.requires_grad  # (B, Q, heads, L, P), as transformers'
    maps.retain_grad()
    output.sin().sum().backward()
    weights = maps.detach().clone().requires_grad_()
    values = module.value_proj(value).view(2, 26, 2, 8)
    offsets = module.sampling_offsets(query).view(2, 3, 2, 2, 2, 2)
    size = torch.tensor([[w, h] for h, w in shapes], dtype=torch.float32)
    locations = reference[:, :, None, None, None, :] + offsets / size[None, None, None, :, None, :]
    again = module.output_proj(multi_scale_deformable_attention_reference(values, shapes, locations, weights))
    (expected,) = torch.autograd.grad(again.sin().sum(), weights)
    torch.testing.assert_close(maps.grad, expected, atol=1e-6, rtol=1e-5)


def test_a_swin_classifier_folder_or_a_transformers_swin_config_is_the_backbone(tmp_path):
    swin = dict(embed_dim=16, depths=[1, 1, 2, 1], num_heads=[2, 2, 4, 4], window_size=2, image_size=64)
    classifier = hf_xcv.SwinForImageClassification(hf_xcv.SwinConfig(**swin, num_labels=2))
    with torch.no_grad():
        classifier.swin.embeddings.norm.weight.normal_()
    classifier.save_pretrained(tmp_path)
    tiny = {k: v for k, v in hf_xcv.PRESETS[TINY].config.items() if k != "backbone_config"}
    config = DeformableDetrConfig(**tiny, backbone=str(tmp_path), use_pretrained_backbone=True, num_labels=3)
    assert config.backbone_config.out_features == ["stage2", "stage3", "stage4"]  # strides 8, 16, 32
    model = DeformableDetrForObjectDetection(config).train()
    backbone = model.model.backbone.model
    assert torch.equal(backbone.swin.embeddings.norm.weight, classifier.swin.embeddings.norm.weight)
    model(**make_inputs(model)).loss.backward()
    theirs = transformers.SwinConfig(**swin, out_features=["stage3", "stage4"])
    converted = DeformableDetrConfig(**tiny, backbone_config=theirs).backbone_config
    assert isinstance(converted, hf_xcv.SwinConfig) and converted.out_features == ["stage3", "stage4"]


def test_save_load_auto_classes_and_processor(tmp_path):
    model = DeformableDetrForObjectDetection(tiny("two_stage")).eval()
    randomize_norms(model)
    model.save_pretrained(tmp_path)
    hf_xcv.XcvDeformableDetrImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}).save_pretrained(tmp_path)
    reloaded = AutoModelForObjectDetection.from_pretrained(tmp_path).eval()
    assert type(reloaded) is DeformableDetrForObjectDetection
    processor = AutoImageProcessor.from_pretrained(tmp_path)
    assert type(processor) is hf_xcv.XcvDeformableDetrImageProcessor and processor.class_activation == "sigmoid"
    pixels, mask = padded_batch()
    with torch.no_grad():
        assert_same_detections(reloaded(pixels, mask), model(pixels, mask), atol=0)
    import json

    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert saved["image_processor_type"] == "XcvDeformableDetrImageProcessor"
    assert not hasattr(transformers, saved["image_processor_type"])
    assert not any(key.startswith("model.decoder.bbox_embed") for key in reloaded.state_dict())


def test_pipeline_gives_the_top_k_sigmoid_detections(tmp_path):
    from PIL import Image

    model = DeformableDetrForObjectDetection(tiny()).eval()
    model.save_pretrained(tmp_path)
    hf_xcv.XcvDeformableDetrImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}).save_pretrained(tmp_path)
    detector = transformers.pipeline("object-detection", model=str(tmp_path))
    image = Image.fromarray((torch.rand(48, 80, 3) * 255).to(torch.uint8).numpy())
    results = detector(image, threshold=0.0)
    assert len(results) == model.config.num_queries * model.config.num_labels  # top-k over queries x classes
    scores = [r["score"] for r in results]
    assert all(0 < s < 1 for s in scores)
    for result in results:  # boxes are not clipped to the image (the original's PostProcess neither)
        box = result["box"]
        assert box["xmin"] <= box["xmax"] and box["ymin"] <= box["ymax"]
        assert -80 < box["xmin"] and box["xmax"] < 160 and -48 < box["ymin"] and box["ymax"] < 96


def test_export_and_compile_match_eager():
    model = DeformableDetrForObjectDetection(tiny("box_refine")).eval()
    randomize_norms(model)
    pixels, mask = padded_batch()
    with torch.no_grad():
        expected = model(pixels, mask)
        exported = torch.export.export(model, (pixels, mask), strict=False)
        got = exported.module()(pixels, mask)
        compiled = torch.compile(model, fullgraph=True, backend="eager")(pixels, mask)
    torch.testing.assert_close(got["logits"], expected.logits, atol=1e-5, rtol=0)
    assert_same_detections(compiled, expected, atol=1e-5)


def test_bad_inputs_and_configs_are_refused_by_name():
    model = DeformableDetrForObjectDetection(tiny("two_stage", two_stage_num_proposals=400))
    pixels, mask = padded_batch()
    with pytest.raises(ValueError, match="two_stage_num_proposals=400 exceeds"):
        model(pixels, mask)
    with pytest.raises(ValueError, match="pixel_mask has shape"):
        model(pixels, mask[:, :10])
    with pytest.raises(ValueError, match="heads to score its proposals"):
        DeformableDetrModel(tiny("two_stage"))(pixels, mask)
    for overrides, words in [
        ({"two_stage": True}, "needs with_box_refine"),
        ({"num_feature_levels": 2}, "between 1 and num_feature_levels"),
        ({"d_model": 48, "encoder_attention_heads": 2, "decoder_attention_heads": 2}, "multiple of 32"),
        ({"encoder_n_points": 0}, "encoder_n_points"),
        ({"focal_alpha": 1.5}, "focal_alpha"),
        ({"class_loss_coefficient": -1}, "class_loss_coefficient"),
        ({"with_box_refine": "yes"}, "with_box_refine"),
    ]:
        with pytest.raises(ValueError, match=words):
            preset_config(TINY, **overrides)


def test_criterion_uses_the_focal_loss_and_cost_of_the_config():
    config = tiny(focal_alpha=0.3, focal_gamma=1.5, class_loss_coefficient=3)
    criterion = DeformableDetrForObjectDetection(config).criterion()
    assert isinstance(criterion, SetCriterion) and criterion.class_loss == "focal"
    assert (criterion.focal_alpha, criterion.focal_gamma) == (0.3, 1.5)
    assert criterion.matcher.class_cost_type == "focal" and criterion.matcher.focal_alpha == 0.3
    assert criterion.weight_dict["loss_ce"] == 3
