"""Modules that moved keep their old import path for a while: it warns (FutureWarning) and gives the same objects."""

from __future__ import annotations

import importlib
import sys

import pytest

MOVED = [
    ("hf_xcv.data.degradations", "hf_xcv.processing.restoration", "degrade"),
    ("hf_xcv.training.model_card", "hf_xcv.model_card", "build_model_card"),
    ("hf_xcv.losses.box_ops", "hf_xcv.utils.box_ops", "generalized_box_iou"),
    ("hf_xcv.attention.deformable", "hf_xcv.attention.operators.deformable", "MultiScaleDeformableAttention"),
    ("hf_xcv.attention.texture", "hf_xcv.attention.operators.texture", "transfer_textures"),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED)
def test_an_old_path_warns_and_gives_the_same_objects(old, new, name):
    sys.modules.pop(old, None)  # imported afresh: the warning is the import's
    with pytest.warns(FutureWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018
