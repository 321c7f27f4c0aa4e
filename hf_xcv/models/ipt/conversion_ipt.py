"""Official IPT checkpoints converted strictly: the pure mapping of :mod:`hf_xcv.conversion.ipt`, checked against
the model its config describes (built on the meta device): every key renamed or explicitly dropped, none missing
(every task's head and tail included), every shape the model's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ...checkpoint_conversion import check_converted
from ...conversion.ipt import DEFAULT_NUM_HEADS, TARGET_MODEL_TYPE, convert_config, convert_state_dict


def convert_official(
    state_dict: dict[str, torch.Tensor],
    source: str = "the checkpoint",
    tasks: Sequence[str] | None = None,
    *,
    num_attention_heads: int = DEFAULT_NUM_HEADS,
    rgb_range: float | None = None,
    file_name: str | None = None,
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """An official state dict -> (hf_xcv config dict, state dict, dropped keys); ``tasks``, ``num_attention_heads``,
    ``rgb_range`` and ``file_name`` as :func:`hf_xcv.conversion.ipt.convert_config`. ValueError naming any key that is
    missing or left over, CheckpointMismatchError naming any of another shape."""
    config = convert_config(
        state_dict, tasks, num_attention_heads=num_attention_heads, rgb_range=rgb_range, file_name=file_name
    )
    converted, dropped = convert_state_dict(state_dict, config)
    check_converted(config, converted, TARGET_MODEL_TYPE, source, exactly_as=f"an IPT for {config['tasks']}")
    return config, converted, dropped
