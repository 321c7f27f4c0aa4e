#!/usr/bin/env python
"""The checkout's entry point of ``hf-xcv-train object-detection``: the program is
``hf_xcv.cli.train_object_detection``; its docstring says what it does, and its functions are importable
from here too."""

from hf_xcv.cli.train_object_detection import *  # noqa: F403
from hf_xcv.cli.train_object_detection import main

if __name__ == "__main__":
    main()
