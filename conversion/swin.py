"""The checkout's entry point of ``hf-xcv-convert swin`` (``python -m conversion.swin``): the program is
``hf_xcv.cli.convert_swin`` (its docstring says what it does)."""

from hf_xcv.cli.convert_swin import *  # noqa: F403
from hf_xcv.cli.convert_swin import main

if __name__ == "__main__":
    main()
