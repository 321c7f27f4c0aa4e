"""Positional encodings."""

from __future__ import annotations

import math

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


SINUSOIDAL_LAYOUTS = ("interleaved", "half")


def sinusoidal_table(num_positions: int, dim: int, layout: str = "interleaved") -> torch.Tensor:
    """Fixed sinusoidal position encodings of Vaswani et al. (2017), (num_positions, dim), float32.

    Frequency i (0 <= i < ceil(dim / 2)) is ``10000 ** (-2i / dim)``. ``"interleaved"`` puts sin(pos * f_i)
    at feature 2i and cos at 2i + 1, as in the paper; ``"half"`` puts every sine first and every cosine
    after (the layout of Marian, fairseq and tensor2tensor). Computed in float64, then rounded once.
    """
    if layout not in SINUSOIDAL_LAYOUTS:
        raise ValueError(f"layout={layout!r} is not allowed; allowed values: {list(SINUSOIDAL_LAYOUTS)}")
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (P, 1)
    sin_freqs = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (ceil(dim/2),)
    cos_freqs = sin_freqs[: dim // 2]  # an odd dim has one cosine fewer
    sin, cos = torch.sin(positions * sin_freqs), torch.cos(positions * cos_freqs)  # (P, ceil(dim/2)), (P, dim//2)
    table = torch.empty(num_positions, dim, dtype=torch.float64)
    if layout == "interleaved":
        table[:, 0::2], table[:, 1::2] = sin, cos
    else:
        table[:, : sin.shape[1]], table[:, sin.shape[1] :] = sin, cos
    return table.float()


class SinusoidalPositionEmbedding(nn.Module):
    """Looks positions up in a fixed :func:`sinusoidal_table`, kept as a non-persistent buffer (never saved)."""

    def __init__(self, num_positions: int, dim: int, layout: str = "interleaved"):
        super().__init__()
        self.num_positions, self.dim, self.layout = num_positions, dim, layout
        self.register_buffer("table", sinusoidal_table(num_positions, dim, layout), persistent=False)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(position_ids, self.table)


def sine_position_embedding_2d(
    valid: torch.Tensor,
    num_pos_feats: int = 128,
    temperature: float = 10000.0,
    normalize: bool = True,
    scale: float = 2 * math.pi,
    offset: float = 0.0,
    eps: float = 1e-6,
) -> torch.Tensor:
    """The 2-D sine positions of DETR from a (B, H, W) boolean mask of valid (unpadded) pixels: (B, 2F, H, W).

    Row and column indices are the running counts of valid pixels (``cumsum``), so padding never shifts them;
    with ``normalize`` they are divided by the valid extent of their row/column and multiplied by ``scale``,
    so every image spans [0, scale] over its own valid region whatever the batch's padding. ``offset`` is
    subtracted before the division (Deformable DETR uses -0.5: cell centres). Frequency of feature i:
    ``temperature ** (2 * (i // 2) / F)``; even features take the sine, odd the cosine (interleaved); the y
    features come first, then x. Always computed in float32 (the caller casts), as the original: cumulative
    sums in half precision lose whole pixels on large images.
    """
    if valid.dim() != 3:
        raise ValueError(f"the mask must be (batch, height, width), got {tuple(valid.shape)}")
    mask = valid.to(torch.float32)
    y_embed = mask.cumsum(1) + offset  # (B, H, W)
    x_embed = mask.cumsum(2) + offset
    if normalize:
        y_embed = y_embed / (y_embed[:, -1:, :] - offset + eps) * scale
        x_embed = x_embed / (x_embed[:, :, -1:] - offset + eps) * scale
    index = torch.arange(num_pos_feats, dtype=torch.float32, device=valid.device)
    dim_t = temperature ** (2 * torch.div(index, 2, rounding_mode="floor") / num_pos_feats)  # (F,)
    pos_x = x_embed[..., None] / dim_t  # (B, H, W, F)
    pos_y = y_embed[..., None] / dim_t
    pos_x = torch.stack((pos_x[..., 0::2].sin(), pos_x[..., 1::2].cos()), dim=4).flatten(3)  # (B, H, W, F)
    pos_y = torch.stack((pos_y[..., 0::2].sin(), pos_y[..., 1::2].cos()), dim=4).flatten(3)
    return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)  # (B, 2F, H, W)
