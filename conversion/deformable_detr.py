"""The checkout's entry point of ``hf-xcv-convert deformable-detr`` (``python -m conversion.deformable_detr``): the
program is ``hf_xcv.cli.convert_deformable_detr`` (its docstring says what it does)."""

from hf_xcv.cli.convert_deformable_detr import *  # noqa: F403
from hf_xcv.cli.convert_deformable_detr import main

if __name__ == "__main__":
    main()
