"""The checkout's entry point of ``hf-xcv-convert vit`` (``python -m conversion.vit``): the program is
``hf_xcv.cli.convert_vit`` (its docstring says what it does)."""

from hf_xcv.cli.convert_vit import *  # noqa: F403
from hf_xcv.cli.convert_vit import main

if __name__ == "__main__":
    main()
