"""Write an hf_xcv checkpoint in transformers' own format, for people who only have transformers.

    hf-xcv-convert to-transformers --input runs/digits --output digits-for-transformers [--verify]

Every type transformers has the architecture of: ViT becomes transformers' ``vit``, Swin ``swin`` (classifier, bare
model, backbone), DETR ``detr`` and Deformable DETR ``deformable_detr`` (base, box refinement, two-stage; ResNet or
Swin backbones), each with its image processor as transformers' own class; a Marian-compatible Transformer (post-LN,
half-sin/half-cos positions, full attention) becomes ``marian``, with its tokenizer and generation config. Anything
transformers has no equivalent for (an X-former attention, a window transformers' Swin cannot take, DC5) is refused
by name before anything is written. ``--verify`` runs hf_xcv's model on the input and transformers' on the output
with the same random input, and deletes the output again when their outputs (logits, boxes, hidden states, feature
maps) differ by more than ``--tolerance``.
"""

from __future__ import annotations

import argparse
import shutil

import torch
import transformers

import hf_xcv  # noqa: F401  (registers the hf_xcv types for AutoModel)
from hf_xcv import MODEL_TYPES
from hf_xcv.conversion.export import export_checkpoint

from .conversion import check_deltas, output_deltas, sample_inputs


def verify(source: str, exported: str, tolerance: float) -> float:
    """Largest |difference| of the first outputs of hf_xcv's model and transformers' exported one."""
    config = transformers.AutoConfig.from_pretrained(source)
    ours = MODEL_TYPES[config.model_type].model_class(config.architectures).from_pretrained(source).eval()
    theirs_config = transformers.AutoConfig.from_pretrained(exported)
    theirs = getattr(transformers, theirs_config.architectures[0]).from_pretrained(exported).eval()
    inputs = sample_inputs(ours)
    with torch.no_grad():
        a, b = ours(**inputs, return_dict=True), theirs(**inputs, return_dict=True)
    deltas = output_deltas(a, b) or {"first output": (a[0] - b[0]).abs().max().item()}
    return check_deltas(deltas, tolerance)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="hf_xcv checkpoint: folder or Hub repo id")
    parser.add_argument("--output", required=True, help="folder to write transformers' checkpoint to")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    parser.add_argument("--verify", action="store_true", help="compare both models' outputs after exporting")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args(argv)
    export_checkpoint(args.input, args.output, overwrite=args.overwrite)
    print(f"exported {args.input} -> {args.output} (transformers format)")
    if args.verify:
        try:
            delta = verify(args.input, args.output, args.tolerance)
        except ValueError as err:
            shutil.rmtree(args.output, ignore_errors=True)
            raise SystemExit(f"{err}; removed {args.output}") from err
        print(f"verified: max |delta| = {delta:.3e}")


if __name__ == "__main__":
    main()
