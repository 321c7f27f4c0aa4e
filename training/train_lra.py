#!/usr/bin/env python
"""The checkout's entry point of ``hf-xcv-train lra``: the program is ``hf_xcv.cli.train_lra``; its docstring says
what it does, and its functions are importable from here too."""

from hf_xcv.cli.train_lra import *  # noqa: F403
from hf_xcv.cli.train_lra import main

if __name__ == "__main__":
    main()
