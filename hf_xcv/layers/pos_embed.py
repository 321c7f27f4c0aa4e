"""Positional encodings."""

from __future__ import annotations

import torch
from torch import nn


def resample_patch_pos_embed(
    pos_embed: torch.Tensor,
    old_grid: tuple[int, int],
    new_grid: tuple[int, int],
    num_prefix_tokens: int = 1,
    mode: str = "bicubic",
) -> torch.Tensor:
    """Resize learned 2-D position embeddings to another patch grid.

    ``pos_embed`` is (1, prefix + old_h * old_w, D): the prefix tokens ([CLS], ...) keep their
    embeddings; the patch part is interpolated as a (D, old_h, old_w) image. Returns
    (1, prefix + new_h * new_w, D).
    """
    if tuple(old_grid) == tuple(new_grid):
        return pos_embed
    old_h, old_w = old_grid
    expected = num_prefix_tokens + old_h * old_w
    if pos_embed.shape[1] != expected:
        raise ValueError(
            f"position embeddings have {pos_embed.shape[1]} entries, expected {expected} "
            f"({num_prefix_tokens} prefix + {old_h}x{old_w} grid)"
        )
    prefix, patches = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    dim = patches.shape[-1]
    patches = patches.reshape(1, old_h, old_w, dim).permute(0, 3, 1, 2)  # (1, D, h, w)
    # Interpolate in float32: bicubic is not implemented for half precision on every device.
    patches = nn.functional.interpolate(patches.float(), size=tuple(new_grid), mode=mode, align_corners=False)
    patches = patches.to(pos_embed.dtype).permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], dim)
    return torch.cat([prefix, patches], dim=1)
