"""Named configurations, with the published numbers beside them.

Conversion, tests, training scripts and model cards read this one table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import PretrainedConfig

from .configuration_utils import check_known_fields


@dataclass(frozen=True)
class Preset:
    model_type: str
    config: dict[str, Any]
    reference: str = ""  # paper and what it reports for this configuration
    params: str = ""  # parameter count as published
    extra: dict[str, Any] = field(default_factory=dict)


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


def _swin(embed: int, depths: list[int], heads: list[int], window: int = 7, image: int = 224, **more: Any) -> dict:
    return dict(embed_dim=embed, depths=depths, num_heads=heads, window_size=window, image_size=image, **more)


def _transformer(d_model: int, layers: int, heads: int, ffn: int, **more: Any) -> dict:
    return dict(
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        **more,
    )


# Pixel tokens: the grey level is the id, and a black pixel (0) is no padding.
_PIXELS = {"pad_token_id": None}


def _xformer(hidden: int, layers: int, heads: int, mlp: int, **more: Any) -> dict:
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp, **more)


def _detr(depths: list[int], dilation: bool = False, **more: Any) -> dict:
    """DETR on a ResNet of ``depths`` (bottleneck blocks, C5 only), COCO's 91 category ids."""
    backbone = {"model_type": "resnet", "depths": depths, "layer_type": "bottleneck", "out_features": ["stage4"]}
    return dict(backbone_config=backbone, dilation=dilation, num_labels=91, **more)


def _deformable(depths: list[int] | None = None, levels: int = 4, dilation: bool = False, **more: Any) -> dict:
    """Deformable DETR on ResNet-50 (or ``depths``): stages 2-4 and a stride-64 level (or C5 only for
    single-scale), COCO's 91 category ids."""
    stages = ["stage2", "stage3", "stage4"] if levels > 1 else ["stage4"]
    backbone = {
        "model_type": "resnet",
        "depths": depths or [3, 4, 6, 3],
        "layer_type": "bottleneck",
        "out_features": stages,
    }
    return dict(backbone_config=backbone, num_feature_levels=levels, dilation=dilation, num_labels=91, **more)


def _small_resnet(width: int, depths: list[int], layer_type: str = "bottleneck") -> dict:
    """A small transformers ResNet for the demo and test DETRs; DETR reads its last stage."""
    return {
        "model_type": "resnet",
        "depths": depths,
        "layer_type": layer_type,
        "embedding_size": width,
        "hidden_sizes": [width * 2**i for i in range(len(depths))],
        "out_features": [f"stage{len(depths)}"],
    }


_VIT_PAPER = "Dosovitskiy et al. 2020, Table 1"
_TRANSFORMER_PAPER = "Vaswani et al. 2017, Tables 2-3"
_SWIN_PAPER = "Liu et al. 2021 (Swin), Table 1a: ImageNet-1K"
_DETR_PAPER = "Carion et al. 2020 (DETR), Table 1 / README: COCO val2017 box AP, 500 epochs"
_DEFORMABLE_PAPER = "Zhu et al. 2020 (Deformable DETR), official README: COCO val2017 box AP, 50 epochs"
_DEIT_PAPER = "Touvron et al. 2021 (DeiT), ImageNet-1k only, 224px"
_IPT_PAPER = "Chen et al. 2021 (IPT), official checkpoints, Y PSNR"
_TTSR_PAPER = "Yang et al. 2020 (TTSR), x4 on CUFED5 (Y PSNR/SSIM)"

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
        "hf_xcv demo on scikit-learn's digits (see README for the measured accuracy)",
    ),
    # Tiny configuration the registry-driven tests build for every model type (see MODEL_TYPES).
    "vit-test-tiny": Preset("xcv_vit", _vit(32, 2, 4, 64, patch=4, image=16), "test fixture"),
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
        "hf_xcv demo on scikit-learn's digits (see README for the measured accuracy)",
    ),
    "swin-test-tiny": Preset(
        "xcv_swin", _swin(16, [2, 2], [2, 4], window=2, image=16, patch_size=2, drop_path_rate=0.1), "test fixture"
    ),
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
            backbone_config=_small_resnet(32, [1, 1, 1], "basic"),  # stride 16: a 6x6 map of a 96 px scene
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            num_queries=10,
        ),
        "hf_xcv demo on the built-in shapes scenes (see README for the measured mAP)",
    ),
    "detr-test-tiny": Preset(
        "xcv_detr",
        dict(
            backbone_config=_small_resnet(8, [1, 1, 1, 1]),
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
            backbone_config={**_small_resnet(32, [1, 1, 1], "basic"), "out_features": ["stage2", "stage3"]},
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
        "hf_xcv demo on the built-in shapes scenes (see README for the measured mAP)",
    ),
    "deformable-detr-test-tiny": Preset(
        "xcv_deformable_detr",
        dict(
            backbone_config={**_small_resnet(8, [1, 1, 1, 1]), "out_features": ["stage2", "stage3", "stage4"]},
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
        "hf_xcv demo on scikit-image's photos (see README for the measured PSNR/SSIM)",
    ),
    "ttsr-test-tiny": Preset(
        "xcv_ttsr",
        dict(num_res_blocks="1+1+1+1", n_feats=8, texture_channels=[4, 8, 16], relevance_chunk_size=64),
        "test fixture",
    ),
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
        "hf_xcv demo on scikit-image's photos (see README for the measured PSNR/SSIM)",
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
    "transformer-base": Preset(
        "xcv_transformer",
        _transformer(512, 6, 8, 2048),
        f"{_TRANSFORMER_PAPER}: base model, newstest2014 BLEU 27.3 EN-DE, 38.1 EN-FR",
        "65M",
    ),
    "transformer-big": Preset(
        "xcv_transformer",
        _transformer(1024, 6, 16, 4096, dropout=0.3),
        f"{_TRANSFORMER_PAPER}: big model, newstest2014 BLEU 28.4 EN-DE, 41.8 EN-FR (dropout 0.1 for EN-FR)",
        "213M",
    ),
    # The translation demo: English -> French number words, trains in minutes on 2 CPU cores.
    "transformer-numbers": Preset(
        "xcv_transformer",
        _transformer(128, 3, 4, 512, vocab_size=1000, max_position_embeddings=128),
        "hf_xcv demo on the built-in number corpus (see README for the measured BLEU)",
    ),
    "transformer-test-tiny": Preset(
        "xcv_transformer",
        _transformer(32, 2, 4, 64, vocab_size=300, max_position_embeddings=64, dropout=0.0),
        "test fixture",
    ),
    # Long Range Arena's shared encoder for its byte-level text task (Tay et al. 2020, Appendix): choose the
    # attention with attention_type=...; LRA reports its accuracy per X-former in Table 1.
    "xformer-lra-text": Preset(
        "xcv_xformer",
        _xformer(256, 4, 4, 1024, vocab_size=257, max_position_embeddings=4096, pooling="mean"),
        "Tay et al. 2020 (Long Range Arena), text classification encoder at 4K bytes",
    ),
    # The Long Range Arena-style tasks of hf_xcv.data.lra at a CPU scale (benchmarks/bench_lra.py): one encoder per
    # task, the same for every attention entry (hf-xcv-train lra sets attention_type and the length).
    "xformer-lra-listops": Preset(
        "xcv_xformer",
        _xformer(64, 2, 4, 128, vocab_size=16, max_position_embeddings=512, hidden_dropout_prob=0.0, pooling="first"),
        "hf_xcv's CPU-scale ListOps encoder (LRA: 512 wide, 6 layers, 2K tokens), pooled at the root operator",
    ),
    "xformer-lra-pathfinder": Preset(
        "xcv_xformer",
        _xformer(32, 1, 2, 64, vocab_size=256, max_position_embeddings=1024, hidden_dropout_prob=0.0, **_PIXELS),
        "LRA's Pathfinder encoder size (1 layer, 32 wide, 2 heads; FFN 64, LRA's 32), 32x32 pixels",
    ),
    "xformer-lra-image": Preset(
        "xcv_xformer",
        _xformer(64, 2, 4, 128, vocab_size=256, max_position_embeddings=1024, hidden_dropout_prob=0.0, **_PIXELS),
        "hf_xcv's CPU-scale encoder of digits as 32x32 pixel sequences",
    ),
    "xformer-test-tiny": Preset(
        "xcv_xformer",
        _xformer(32, 2, 4, 64, vocab_size=300, max_position_embeddings=64, hidden_dropout_prob=0.0),
        "test fixture",
    ),
}


def preset_config(name: str, model_type: str | None = None, **overrides: Any) -> PretrainedConfig:
    """The config of a named preset, with ``overrides`` applied (e.g. ``num_labels=10``); with ``model_type``,
    a preset of another model type is refused (a training script for one family names only its presets)."""
    from .auto import MODEL_TYPES

    fitting = sorted(key for key, preset in PRESETS.items() if model_type in (None, preset.model_type))
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; available presets: {fitting}")
    preset = PRESETS[name]
    if model_type is not None and preset.model_type != model_type:
        raise ValueError(
            f"preset {name!r} makes a {preset.model_type} model; this needs a {model_type} preset: {fitting}"
        )
    config_class = MODEL_TYPES[preset.model_type].config
    check_known_fields(config_class, overrides)
    return config_class(**{**preset.config, **overrides})
