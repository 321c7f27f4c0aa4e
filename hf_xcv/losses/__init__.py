"""Training losses shared by the hf_xcv models."""

from ..utils.box_ops import (
    box_area,
    box_cxcywh_to_xyxy,
    box_iou,
    box_xywh_to_xyxy,
    box_xyxy_to_cxcywh,
    box_xyxy_to_xywh,
    check_boxes,
    generalized_box_iou,
    paired_generalized_box_iou,
)
from .contrastive import supervised_contrastive_loss
from .detection import SetCriterion, average_box_count, sigmoid_focal_loss
from .label_smoothing import label_smoothed_loss
from .matcher import HungarianMatcher
from .perceptual import (
    TEXTURE_LOSS_KINDS,
    TTSR_LOSS_WEIGHTS,
    TTSR_REC_LOSS_WEIGHTS,
    TTSRAdversarialLoss,
    TTSRCriterion,
    TTSRDiscriminator,
    TTSRLossWeights,
    build_discriminator_optimizer,
    gradient_penalty,
    perceptual_loss,
    texture_loss,
    transferal_perceptual_loss,
    wgan_discriminator_loss,
    wgan_generator_loss,
)
from .reconstruction import RECONSTRUCTION_KINDS, reconstruction_loss
from .soft_target import soft_target_cross_entropy
from .targets import check_targets

__all__ = [
    "RECONSTRUCTION_KINDS",
    "TEXTURE_LOSS_KINDS",
    "TTSR_LOSS_WEIGHTS",
    "TTSR_REC_LOSS_WEIGHTS",
    "HungarianMatcher",
    "SetCriterion",
    "TTSRAdversarialLoss",
    "TTSRCriterion",
    "TTSRDiscriminator",
    "TTSRLossWeights",
    "average_box_count",
    "box_area",
    "box_cxcywh_to_xyxy",
    "box_iou",
    "box_xywh_to_xyxy",
    "box_xyxy_to_cxcywh",
    "box_xyxy_to_xywh",
    "build_discriminator_optimizer",
    "check_targets",
    "check_boxes",
    "generalized_box_iou",
    "gradient_penalty",
    "label_smoothed_loss",
    "paired_generalized_box_iou",
    "perceptual_loss",
    "reconstruction_loss",
    "sigmoid_focal_loss",
    "soft_target_cross_entropy",
    "supervised_contrastive_loss",
    "texture_loss",
    "transferal_perceptual_loss",
    "wgan_discriminator_loss",
    "wgan_generator_loss",
]
