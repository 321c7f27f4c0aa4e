"""IPT's test declarations (the tiny preset has one task: each call trains one task's head, and every parameter
must get a gradient)."""

from __future__ import annotations

from typing import Any

import torch

from hf_xcv import IPTForImageRestoration
from model_specs import ModelTestSpec


def ipt_dummy_inputs(
    model, *, batch: int = 2, labels: bool = True, padded: bool = True
) -> dict[str, Any]:
    """What the registry-driven tests feed every IPT model: one tile of values in [0, rgb_range] for the last task
    (and its clean images for the task model). ``padded`` means nothing to images."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    size, task = config.image_size, config.tasks[-1]
    inputs: dict[str, Any] = {
        "pixel_values": torch.rand(batch, config.num_channels, size, size, generator=generator) * config.rgb_range,
        "task": task,
    }
    if labels and isinstance(model, IPTForImageRestoration):
        side = size * model.scale(task)
        inputs["labels"] = torch.rand(batch, config.num_channels, side, side, generator=generator) * config.rgb_range
    return inputs


SPECS = [ModelTestSpec("xcv_ipt", "ipt-test-tiny", ipt_dummy_inputs)]
