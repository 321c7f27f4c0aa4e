"""``hf-xcv-convert <format> [options]`` / ``python -m hf_xcv.convert <format> [options]``: checkpoint converters.

    hf-xcv-convert vit --input google/vit-base-patch16-224 --output vit-b16-xcv --verify
    hf-xcv-convert swin --input microsoft/swin-tiny-patch4-window7-224 --output swin-t-xcv --verify
    hf-xcv-convert swin --input swin_tiny_patch4_window7_224.pth --output swin-t-xcv --verify
    hf-xcv-convert detr --input facebook/detr-resnet-50 --output detr-r50-xcv --verify
    hf-xcv-convert detr --input detr-r50-e632da11.pth --output detr-r50-xcv --verify
    hf-xcv-convert deformable-detr --input SenseTime/deformable-detr --output deformable-detr-xcv --verify
    hf-xcv-convert deformable-detr --input r50_deformable_detr-checkpoint.pth --output deformable-detr-xcv --verify
    hf-xcv-convert marian --input Helsinki-NLP/opus-mt-en-de --output opus-mt-en-de-xcv --verify
    hf-xcv-convert ttsr --input TTSR.pt --output ttsr-xcv --verify
    hf-xcv-convert ipt --input IPT_sr2.pt --output ipt-sr-x2-xcv --verify
    hf-xcv-convert to-transformers --input runs/digits --output digits-for-transformers --verify

``hf-xcv-convert <format> --help`` lists a format's options.
"""

from __future__ import annotations

import importlib
import sys

from .cli.dispatch import dispatch
from .registry import conversion_programs

# The formats and their programs, as the model families declare them (importing hf_xcv.convert imports hf_xcv, and
# with it every family).
FORMATS = conversion_programs()


def main(argv: list[str] | None = None) -> None:
    """The console script: its return value is the exit status, so the program's result is not returned."""
    dispatch("hf-xcv-convert", FORMATS, __doc__, sys.argv[1:] if argv is None else argv, importlib.import_module)


if __name__ == "__main__":
    main()
