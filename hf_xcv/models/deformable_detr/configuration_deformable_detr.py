"""Deformable DETR configuration (Zhu et al. 2020, "Deformable DETR: Deformable Transformers for End-to-End
Object Detection")."""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig
from transformers.configuration_utils import SubConfigSpec

from ...configuration_detection import DetectionTransformerConfig
from ...configuration_utils import check_attention, check_attention_serves
from ...utils.checks import check_bool, check_int, check_non_negative, check_probability
from ...utils.errors import UsageError

# What the decoder's self-attention over the object queries asks of its core: nothing beyond plain attention
# (no padding: every query is real).
DEFORMABLE_DECODER_REQUESTS: dict[str, Any] = {}
# GroupNorm after each input projection, as the original.
INPUT_PROJECTION_GROUPS = 32


class DeformableDetrConfig(DetectionTransformerConfig):
    r"""Configuration of Deformable DETR. Defaults are Deformable DETR-R50 (the base model, 4 levels) as the
    original trains it.

    Field names are transformers' ``DeformableDetrConfig``'s (those shared with DETR as
    :class:`hf_xcv.configuration_detection.DetectionTransformerConfig`);
    where transformers' default departs from the original recipe, the original's is the default here:
    ``auxiliary_loss=True``, ``class_cost=2`` and ``class_loss_coefficient=2`` (transformers: 1 and a hard-coded
    1), dropout 0.1 in the decoder's self-attention and the feed-forward blocks, and a backbone with stages 2-4
    (``out_features``; transformers' default without timm reads only stage 4).

    Args (beyond the shared ones):
        backbone_config: ``out_features`` names the stages read (default ResNet-50 stages 2, 3, 4: strides 8, 16,
            32); levels beyond them (``num_feature_levels`` > their number) are 3x3 stride-2 convolutions of the
            last map (the base model's stride-64 level).
        num_feature_levels: pyramid levels (4 in the base model, 1 for single-scale on C5).
        encoder_n_points / decoder_n_points: sampling points per head and level.
        with_box_refine: every decoder layer refines the boxes of the one before (its own class and box heads),
            the references detached between layers.
        two_stage: the encoder's pixels propose the queries (class-agnostic scores, top
            ``two_stage_num_proposals``); needs ``with_box_refine``, as the original.
        two_stage_num_proposals: decoder queries in the two-stage model (the original: as many as
            ``num_queries``).
        focal_alpha / focal_gamma: of the sigmoid focal classification loss and cost (0.25, 2).
        class_loss_coefficient: weight of the focal classification loss (the original: 2).
        decoder_attention_type / decoder_attention_kwargs: the registry core of the decoder's self-attention
            over the object queries (also readable as ``attention_type`` / ``attention_kwargs``); the encoder and
            the cross-attention are multi-scale deformable attention.
        return_intermediate / disable_custom_kernels / max_position_embeddings: kept for transformers' configs
            (every decoder layer's output is always returned; no custom kernel is ever needed).
    """

    model_type = "xcv_deformable_detr"
    sub_configs_defaults = {
        "backbone_config": SubConfigSpec(
            config_class=AutoConfig, model_type="resnet", init_kwargs={"out_features": ["stage2", "stage3", "stage4"]}
        )
    }
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
        "attention_type": "decoder_attention_type",
        "attention_kwargs": "decoder_attention_kwargs",
    }

    num_queries: int = 300
    encoder_ffn_dim: int = 1024
    decoder_ffn_dim: int = 1024
    max_position_embeddings: int = 1024
    return_intermediate: bool = True
    num_feature_levels: int = 4
    encoder_n_points: int = 4
    decoder_n_points: int = 4
    two_stage: bool = False
    two_stage_num_proposals: int = 300
    with_box_refine: bool = False
    class_cost: float | int = 2
    class_loss_coefficient: float | int = 2
    focal_alpha: float = 0.25
    focal_gamma: float = 2.0
    disable_custom_kernels: bool = False
    decoder_attention_type: str = "full"
    decoder_attention_kwargs: dict[str, Any] | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        if self.decoder_attention_kwargs is None:
            self.decoder_attention_kwargs = {}
        # DETR's encoder core has no place here (the encoder is deformable): its fields are not kept.
        kwargs.pop("encoder_attention_type", None)
        kwargs.pop("encoder_attention_kwargs", None)
        kwargs.pop("tie_word_embeddings", None)  # transformers ties the refined heads (D10); hf_xcv never does
        super().__post_init__(**kwargs)

    def default_backbone_stages(self) -> int:
        """The last three stages (strides 8, 16, 32), as the original, or one per level when there are fewer."""
        levels = self.num_feature_levels if isinstance(self.num_feature_levels, int) else 1  # check() names a bad one
        return max(min(super().default_backbone_stages(), levels), 1)

    @property
    def num_decoder_queries(self) -> int:
        return self.two_stage_num_proposals if self.two_stage else self.num_queries

    @property
    def num_prediction_heads(self) -> int:
        """Class / box heads: one shared by every decoder layer, or one per layer with box refinement (and one
        more for the encoder's proposals in the two-stage model)."""
        if not self.with_box_refine:
            return 1
        return self.decoder_layers + (1 if self.two_stage else 0)

    def check_backbone_features(self) -> None:
        features = self.backbone_features
        if not features or len(features) > self.num_feature_levels:
            raise UsageError(
                f"backbone_config.out_features {features} must name between 1 and num_feature_levels="
                f"{self.num_feature_levels} stages (each is a level; the rest are convolutions of the last)"
            )

    def check(self) -> None:
        super().check()
        for name in ("num_feature_levels", "encoder_n_points", "decoder_n_points", "two_stage_num_proposals"):
            check_int(name, getattr(self, name))
        if self.d_model % INPUT_PROJECTION_GROUPS:
            raise UsageError(
                f"d_model={self.d_model} must be a multiple of {INPUT_PROJECTION_GROUPS} (the input projections' "
                "GroupNorm groups, as the original)"
            )
        for name in ("with_box_refine", "two_stage", "return_intermediate", "disable_custom_kernels"):
            check_bool(name, getattr(self, name))
        if self.two_stage and not self.with_box_refine:
            raise UsageError("two_stage=True needs with_box_refine=True (the original trains it only so)")
        check_probability("focal_alpha", self.focal_alpha)
        check_non_negative("focal_gamma", self.focal_gamma)
        check_non_negative("class_loss_coefficient", self.class_loss_coefficient)
        check_attention(
            self.decoder_attention_type,
            self.decoder_attention_kwargs,
            0.0,
            self.decoder_attention_heads,
            self.d_model,
        )
        requests = {**DEFORMABLE_DECODER_REQUESTS, "attention_dropout": self.attention_dropout}
        check_attention_serves(self.decoder_attention_type, requests, "Deformable DETR's decoder")
