#!/usr/bin/env python
"""The checkout's entry point of ``hf-xcv-train image-classification``: the program is
``hf_xcv.cli.train_image_classification``; its docstring says what it does, and its functions are importable
from here too."""

from hf_xcv.cli.train_image_classification import *  # noqa: F403
from hf_xcv.cli.train_image_classification import main  # noqa: F401 (tests and users call it from here)

if __name__ == "__main__":  # run as hf-xcv-train runs it: a user's mistake in one line
    import sys

    from hf_xcv.train import main as train

    train(["image-classification", *sys.argv[1:]])
