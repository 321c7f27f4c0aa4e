"""Small pieces the efficient attention cores share: key-padding masks, padding to a block multiple,
masked softmax that gives zeros for rows with nothing to attend, seeded generators."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .full import check_keep_mask, masked_softmax  # noqa: F401  (masked_softmax: shared with the cores)


def key_padding_mask(attention_mask: torch.Tensor | None, batch: int, kv_len: int, entry: str) -> torch.Tensor | None:
    """The (B, Lk) boolean keep mask over keys carried by ``attention_mask``, or None.

    Efficient cores accept padding masks only: a mask broadcastable to (B, 1, 1, Lk). A mask that varies
    over heads or queries is an arbitrary pattern they cannot honour, so it is refused by name.
    """
    if attention_mask is None:
        return None
    check_keep_mask(attention_mask)
    if attention_mask.dim() != 4 or attention_mask.shape[1] != 1 or attention_mask.shape[2] != 1:
        raise ValueError(
            f"attention_type={entry!r} takes only a key padding mask shaped (batch, 1, 1, kv_len); "
            f"got a mask of shape {tuple(attention_mask.shape)}"
        )
    if attention_mask.shape[-1] != kv_len or attention_mask.shape[0] not in (1, batch):
        raise ValueError(
            f"padding mask of shape {tuple(attention_mask.shape)} does not fit batch {batch} and {kv_len} keys"
        )
    return attention_mask[:, 0, 0, :].expand(batch, kv_len)


def pad_to_multiple(x: torch.Tensor, multiple: int, dim: int = 2, value: float = 0.0) -> tuple[torch.Tensor, int]:
    """Pad ``x`` at the end of ``dim`` so its size is a multiple of ``multiple``; returns (x, amount added)."""
    extra = -x.shape[dim] % multiple
    if extra == 0:
        return x, 0
    pad = [0, 0] * (x.dim() - 1 - dim % x.dim()) + [0, extra]
    return F.pad(x, pad, value=value), extra


def seeded_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator | None:
    """A generator seeded with ``seed`` on ``device``; None (torch's global generator) when seed is None."""
    if seed is None:
        return None
    return torch.Generator(device=device).manual_seed(int(seed))


def check_int(entry: str, name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= ``minimum``; a ValueError naming the entry and the setting otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"attention_type={entry!r}: {name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_bool(entry: str, name: str, value: Any) -> bool:
    """``value`` if it is True or False; a ValueError naming the entry and the setting otherwise."""
    if not isinstance(value, bool):
        raise ValueError(f"attention_type={entry!r}: {name} must be True or False, got {value!r}")
    return value


def check_float(entry: str, name: str, value: Any, low: float, high: float | None = None) -> float:
    """``value`` as a real number in [low, high) (or >= low); a ValueError naming the setting otherwise."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value < low
        or (high is not None and value >= high)
    ):
        span = f"in [{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"attention_type={entry!r}: {name} must be a number {span}, got {value!r}")
    return float(value)
