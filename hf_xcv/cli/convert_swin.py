"""Convert a Swin checkpoint to hf_xcv format on disk: a transformers-format folder or Hub repo (model_type
``swin``), or an original microsoft/Swin-Transformer ``.pth`` file.

    hf-xcv-convert swin --input microsoft/swin-tiny-patch4-window7-224 --output swin-t-xcv [--verify]
    hf-xcv-convert swin --input swin_tiny_patch4_window7_224.pth --output swin-t-xcv [--image_size 224] [--verify]
    python -m hf_xcv.convert swin ...    (in a checkout also: python -m conversion.swin ...)

The mappings are ``hf_xcv.conversion.swin``: ``convert`` for transformers' folders, ``convert_official`` for
the original files (fused ``qkv`` split into thirds, the ``relative_position_index`` / ``attn_mask`` buffers
dropped and rebuilt, the config read from the shapes; ``--image_size`` when the file cannot tell). Every key is
renamed or explicitly dropped; anything else is an error and nothing is written. The output gets hf_xcv's Swin
processor (the original evaluation transform). ``--verify`` runs transformers' Swin on the source weights and
hf_xcv's on the result with the same random pixels, and deletes the output again when they differ by more than
``--tolerance``.
"""

from __future__ import annotations

import argparse
import sys

import torch

import hf_xcv
from hf_xcv.conversion import swin as mapping
from hf_xcv.layers import to_pair

from ..utils.errors import UsageError
from .conversion import check_deltas, is_official_file, run, sample_inputs, write_converted

_TO_TRANSFORMERS = "attention.relative_position_bias.relative_position_bias_table"


def convert_official_file(source: str, output: str, image_size: int | None, overwrite: bool) -> list[str]:
    """Write the hf_xcv folder of an original ``.pth`` (config, weights, processor), atomically."""
    config, state_dict, dropped = mapping.convert_official(mapping.load_official(source), image_size)
    side = to_pair(config["image_size"])[0]
    processor = hf_xcv.XcvSwinImageProcessor(crop_size={"height": side, "width": side}, crop_pct=224 / 256)
    write_converted(config, state_dict, processor, output, mapping.TARGET_MODEL_TYPE, source, overwrite)
    return dropped


def transformers_model(source: str, converted: str, revision: str | None = None) -> torch.nn.Module:
    """transformers' Swin with the source's weights: loaded from a transformers folder, or built from the converted
    config and given the original file's weights under transformers' names (a strict load)."""
    from transformers import AutoModel, AutoModelForImageClassification, SwinConfig

    ours = hf_xcv.SwinConfig.from_pretrained(converted)
    classifier = "SwinForImageClassification" in (ours.architectures or [])
    auto = AutoModelForImageClassification if classifier else AutoModel
    if not is_official_file(source):
        return auto.from_pretrained(source, revision=revision)
    fields = {k: v for k, v in ours.to_dict().items() if k in mapping.SOURCE_DEFAULTS}
    theirs = auto.from_config(SwinConfig(**fields, num_labels=ours.num_labels))
    _, state_dict, _ = mapping.convert_official(mapping.load_official(source), ours.image_size)
    renamed = {
        k.replace("attention.core.relative_position_bias_table", _TO_TRANSFORMERS): v for k, v in state_dict.items()
    }
    if not classifier:
        renamed = {k: v for k, v in renamed.items() if not k.startswith("classifier.")}
    missing, unexpected = theirs.load_state_dict(renamed, strict=False)
    missing = [k for k in missing if "relative_position_index" not in k]
    if missing or unexpected:
        raise UsageError(
            f"transformers' Swin does not take the converted weights: missing {missing}, extra {unexpected}"
        )
    return theirs


def verify(source: str, converted: str, tolerance: float, revision: str | None = None) -> float:
    """Largest |difference| of logits (classifier) or of the last hidden state (bare model)."""
    theirs = transformers_model(source, converted, revision).eval()
    config = hf_xcv.SwinConfig.from_pretrained(converted)
    classifier = "SwinForImageClassification" in (config.architectures or [])
    ours_class = hf_xcv.SwinForImageClassification if classifier else hf_xcv.SwinModel
    ours = ours_class.from_pretrained(converted).eval()
    pixels = sample_inputs(ours)["pixel_values"]
    names = ["logits"] if classifier else ["last_hidden_state"]
    with torch.no_grad():
        a, b = theirs(pixels), ours(pixels)
    return check_deltas({n: (getattr(a, n) - getattr(b, n)).abs().max().item() for n in names}, tolerance)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image_size", type=int, default=None, help="resolution of an original file (else inferred)")


def _convert(args: argparse.Namespace) -> list[str] | None:
    """An original file here; a transformers folder or repo is left to the shared conversion (None)."""
    if not is_official_file(args.input):
        return None
    if args.image_size is not None and args.image_size < 1:
        raise UsageError(f"--image_size must be a positive number of pixels, got {args.image_size}")
    return convert_official_file(args.input, args.output, args.image_size, args.overwrite)


def main(argv: list[str] | None = None) -> None:
    run(
        argv, __doc__, mapping.TARGET_MODEL_TYPE, verify, "transformers Swin or original .pth", _add_arguments, _convert
    )


if __name__ == "__main__":
    main(sys.argv[1:])
