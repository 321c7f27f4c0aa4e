"""Convert a DETR checkpoint to hf_xcv format on disk: a transformers-format folder or Hub repo (model_type
``detr``, with transformers' ResNet or a timm ResNet backbone), or an original facebookresearch/detr ``.pth``.

    hf-xcv-convert detr --input facebook/detr-resnet-50 --output detr-r50-xcv [--verify]
    hf-xcv-convert detr --input detr-r50-e632da11.pth --output detr-r50-xcv [--num_heads 8] [--dilation] [--verify]
    python -m hf_xcv.convert detr ...    (in a checkout also: python -m conversion.detr ...)

The mappings are ``hf_xcv.conversion.detr``: ``convert`` for transformers' folders, ``convert_official`` for the
original files (fused ``in_proj_weight`` split into thirds, torchvision ResNet names mapped onto transformers'
ResNet, the config read from the shapes; the head count (8 in every released model) and DC5 cannot be read from
weights: ``--num_heads``, ``--dilation``). Every key is renamed or explicitly dropped; anything else is an error
and nothing is written. The output gets hf_xcv's DETR processor (shortest edge 800, longest 1333).
``--verify`` runs transformers' DetrForObjectDetection on the source weights and hf_xcv's on the result, in eval
mode on a padded batch of two random images of different sizes, and deletes the output again when logits or boxes
differ by more than ``--tolerance``.
"""

from __future__ import annotations

import argparse
import sys

import torch

import hf_xcv
from hf_xcv.conversion import detr as mapping

from ..utils.errors import UsageError
from .conversion import is_official_file, run, verify_detector, write_converted


def convert_official_file(source: str, output: str, num_heads: int, dilation: bool, overwrite: bool) -> list[str]:
    """Write the hf_xcv folder of an original ``.pth`` (config, weights, processor), atomically."""
    config, state_dict, dropped = mapping.convert_official(mapping.load_official(source), num_heads, dilation)
    processor = hf_xcv.XcvDetrImageProcessor()
    write_converted(config, state_dict, processor, output, mapping.TARGET_MODEL_TYPE, source, overwrite)
    return dropped


def transformers_model(source: str, converted: str, revision: str | None = None) -> torch.nn.Module:
    """transformers' DETR with the source's weights: loaded from a transformers folder, or built from the converted
    config (transformers' ResNet) and given the converted weights, whose names are transformers' in-memory ones."""
    from transformers import DetrConfig, DetrForObjectDetection, ResNetConfig

    if not is_official_file(source):
        return DetrForObjectDetection.from_pretrained(source, revision=revision)
    ours = hf_xcv.DetrConfig.from_pretrained(converted)
    fields = {k: v for k, v in ours.to_dict().items() if k in mapping.ARCHITECTURE_FIELDS}
    backbone = ResNetConfig(**ours.backbone_config.to_dict())
    theirs = DetrForObjectDetection(
        DetrConfig(**fields, use_timm_backbone=False, backbone_config=backbone, num_labels=ours.num_labels)
    )
    state_dict = hf_xcv.DetrForObjectDetection.from_pretrained(converted).state_dict()
    missing, unexpected = theirs.load_state_dict(state_dict, strict=False)
    if missing or unexpected:
        raise UsageError(
            f"transformers' DETR does not take the converted weights: missing {missing}, extra {unexpected}"
        )
    return theirs


def verify(source: str, converted: str, tolerance: float, revision: str | None = None) -> float:
    """Largest |difference| of logits and boxes on a padded batch of two images."""
    ours = hf_xcv.DetrForObjectDetection.from_pretrained(converted)
    return verify_detector(transformers_model(source, converted, revision), ours, tolerance)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num_heads", type=int, default=8, help="attention heads of an original file (default 8)")
    parser.add_argument("--dilation", action="store_true", help="an original DC5 file (dilated C5)")


def _convert(args: argparse.Namespace) -> list[str] | None:
    """An original file here; a transformers folder or repo is left to the shared conversion (None)."""
    if not is_official_file(args.input):
        return None
    if args.num_heads < 1:
        raise UsageError(f"--num_heads must be a positive number, got {args.num_heads}")
    return convert_official_file(args.input, args.output, args.num_heads, args.dilation, args.overwrite)


def main(argv: list[str] | None = None) -> None:
    run(
        argv, __doc__, mapping.TARGET_MODEL_TYPE, verify, "transformers DETR or original .pth", _add_arguments, _convert
    )


if __name__ == "__main__":
    main(sys.argv[1:])
