"""Official TTSR checkpoints converted strictly: the pure mapping of :mod:`hf_xcv.conversion.ttsr`, checked
against the model its config describes (built on the meta device): every key renamed or explicitly dropped, none
missing (the task head included), every shape the model's."""

from __future__ import annotations

from typing import Any

import torch

from ...checkpoint_conversion import check_converted
from ...conversion.ttsr import TARGET_MODEL_TYPE, convert_config, convert_state_dict


def convert_official(
    state_dict: dict[str, torch.Tensor], source: str = "the checkpoint"
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """An official state dict -> (hf_xcv config dict, state dict, dropped keys): ValueError naming any key that is
    missing or left over, CheckpointMismatchError naming any of another shape."""
    config = convert_config(state_dict)
    converted, dropped = convert_state_dict(state_dict)
    check_converted(config, converted, TARGET_MODEL_TYPE, source, exactly_as=f"a {config['num_res_blocks']} TTSR")
    return config, converted, dropped
