"""The checkout's entry point of ``hf-xcv-convert marian`` (``python -m conversion.marian``): the program is
``hf_xcv.cli.convert_marian`` (its docstring says what it does)."""

from hf_xcv.cli.convert_marian import *  # noqa: F403
from hf_xcv.cli.convert_marian import main

if __name__ == "__main__":
    main()
