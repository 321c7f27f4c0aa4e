"""TTSR's test declarations."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hf_xcv import TTSRForReferenceSuperResolution
from hf_xcv.models.ttsr.modeling_ttsr import upsample
from hf_xcv.processing.restoration import SCALE
from model_specs import ModelTestSpec


def ttsr_dummy_inputs(
    model, *, batch: int = 2, labels: bool = True, padded: bool = True
) -> dict[str, torch.Tensor]:
    """What the registry-driven tests feed every TTSR model: a 6x5 input and a 28x24 reference in [-1, 1] with their
    bicubic companions (and 24x20 labels for the task model). ``padded`` means nothing to images."""
    generator = torch.Generator().manual_seed(0)
    channels = model.config.num_channels
    lr = torch.rand(batch, channels, 6, 5, generator=generator) * 2 - 1
    ref = torch.rand(batch, channels, 28, 24, generator=generator) * 2 - 1
    inputs = {
        "pixel_values": lr,
        "upsampled_pixel_values": upsample(lr, SCALE).clamp(-1, 1),
        "reference_pixel_values": ref,
        "degraded_reference_pixel_values": upsample(F.avg_pool2d(ref, SCALE), SCALE).clamp(-1, 1),
    }
    if labels and isinstance(model, TTSRForReferenceSuperResolution):
        inputs["labels"] = torch.rand(batch, channels, 24, 20, generator=generator) * 2 - 1
    return inputs


# The hard attention's maps are one-hot rows (an argmax): a selection, with no gradient.
SPECS = [ModelTestSpec("xcv_ttsr", "ttsr-test-tiny", ttsr_dummy_inputs, constant_outputs=(r"attentions\.\d+",))]
