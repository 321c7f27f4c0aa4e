"""Convert a transformers-format ViT checkpoint (model_type ``vit``) to hf_xcv format on disk.

    python -m conversion.vit --input path/or/user/repo --output converted/ [--verify] [--overwrite]

The rename rules are the pure functions ``hf_xcv.conversion.vit.convert_config`` /
``convert_state_dict``. ``--verify`` runs transformers' model on the source and hf_xcv's on the
result with the same random pixels and fails when the logits differ by more than ``--tolerance``.
"""

from __future__ import annotations

import argparse
import sys

import torch

import hf_xcv
from hf_xcv.conversion import convert_checkpoint
from hf_xcv.conversion.vit import TARGET_MODEL_TYPE


def verify(source: str, converted: str, tolerance: float) -> float:
    """max |logits_transformers - logits_hf_xcv| on two random images (and hidden states for base models)."""
    from transformers import AutoModel, AutoModelForImageClassification

    ours_config = hf_xcv.ViTConfig.from_pretrained(converted)
    if "ViTForImageClassification" in (ours_config.architectures or []):
        theirs = AutoModelForImageClassification.from_pretrained(source).eval()
        ours = hf_xcv.ViTForImageClassification.from_pretrained(converted).eval()
        output = "logits"
    else:  # a base model checkpoint without a classifier
        theirs = AutoModel.from_pretrained(source).eval()
        ours = hf_xcv.ViTModel.from_pretrained(converted).eval()
        output = "last_hidden_state"
    config = ours.config
    size = hf_xcv.layers.to_pair(config.image_size)
    pixels = torch.randn(2, config.num_channels, *size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        delta = (getattr(theirs(pixels), output) - getattr(ours(pixels), output)).abs().max().item()
    if delta > tolerance:
        raise SystemExit(f"verification failed: max |delta {output}| = {delta:.3e} > {tolerance:.1e}")
    return delta


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="transformers ViT checkpoint: folder or Hub repo id")
    parser.add_argument("--output", required=True, help="folder to write the hf_xcv checkpoint to")
    parser.add_argument("--revision", default=None, help="Hub revision of --input")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    parser.add_argument("--verify", action="store_true", help="compare both models' outputs after converting")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args(argv)
    hub_kwargs = {"revision": args.revision} if args.revision else {}
    dropped = convert_checkpoint(args.input, args.output, TARGET_MODEL_TYPE, overwrite=args.overwrite, **hub_kwargs)
    note = f" (dropped {len(dropped)} keys: {dropped})" if dropped else ""
    print(f"converted {args.input} -> {args.output}{note}")
    if args.verify:
        print(f"verified: max |delta| = {verify(args.input, args.output, args.tolerance):.3e}")


if __name__ == "__main__":
    main(sys.argv[1:])
