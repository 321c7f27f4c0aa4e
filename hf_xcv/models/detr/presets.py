"""DETR's named configurations (R50/R101, DC5, the demo's and the tests'), the published figures and the
original training recipe."""

from __future__ import annotations

from typing import Any

from ...configuration_detection import resnet_backbone
from ...registry import Preset, TrainingRecipe


def _detr(depths: list[int], dilation: bool = False, **more: Any) -> dict:
    """DETR on a ResNet of ``depths`` (bottleneck blocks, C5 only), COCO's 91 category ids."""
    return dict(backbone_config=resnet_backbone(depths, ["stage4"]), dilation=dilation, num_labels=91, **more)


_DETR_PAPER = "Carion et al. 2020 (DETR), Table 1 / README: COCO val2017 box AP, 500 epochs"

# The original training (main.py): AdamW at 1e-4, the backbone at 1e-5, the rate divided by 10 after 200 of 300
# epochs (lr_drop: the fraction of the run).
RECIPE = TrainingRecipe(
    "DETR",
    "Carion et al. 2020",
    defaults={"learning_rate": 1e-4, "lr_backbone": 1e-5, "lr_drop": 2 / 3},
    notes={"scores": "a softmax over the classes and no-object, one detection per query"},
)

PRESETS: dict[str, Preset] = {
    "detr-resnet-50": Preset(
        "xcv_detr", _detr([3, 4, 6, 3]), f"{_DETR_PAPER}: AP 42.0 (AP50 62.4, APs 20.5, APm 45.8, APl 61.1)", "41M"
    ),
    "detr-resnet-50-dc5": Preset("xcv_detr", _detr([3, 4, 6, 3], dilation=True), f"{_DETR_PAPER}: AP 43.3", "41M"),
    "detr-resnet-101": Preset("xcv_detr", _detr([3, 4, 23, 3]), f"{_DETR_PAPER}: AP 43.5", "60M"),
    "detr-resnet-101-dc5": Preset("xcv_detr", _detr([3, 4, 23, 3], dilation=True), f"{_DETR_PAPER}: AP 44.9", "60M"),
    # The demo model: trains on the built-in shapes scenes (64-96 px) in minutes on 2 CPU cores.
    "detr-shapes": Preset(
        "xcv_detr",
        dict(
            # stride 16: a 6x6 map of a 96 px scene
            backbone_config=resnet_backbone([1, 1, 1], ["stage3"], width=32, layer_type="basic"),
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            num_queries=10,
        ),
        "hf_xcv demo on the built-in shapes scenes (the measured mAP: docs/models/detr.md)",
    ),
    "detr-test-tiny": Preset(
        "xcv_detr",
        dict(
            backbone_config=resnet_backbone([1, 1, 1, 1], ["stage4"], width=8),
            d_model=16,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            num_queries=6,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
        ),
        "test fixture",
    ),
}
