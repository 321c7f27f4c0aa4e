"""The checkout's entry point of ``hf-xcv-convert ttsr`` (``python -m conversion.ttsr``): the program is
``hf_xcv.cli.convert_ttsr`` (its docstring says what it does)."""

from hf_xcv.cli.convert_ttsr import *  # noqa: F403
from hf_xcv.cli.convert_ttsr import main

if __name__ == "__main__":
    main()
