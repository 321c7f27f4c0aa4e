"""Deformable DETR's named configurations (base, box refinement, two-stage, single-scale, the demo's and the
tests'), the published figures and the original training recipe."""

from __future__ import annotations

from typing import Any

from ...configuration_detection import resnet_backbone
from ...registry import Preset, TrainingRecipe


def _deformable(depths: list[int] | None = None, levels: int = 4, dilation: bool = False, **more: Any) -> dict:
    """Deformable DETR on ResNet-50 (or ``depths``): stages 2-4 and a stride-64 level (or C5 only for
    single-scale), COCO's 91 category ids."""
    stages = ["stage2", "stage3", "stage4"] if levels > 1 else ["stage4"]
    backbone = resnet_backbone(depths or [3, 4, 6, 3], stages)
    return dict(backbone_config=backbone, num_feature_levels=levels, dilation=dilation, num_labels=91, **more)


_DEFORMABLE_PAPER = "Zhu et al. 2020 (Deformable DETR), official README: COCO val2017 box AP, 50 epochs"

# The original training (main.py): AdamW at 2e-4, the backbone at 2e-5, the rate divided by 10 after 40 of 50
# epochs; the parameters of lr_linear_proj_names (the sampling offsets of every deformable attention and the query ->
# reference point Linear) at lr_linear_proj_mult (0.1) of the rate.
RECIPE = TrainingRecipe(
    "Deformable DETR",
    "Zhu et al. 2020",
    defaults={"learning_rate": 2e-4, "lr_backbone": 2e-5, "lr_drop": 0.8},
    notes={
        "scores": "a sigmoid per class, the top 100 (query, class) pairs of the image",
        "linear_projections": ("sampling_offsets", "reference_points"),
    },
)

PRESETS: dict[str, Preset] = {
    "deformable-detr": Preset(
        "xcv_deformable_detr", _deformable(), f"{_DEFORMABLE_PAPER}: AP 44.5 (APs 27.1, APm 47.6, APl 59.6)", "40M"
    ),
    "deformable-detr-box-refine": Preset(
        "xcv_deformable_detr", _deformable(with_box_refine=True), f"{_DEFORMABLE_PAPER}: AP 46.2", "41M"
    ),
    "deformable-detr-two-stage": Preset(
        "xcv_deformable_detr",
        _deformable(with_box_refine=True, two_stage=True),
        f"{_DEFORMABLE_PAPER}: AP 46.9 (box refinement + two-stage)",
        "41M",
    ),
    "deformable-detr-single-scale": Preset(
        "xcv_deformable_detr", _deformable(levels=1), f"{_DEFORMABLE_PAPER}: AP 39.4 (single scale, C5)", "34M"
    ),
    "deformable-detr-single-scale-dc5": Preset(
        "xcv_deformable_detr", _deformable(levels=1, dilation=True), f"{_DEFORMABLE_PAPER}: AP 41.5", "34M"
    ),
    # The demo model: the same scale as detr-shapes (widths, layers, queries), three levels of a small ResNet.
    "deformable-detr-shapes": Preset(
        "xcv_deformable_detr",
        dict(
            backbone_config=resnet_backbone([1, 1, 1], ["stage2", "stage3"], width=32, layer_type="basic"),
            num_feature_levels=3,
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            encoder_n_points=4,
            decoder_n_points=4,
            num_queries=10,
            two_stage_num_proposals=10,
        ),
        "hf_xcv demo on the built-in shapes scenes (the measured mAP: docs/models/deformable_detr.md)",
    ),
    "deformable-detr-test-tiny": Preset(
        "xcv_deformable_detr",
        dict(
            backbone_config=resnet_backbone([1, 1, 1, 1], ["stage2", "stage3", "stage4"], width=8),
            d_model=64,  # GroupNorm(32) of two channels a group: a 1x1 level of a small image still normalises
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            encoder_n_points=2,
            decoder_n_points=2,
            num_queries=6,
            two_stage_num_proposals=6,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
        ),
        "test fixture",
    ),
}
