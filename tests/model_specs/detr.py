"""DETR's and Deformable DETR's test declarations (the same inputs: padded images and box targets)."""

from __future__ import annotations

from typing import Any

import torch

from model_specs import ModelTestSpec


def detr_dummy_inputs(model, *, batch: int = 2, labels: bool = True, padded: bool = True) -> dict:
    """What the registry-driven tests feed every DETR and Deformable DETR model: a batch of images where the
    second is padded at the bottom and right (when ``padded``), and for the detector one target dict per image:
    with ``padded`` the first image without objects and the others with 1, 2, ... boxes; without, two boxes in
    every image (so that any split of the batch holds as many objects in each part)."""
    generator = torch.Generator().manual_seed(0)
    height, width = 96, 80
    inputs: dict[str, Any] = {
        "pixel_values": torch.randn(batch, model.config.num_channels, height, width, generator=generator)
    }
    mask = torch.ones(batch, height, width, dtype=torch.long)
    if padded and batch > 1:
        mask[1:, 64:, :] = 0
        mask[1:, :, 48:] = 0
    inputs["pixel_mask"] = mask
    if labels and getattr(model, "_is_task_model", False):  # the detectors: DETR, Deformable DETR
        targets = []
        for index in range(batch):
            count = index if padded else 2
            centres = 0.25 + 0.5 * torch.rand(count, 2, generator=generator)
            sizes = 0.1 + 0.3 * torch.rand(count, 2, generator=generator)
            classes = torch.randint(0, model.config.num_labels, (count,), generator=generator)
            targets.append({"class_labels": classes, "boxes": torch.cat([centres, sizes], dim=-1)})
        inputs["labels"] = targets
    return inputs


# The first decoder layer's self-attention reads the all-zero initial targets as its values. With the original's
# zero attention biases its values are then zero and its output is o_proj's bias alone: the q, k, v and o matrices,
# the q / k biases and the LayerNorm's scale get no gradient from a freshly initialised model (in the original as
# here; the first update of the value bias brings them in).
DETR_ZERO_GRADIENTS = (
    r"(model\.)?decoder\.layers\.0\.self_attn\.(q|k|v|o)_proj\.weight",
    r"(model\.)?decoder\.layers\.0\.self_attn\.(q|k)_proj\.bias",
    r"(model\.)?decoder\.layers\.0\.self_attn_layer_norm\.weight",
)
# Zero by the original initialisation, on a freshly initialised model (the first update brings them in): the box
# heads' last layer is zero, so its first two layers get no gradient; positions (and so the level embedding) reach the
# encoder only through the sampling offsets and attention weights, whose matrices are zero.
DEFORMABLE_ZERO_GRADIENTS = (r"bbox_embed\.\d+\.layers\.[01]\.(weight|bias)", r"(model\.)?level_embed")

SPECS = [
    ModelTestSpec(
        "xcv_detr",
        "detr-test-tiny",
        detr_dummy_inputs,
        structurally_zero_gradients=DETR_ZERO_GRADIENTS,
        constant_outputs=(r"decoder_hidden_states\.0",),  # the all-zero initial targets, as the original's
    ),
    ModelTestSpec(
        "xcv_deformable_detr",
        "deformable-detr-test-tiny",
        detr_dummy_inputs,
        structurally_zero_gradients=DEFORMABLE_ZERO_GRADIENTS,
    ),
]
