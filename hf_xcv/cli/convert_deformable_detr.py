"""Convert a Deformable DETR checkpoint to hf_xcv format on disk: a transformers-format folder or Hub repo
(model_type ``deformable_detr``, with transformers' ResNet or a timm ResNet backbone), or an original
fundamentalvision/Deformable-DETR ``.pth`` (base, box refinement, two-stage, single-scale).

    hf-xcv-convert deformable-detr --input SenseTime/deformable-detr --output deformable-detr-xcv [--verify]
    hf-xcv-convert deformable-detr --input r50_deformable_detr-checkpoint.pth --output deformable-detr-xcv \\
        [--num_heads 8] [--num_queries 300] [--dilation] [--verify]
    python -m hf_xcv.convert deformable-detr ...    (in a checkout also: python -m conversion.deformable_detr ...)

The mappings are ``hf_xcv.conversion.deformable_detr``: ``convert`` for transformers' folders, ``convert_official``
for the original files (fused ``in_proj_weight`` split into thirds, numbered LayerNorms named, torchvision ResNet
names mapped onto transformers' ResNet, the config read from the shapes). What weights cannot tell: the head count
(8 in every released model, ``--num_heads``), the two-stage model's number of queries (300, ``--num_queries``) and
DC5 (``--dilation``). Every key is renamed or explicitly dropped; anything else is an error and nothing is written.
The output gets hf_xcv's Deformable DETR processor (shortest edge 800, longest 1333).
``--verify`` runs transformers' DeformableDetrForObjectDetection on the source weights and hf_xcv's on the result,
in eval mode on a padded batch of two random images of different sizes, and deletes the output again when logits
or boxes differ by more than ``--tolerance``.
"""

from __future__ import annotations

import argparse
import re
import sys

import torch

import hf_xcv
from hf_xcv.conversion import deformable_detr as mapping

from ..utils.errors import UsageError
from .conversion import is_official_file, run, verify_detector, write_converted


def convert_official_file(
    source: str, output: str, num_heads: int, num_queries: int, dilation: bool, overwrite: bool
) -> list[str]:
    """Write the hf_xcv folder of an original ``.pth`` (config, weights, processor), atomically."""
    state_dict = mapping.load_official(source)
    config, converted, dropped = mapping.convert_official(state_dict, num_heads, num_queries, dilation)
    processor = hf_xcv.XcvDeformableDetrImageProcessor()
    write_converted(config, converted, processor, output, mapping.TARGET_MODEL_TYPE, source, overwrite)
    return dropped


def transformers_weights(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """hf_xcv's weights under every name transformers' model holds: the decoder's aliases of the heads, and the
    copies of a head that hf_xcv stores once (its names are otherwise transformers' in-memory ones)."""
    out: dict[str, torch.Tensor] = {}
    for key in theirs:
        name = re.sub(r"^model\.decoder\.(?=(class|bbox)_embed\.)", "", key)
        if name not in ours:
            name = re.sub(r"^(class_embed|bbox_embed)\.\d+\.", r"\1.0.", name)
        if name in ours:
            out[key] = ours[name]
    return out


def transformers_model(source: str, converted: str, revision: str | None = None) -> torch.nn.Module:
    """transformers' Deformable DETR with the source's weights: loaded from a transformers folder, or built from
    the converted config (transformers' ResNet, untied heads as the original's) and given the converted weights."""
    from transformers import DeformableDetrConfig, DeformableDetrForObjectDetection, ResNetConfig

    if not is_official_file(source):
        return DeformableDetrForObjectDetection.from_pretrained(source, revision=revision)
    ours = hf_xcv.DeformableDetrConfig.from_pretrained(converted)
    fields = {k: v for k, v in ours.to_dict().items() if k in mapping.ARCHITECTURE_FIELDS}
    backbone = ResNetConfig(**ours.backbone_config.to_dict())
    config = DeformableDetrConfig(
        **fields, backbone_config=backbone, num_labels=ours.num_labels, tie_word_embeddings=False
    )
    theirs = DeformableDetrForObjectDetection(config)
    weights = hf_xcv.DeformableDetrForObjectDetection.from_pretrained(converted).state_dict()
    expected = theirs.state_dict()
    missing, _ = theirs.load_state_dict(transformers_weights(weights, expected), strict=False)
    if missing:
        raise UsageError(f"transformers' Deformable DETR does not take the converted weights: missing {missing}")
    return theirs


def verify(source: str, converted: str, tolerance: float, revision: str | None = None) -> float:
    """Largest |difference| of logits and boxes on a padded batch of two images."""
    ours = hf_xcv.DeformableDetrForObjectDetection.from_pretrained(converted)
    return verify_detector(transformers_model(source, converted, revision), ours, tolerance)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num_heads", type=int, default=8, help="attention heads of an original file (default 8)")
    parser.add_argument(
        "--num_queries", type=int, default=300, help="queries of an original two-stage file (default 300)"
    )
    parser.add_argument("--dilation", action="store_true", help="an original DC5 file (dilated C5)")


def _convert(args: argparse.Namespace) -> list[str] | None:
    """An original file here; a transformers folder or repo is left to the shared conversion (None)."""
    if not is_official_file(args.input):
        return None
    for name in ("num_heads", "num_queries"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be a positive number, got {getattr(args, name)}")
    if args.dilation and args.verify:  # refused before anything is written
        raise UsageError("--verify cannot check a DC5 file: transformers' own ResNet backbone does not dilate")
    return convert_official_file(
        args.input, args.output, args.num_heads, args.num_queries, args.dilation, args.overwrite
    )


def main(argv: list[str] | None = None) -> None:
    source_name = "transformers Deformable DETR or original .pth"
    run(argv, __doc__, mapping.TARGET_MODEL_TYPE, verify, source_name, _add_arguments, _convert)


if __name__ == "__main__":
    main(sys.argv[1:])
