"""Convert a transformers Marian checkpoint (model_type ``marian``, e.g. an opus-mt model) to hf_xcv on disk.

    hf-xcv-convert marian --input path/or/Helsinki-NLP/opus-mt-en-de --output converted/ [--verify]
    python -m hf_xcv.convert marian ...    (in a checkout also: python -m conversion.marian ...)

The mapping is ``hf_xcv.conversion.marian.convert`` (pure ``convert_config`` / ``convert_state_dict``). The
tokenizer files (``source.spm``, ``target.spm``, ``vocab.json``, ``tokenizer_config.json``, ...) and
``generation_config.json`` are copied unchanged, so ``AutoTokenizer`` and ``generate`` behave as with the
source. ``--verify`` runs transformers' model on the source and hf_xcv's on the result with the same random
tokens, and deletes the output again when they differ by more than ``--tolerance``.
"""

from __future__ import annotations

import sys

import torch

import hf_xcv
from hf_xcv.conversion.marian import TARGET_MODEL_TYPE

from .conversion import check_deltas, run


def verify(source: str, converted: str, tolerance: float, revision: str | None = None) -> float:
    """Largest |difference| of the logits (MarianMTModel) or decoder hidden states (MarianModel)."""
    from transformers import MarianModel, MarianMTModel

    config = hf_xcv.TransformerConfig.from_pretrained(converted)
    is_generator = "TransformerModel" not in (config.architectures or [])
    theirs_class, ours_class, name = (
        (MarianMTModel, hf_xcv.TransformerForConditionalGeneration, "logits")
        if is_generator
        else (MarianModel, hf_xcv.TransformerModel, "last_hidden_state")
    )
    theirs = theirs_class.from_pretrained(source, revision=revision).eval()
    ours = ours_class.from_pretrained(converted).eval()
    generator = torch.Generator().manual_seed(0)
    inputs = {
        "input_ids": torch.randint(0, config.vocab_size, (2, 12), generator=generator),
        "decoder_input_ids": torch.randint(0, config.decoder_vocab_size, (2, 9), generator=generator),
    }
    with torch.no_grad():
        delta = (getattr(theirs(**inputs), name) - getattr(ours(**inputs), name)).abs().max().item()
    return check_deltas({name: delta}, tolerance)


def main(argv: list[str] | None = None) -> None:
    run(argv, __doc__, TARGET_MODEL_TYPE, verify, "transformers Marian")


if __name__ == "__main__":
    main(sys.argv[1:])
