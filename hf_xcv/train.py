"""``hf-xcv-train <task> [options]`` / ``python -m hf_xcv.train <task> [options]``: the training programs.

    hf-xcv-train image-classification --output_dir runs/digits
    hf-xcv-train object-detection --output_dir runs/shapes
    hf-xcv-train image-restoration --output_dir runs/ttsr-photos
    hf-xcv-train translation --output_dir runs/numbers
    hf-xcv-train lra --task listops --attention_type performer --output_dir runs/listops-performer
    hf-xcv-train tokenizer --builtin_numbers 20000 --vocab_size 1000 --output runs/tokenizer

``hf-xcv-train <task> --help`` lists a task's options. Under ``accelerate launch`` or ``torchrun`` use
``-m hf_xcv.train <task>``.
"""

from __future__ import annotations

import importlib
import sys

from .cli.dispatch import dispatch

TASKS = {
    "image-classification": "hf_xcv.cli.train_image_classification",
    "object-detection": "hf_xcv.cli.train_object_detection",
    "image-restoration": "hf_xcv.cli.train_image_restoration",
    "translation": "hf_xcv.cli.train_translation",
    "lra": "hf_xcv.cli.train_lra",
    "tokenizer": "hf_xcv.cli.train_tokenizer",
}


def main(argv: list[str] | None = None) -> None:
    """The console script: its return value is the exit status, so the program's result is not returned."""
    dispatch("hf-xcv-train", TASKS, __doc__, sys.argv[1:] if argv is None else argv, importlib.import_module)


if __name__ == "__main__":
    main()
