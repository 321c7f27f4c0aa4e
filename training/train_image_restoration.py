#!/usr/bin/env python
"""The checkout's entry point of ``hf-xcv-train image-restoration``: the program is
``hf_xcv.cli.train_image_restoration``; its docstring says what it does, and its functions are importable
from here too."""

from hf_xcv.cli.train_image_restoration import *  # noqa: F403
from hf_xcv.cli.train_image_restoration import main

if __name__ == "__main__":
    main()
