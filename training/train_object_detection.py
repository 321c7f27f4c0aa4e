#!/usr/bin/env python
"""The checkout's entry point of ``hf-xcv-train object-detection``: the program is
``hf_xcv.cli.train_object_detection``; its docstring says what it does, and its functions are importable
from here too."""

from hf_xcv.cli.train_object_detection import *  # noqa: F403
from hf_xcv.cli.train_object_detection import main  # noqa: F401 (tests and users call it from here)

if __name__ == "__main__":  # run as hf-xcv-train runs it: a user's mistake in one line
    import sys

    from hf_xcv.train import main as train

    train(["object-detection", *sys.argv[1:]])
