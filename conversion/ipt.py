"""The checkout's entry point of ``hf-xcv-convert ipt`` (``python -m conversion.ipt``): the program is
``hf_xcv.cli.convert_ipt`` (its docstring says what it does)."""

from hf_xcv.cli.convert_ipt import *  # noqa: F403
from hf_xcv.cli.convert_ipt import main

if __name__ == "__main__":
    main()
