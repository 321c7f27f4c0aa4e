"""Image -> sequence of patch embeddings."""

from __future__ import annotations

import torch
from torch import nn


def to_pair(value: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``224`` -> ``(224, 224)``; a pair stays a pair."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"expected an int or a (height, width) pair, got {value!r}")
        return int(value[0]), int(value[1])
    return int(value), int(value)


def check_pixel_tensor(pixel_values: torch.Tensor, num_channels: int) -> None:
    """ValueError naming the problem when ``pixel_values`` is no (batch, num_channels, height, width) tensor."""
    if not isinstance(pixel_values, torch.Tensor):
        raise ValueError(f"pixel_values must be a torch.Tensor, got {type(pixel_values).__name__}")
    if pixel_values.ndim != 4:
        raise ValueError(
            f"pixel_values must have shape (batch, channels, height, width), got {tuple(pixel_values.shape)}"
        )
    if pixel_values.shape[1] != num_channels:
        raise ValueError(
            f"pixel_values have {pixel_values.shape[1]} channels but the model expects num_channels={num_channels}"
        )


class PatchEmbed(nn.Module):
    """Cut an image into non-overlapping patches and project each to ``embed_dim`` (a strided conv).

    Input (B, C, H, W) -> output (B, H/p * W/p, embed_dim), row-major over the patch grid, and
    the grid (H/p, W/p).
    """

    def __init__(self, patch_size: int | tuple[int, int], num_channels: int, embed_dim: int):
        super().__init__()
        self.patch_size = to_pair(patch_size)
        self.num_channels = num_channels
        self.projection = nn.Conv2d(num_channels, embed_dim, kernel_size=self.patch_size, stride=self.patch_size)

    def check_pixels(self, pixel_values: torch.Tensor) -> None:
        """ValueError naming the problem when the pixels cannot be cut into patches."""
        check_pixel_tensor(pixel_values, self.num_channels)
        height, width = pixel_values.shape[-2:]
        ph, pw = self.patch_size
        if height < ph or width < pw or height % ph or width % pw:
            raise ValueError(f"image size {height}x{width} is not a positive multiple of the patch size {ph}x{pw}")

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        self.check_pixels(pixel_values)
        x = self.projection(pixel_values)  # (B, D, H/p, W/p)
        grid = (x.shape[2], x.shape[3])
        return x.flatten(2).transpose(1, 2), grid  # (B, N, D)
