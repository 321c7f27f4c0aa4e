"""IPT's named configurations (the released checkpoints' layouts, the demo's and the tests'), the published
figures and the paper's pre-training recipe."""

from __future__ import annotations

from ...registry import Preset, TrainingRecipe

_IPT_PAPER = "Chen et al. 2021 (IPT), official checkpoints, Y PSNR"

# The paper's pre-training: Adam at 5e-5, gradient clipping at 1.0 (MindSpore's), batches of 64 for 300 epochs;
# trained as named restoration tasks, one per batch, degrading clean images.
RECIPE = TrainingRecipe(
    "IPT",
    "Chen et al. 2021",
    defaults={"learning_rate": 5e-5, "max_grad_norm": 1.0, "num_train_epochs": 300, "per_device_train_batch_size": 64},
    notes={"restoration": "tasks"},
)

PRESETS: dict[str, Preset] = {
    "ipt-sr-x2": Preset(
        "xcv_ipt", dict(tasks=["sr_x2"]), f"{_IPT_PAPER}: Set5 38.37, Set14 34.43, B100 32.48, Urban100 33.76", "115.5M"
    ),
    "ipt-sr-x3": Preset(
        "xcv_ipt", dict(tasks=["sr_x3"]), f"{_IPT_PAPER}: Set5 34.81, Set14 30.85, B100 29.38, Urban100 29.49", "115.6M"
    ),
    "ipt-sr-x4": Preset(
        "xcv_ipt", dict(tasks=["sr_x4"]), f"{_IPT_PAPER}: Set5 32.64, Set14 29.01, B100 27.82, Urban100 27.26", "115.6M"
    ),
    "ipt-denoise-30": Preset("xcv_ipt", dict(tasks=["denoise_30"]), f"{_IPT_PAPER}: CBSD68 sigma 30 32.32", "115.3M"),
    "ipt-denoise-50": Preset(
        "xcv_ipt", dict(tasks=["denoise_50"]), f"{_IPT_PAPER}: CBSD68 sigma 50 29.88, Urban100 29.71", "115.3M"
    ),
    "ipt-derain": Preset("xcv_ipt", dict(tasks=["derain"]), f"{_IPT_PAPER}: Rain100L 41.62", "115.3M"),
    # The official pre-training layout (IPT_pretrain.pt): six heads, tails and task queries.
    "ipt-pretrain": Preset(
        "xcv_ipt",
        dict(tasks=["sr_x2", "sr_x3", "sr_x4", "denoise_30", "denoise_50", "derain"]),
        "Chen et al. 2021 (IPT), multi-task pre-training on ImageNet",
        "118.9M",
    ),
    # The demo model: pre-trained on x4 super-resolution and sigma-30 denoising of scikit-image's photos on 2 CPU cores.
    "ipt-photos": Preset(
        "xcv_ipt",
        dict(
            tasks=["sr_x4", "denoise_30"],
            n_feats=16,
            image_size=24,
            patch_size=3,
            num_hidden_layers=2,
            num_attention_heads=4,
        ),  # fmt: skip
        "hf_xcv demo on scikit-image's photos (the measured PSNR/SSIM: docs/models/ipt.md)",
    ),
    "ipt-test-tiny": Preset(
        "xcv_ipt",
        dict(
            tasks=["sr_x2"],
            n_feats=8,
            image_size=12,
            patch_size=3,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
        ),  # fmt: skip
        "test fixture",
    ),
}
