"""Convert a transformers-format ViT checkpoint (model_type ``vit``) to hf_xcv format on disk.

    python -m conversion.vit --input path/or/user/repo --output converted/ [--verify] [--overwrite]

The mapping is ``hf_xcv.conversion.vit.convert`` (pure ``convert_config`` / ``convert_state_dict``).
A ``ViTForImageClassification`` source gives a classifier (its unused pooler, if any, is dropped); a
``ViTModel`` source gives a backbone whose pooler becomes the pre-logits layer. ``--verify`` runs
transformers' model on the source and hf_xcv's on the result with the same random pixels, and deletes
the output again when they differ by more than ``--tolerance``.
"""

from __future__ import annotations

import argparse
import shutil
import sys

import torch

import hf_xcv
from hf_xcv.conversion import convert_checkpoint
from hf_xcv.conversion.vit import TARGET_MODEL_TYPE
from hf_xcv.layers import to_pair


def verify(source: str, converted: str, tolerance: float, revision: str | None = None) -> float:
    """Largest |difference| of logits (classifier) or of hidden states and pooled output (backbone)."""
    from transformers import AutoModel, AutoModelForImageClassification

    is_classifier = "ViTForImageClassification" in (hf_xcv.ViTConfig.from_pretrained(converted).architectures or [])
    theirs_class, ours_class = (
        (AutoModelForImageClassification, hf_xcv.ViTForImageClassification)
        if is_classifier
        else (AutoModel, hf_xcv.ViTModel)
    )
    theirs = theirs_class.from_pretrained(source, revision=revision).eval()
    ours = ours_class.from_pretrained(converted).eval()
    config = ours.config
    pixels = torch.randn(
        2, config.num_channels, *to_pair(config.image_size), generator=torch.Generator().manual_seed(0)
    )
    names = ["logits"] if is_classifier else ["last_hidden_state", "pooler_output"]
    with torch.no_grad():
        a, b = theirs(pixels), ours(pixels)
    deltas = {n: (getattr(a, n) - getattr(b, n)).abs().max().item() for n in names if getattr(a, n) is not None}
    worst = max(deltas.values())
    if worst > tolerance:
        raise ValueError(f"verification failed: max |delta| {deltas} > {tolerance:.1e}")
    return worst


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
        try:
            delta = verify(args.input, args.output, args.tolerance, args.revision)
        except ValueError as err:
            shutil.rmtree(args.output, ignore_errors=True)
            raise SystemExit(f"{err}; removed {args.output}") from err
        print(f"verified: max |delta| = {delta:.3e}")


if __name__ == "__main__":
    main(sys.argv[1:])
