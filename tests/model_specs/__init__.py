"""What the registry-driven tests need of each model type, one module per family: its tiny preset, the inputs of
its models (with labels for its task), config overrides under which every parameter gets a gradient with any
attention entry, and parameters whose gradient is zero by design. A new family adds a module here, with a ``SPECS``
list; ``model_testing`` finds it, and a test fails for any registered type without one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class ModelTestSpec:
    """Attributes:
    model_type: the registered type.
    test_preset: the tiny preset the shared tests build.
    dummy_inputs: ``dummy_inputs(model, *, batch=2, labels=True, padded=True) -> dict`` of forward keyword
        arguments for any model of the type (labels for its task when ``labels``; padding where the inputs have any
        when ``padded``). Any kind of input goes: pixels, token ids, masks, lists of box dictionaries, a task name.
    attention_test_overrides: config overrides under which every parameter of a task model gets a gradient with
        any attention entry (e.g. ViT pools by mean: with [CLS] pooling, the last layer's patch tokens rightly feed
        nothing, and a core's part that only they reach gets no gradient).
    structurally_zero_gradients: parameters (regexes over their names) whose gradient is exactly zero by the
        architecture on a freshly initialised model; the tests check that it is zero and that no other is.
    constant_outputs: hidden states and attention maps (regexes over ``field.index``, e.g. ``attentions\\.\\d+``)
        that are constants by design (an all-zero start, a one-hot selection), off the autograd graph; every other
        one must be on it.
    """

    model_type: str
    test_preset: str
    dummy_inputs: Callable[..., dict[str, Any]]
    attention_test_overrides: dict[str, Any] = field(default_factory=dict)
    structurally_zero_gradients: tuple[str, ...] = ()
    constant_outputs: tuple[str, ...] = ()


def image_dummy_inputs(config: Any, *, batch: int = 2, labels: bool = False) -> dict[str, torch.Tensor]:
    """Random images of ``config.image_size`` with ``config.num_channels`` (and class labels of
    ``config.num_labels`` when ``labels``), from a fixed generator: the inputs of the image classifiers."""
    from hf_xcv.layers import to_pair

    generator = torch.Generator().manual_seed(0)
    size = to_pair(config.image_size)
    inputs = {"pixel_values": torch.randn(batch, config.num_channels, *size, generator=generator)}
    if labels:
        inputs["labels"] = torch.randint(0, config.num_labels, (batch,), generator=generator)
    return inputs
