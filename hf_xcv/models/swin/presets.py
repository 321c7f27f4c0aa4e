"""Swin's named configurations (Swin-T/S/B, the demo's and the tests'), with the published figures."""

from __future__ import annotations

from typing import Any

from ...registry import Preset


def _swin(embed: int, depths: list[int], heads: list[int], window: int = 7, image: int = 224, **more: Any) -> dict:
    return dict(embed_dim=embed, depths=depths, num_heads=heads, window_size=window, image_size=image, **more)


_SWIN_PAPER = "Liu et al. 2021 (Swin), Table 1a: ImageNet-1K"

PRESETS: dict[str, Preset] = {
    "swin-tiny-patch4-window7-224": Preset(
        "xcv_swin", _swin(96, [2, 2, 6, 2], [3, 6, 12, 24], drop_path_rate=0.2), f"{_SWIN_PAPER}: top-1 81.2", "28.3M"
    ),
    "swin-small-patch4-window7-224": Preset(
        "xcv_swin", _swin(96, [2, 2, 18, 2], [3, 6, 12, 24], drop_path_rate=0.3), f"{_SWIN_PAPER}: top-1 83.2", "49.6M"
    ),
    "swin-base-patch4-window7-224": Preset(
        "xcv_swin", _swin(128, [2, 2, 18, 2], [4, 8, 16, 32], drop_path_rate=0.5), f"{_SWIN_PAPER}: top-1 83.5", "87.8M"
    ),
    "swin-base-patch4-window12-384": Preset(
        "xcv_swin",
        _swin(128, [2, 2, 18, 2], [4, 8, 16, 32], window=12, image=384, drop_path_rate=0.5),
        f"{_SWIN_PAPER}: top-1 84.5 (384x384)",
        "87.9M",
    ),
    # The demo model: trains on the built-in digits (16x16, 2x2 patches: an 8x8 grid of 4x4 windows) in minutes.
    "swin-digits": Preset(
        "xcv_swin",
        _swin(64, [2, 4], [4, 8], window=4, image=16, patch_size=2, drop_path_rate=0.1),
        "hf_xcv demo on scikit-learn's digits (the measured accuracy: docs/models/swin.md)",
    ),
    "swin-test-tiny": Preset(
        "xcv_swin", _swin(16, [2, 2], [2, 4], window=2, image=16, patch_size=2, drop_path_rate=0.1), "test fixture"
    ),
}
