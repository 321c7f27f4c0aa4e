"""Fixtures of the restoration training tests (TTSR's and IPT's): an isolated HF home per module, a user's
folder of photos."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import PIL.Image
import pytest


@pytest.fixture(scope="module")
def module_env(tmp_path_factory):
    return dict(os.environ, HF_HOME=str(tmp_path_factory.mktemp("hf-home")))


def photo_crop(name: str, top: int, left: int, size: tuple[int, int]) -> PIL.Image.Image:
    from hf_xcv.data import load_photo

    pixels = load_photo(name)[top : top + size[0], left : left + size[1]]
    return PIL.Image.fromarray(np.ascontiguousarray(pixels))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A user folder: train / validation / test splits of HR images with references (parts of scikit-image's
    photos, overlapping their HR images), small enough to score in a moment."""
    root = tmp_path_factory.mktemp("folder")
    layout = {
        "train": [("astronaut", 0, 0), ("astronaut", 200, 240), ("camera", 100, 100), ("brick", 0, 300)],
        "validation": [("rocket", 100, 200)],
        "test": [("coffee", 100, 200), ("chelsea", 50, 100)],
    }
    for split, crops in layout.items():
        for sub in ("hr", "ref"):
            (root / split / sub).mkdir(parents=True)
        for index, (name, top, left) in enumerate(crops):
            size = (64, 64) if split == "train" else (48, 44)
            photo_crop(name, top, left, size).save(root / split / "hr" / f"{name}{index}.png")
            photo_crop(name, top + 8, left + 12, size).save(root / split / "ref" / f"{name}{index}.png")
    return root
