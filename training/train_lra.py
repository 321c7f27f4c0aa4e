#!/usr/bin/env python
"""The checkout's entry point of ``hf-xcv-train lra``: the program is ``hf_xcv.cli.train_lra``; its docstring says
what it does, and its functions are importable from here too."""

from hf_xcv.cli.train_lra import *  # noqa: F403
from hf_xcv.cli.train_lra import main  # noqa: F401 (tests and users call it from here)

if __name__ == "__main__":  # run as hf-xcv-train runs it: a user's mistake in one line
    import sys

    from hf_xcv.train import main as train

    train(["lra", *sys.argv[1:]])
