"""Convert a transformers-format ViT checkpoint (model_type ``vit``) to hf_xcv format on disk.

    hf-xcv-convert vit --input path/or/user/repo --output converted/ [--verify] [--overwrite]
    python -m hf_xcv.convert vit ...    (in a checkout also: python -m conversion.vit ...)

The mapping is ``hf_xcv.conversion.vit.convert`` (pure ``convert_config`` / ``convert_state_dict``).
A ``ViTForImageClassification`` source gives a classifier (its unused pooler, if any, is dropped); a
``ViTModel`` source gives a backbone whose pooler becomes the pre-logits layer. ``--verify`` runs
transformers' model on the source and hf_xcv's on the result with the same random pixels, and deletes
the output again when they differ by more than ``--tolerance``.
"""

from __future__ import annotations

import sys

import torch

import hf_xcv
from hf_xcv.conversion.vit import TARGET_MODEL_TYPE

from .conversion import check_deltas, run, sample_inputs


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
    pixels = sample_inputs(ours)["pixel_values"]
    names = ["logits"] if is_classifier else ["last_hidden_state", "pooler_output"]
    with torch.no_grad():
        a, b = theirs(pixels), ours(pixels)
    deltas = {n: (getattr(a, n) - getattr(b, n)).abs().max().item() for n in names if getattr(a, n) is not None}
    return check_deltas(deltas, tolerance)


def main(argv: list[str] | None = None) -> None:
    run(argv, __doc__, TARGET_MODEL_TYPE, verify, "transformers ViT")


if __name__ == "__main__":
    main(sys.argv[1:])
