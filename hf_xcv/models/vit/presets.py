"""ViT's named configurations (ViT and DeiT sizes, the demo's and the tests'), with the published figures."""

from __future__ import annotations

from typing import Any

from ...registry import Preset


def _vit(hidden: int, layers: int, heads: int, mlp: int, patch: int = 16, image: int = 224, **more: Any) -> dict:
    return dict(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=mlp,
        patch_size=patch,
        image_size=image,
        **more,
    )


_VIT_PAPER = "Dosovitskiy et al. 2020, Table 1"
_DEIT_PAPER = "Touvron et al. 2021 (DeiT), ImageNet-1k only, 224px"

PRESETS: dict[str, Preset] = {
    "vit-tiny-patch16-224": Preset("xcv_vit", _vit(192, 12, 3, 768), f"{_DEIT_PAPER}: DeiT-Ti top-1 72.2", "5M"),
    "vit-small-patch16-224": Preset("xcv_vit", _vit(384, 12, 6, 1536), f"{_DEIT_PAPER}: DeiT-S top-1 79.8", "22M"),
    "vit-base-patch16-224": Preset(
        "xcv_vit", _vit(768, 12, 12, 3072), f"{_VIT_PAPER}; {_DEIT_PAPER}: DeiT-B top-1 81.8", "86M"
    ),
    "vit-base-patch32-224": Preset("xcv_vit", _vit(768, 12, 12, 3072, patch=32), _VIT_PAPER, "88M"),
    "vit-large-patch16-224": Preset(
        "xcv_vit",
        _vit(1024, 24, 16, 4096),
        f"{_VIT_PAPER}; Table 2: ImageNet-21k pre-training, ImageNet top-1 85.30 (fine-tuned at higher resolution)",
        "307M",
    ),
    "vit-huge-patch14-224": Preset(
        "xcv_vit",
        _vit(1280, 32, 16, 5120, patch=14),
        f"{_VIT_PAPER}; Table 2: JFT-300M pre-training, ImageNet top-1 88.55 (fine-tuned at higher resolution)",
        "632M",
    ),
    # The demo model: trains on the built-in 8x8 digits (upsampled to 16x16, 4x4 patches) in minutes on 2 CPU cores.
    "vit-digits": Preset(
        "xcv_vit",
        _vit(128, 6, 4, 256, patch=4, image=16, pooling="mean"),
        "hf_xcv demo on scikit-learn's digits (the measured accuracy: docs/models/vit.md)",
    ),
    # The tiny configuration the registry-driven tests build (named in tests/model_specs/vit.py).
    "vit-test-tiny": Preset("xcv_vit", _vit(32, 2, 4, 64, patch=4, image=16), "test fixture"),
}
