"""Swin's test declarations."""

from __future__ import annotations

from hf_xcv import SwinForImageClassification
from model_specs import ModelTestSpec, image_dummy_inputs


def swin_dummy_inputs(model, *, batch: int = 2, labels: bool = True, padded: bool = True) -> dict:
    """Random images of the model's size (and class labels for the classifier). ``padded`` means nothing to
    images."""
    return image_dummy_inputs(
        model.config, batch=batch, labels=labels and isinstance(model, SwinForImageClassification)
    )


SPECS = [ModelTestSpec("xcv_swin", "swin-test-tiny", swin_dummy_inputs)]
