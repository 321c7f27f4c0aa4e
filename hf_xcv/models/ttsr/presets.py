"""TTSR's named configurations (the paper's, the demo's and the tests'), the published figures and the
original training recipe."""

from __future__ import annotations

from ...registry import Preset, TrainingRecipe

_TTSR_PAPER = "Yang et al. 2020 (TTSR), x4 on CUFED5 (Y PSNR/SSIM)"

# The original train.sh: Adam at 1e-4 (the texture extractor at 1e-5), a constant rate, no clipping, batches of 9
# for 200 epochs; trained as reference-based super-resolution (LR, its reference and the HR target).
RECIPE = TrainingRecipe(
    "TTSR",
    "Yang et al. 2020",
    defaults={"learning_rate": 1e-4, "max_grad_norm": 0.0, "num_train_epochs": 200, "per_device_train_batch_size": 9},
    notes={"restoration": "reference"},
)

PRESETS: dict[str, Preset] = {
    "ttsr": Preset(
        "xcv_ttsr",
        {},
        f"{_TTSR_PAPER}: TTSR-rec 27.09/0.804 (all 5 references; 26.99/0.800 with one), TTSR (all losses) 25.53/0.765",
        "6.7M",
    ),
    # The demo model: trains on crops of scikit-image's photos in minutes on 2 CPU cores.
    "ttsr-photos": Preset(
        "xcv_ttsr",
        dict(num_res_blocks="4+4+2+1", n_feats=32, texture_channels=[16, 32, 64]),
        "hf_xcv demo on scikit-image's photos (the measured PSNR/SSIM: docs/models/ttsr.md)",
    ),
    "ttsr-test-tiny": Preset(
        "xcv_ttsr",
        dict(num_res_blocks="1+1+1+1", n_feats=8, texture_channels=[4, 8, 16], relevance_chunk_size=64),
        "test fixture",
    ),
}
