"""``shifted_window``: Swin's window attention with a learned relative position bias (Liu et al. 2021).

The token grid is cut into non-overlapping ``window_size`` x ``window_size`` windows and every token attends
only to the tokens of its window, plus a bias learned per head and per relative offset (dy, dx) inside the
window (``relative_position_bias_table``, (2W - 1)^2 rows, one column per head). With ``shift_size`` s > 0
the grid is first rolled by (-s, -s), so that windows straddle the previous layer's window borders; tokens
that the roll brought together from opposite edges of the image sit in different *regions* (three bands per
axis, nine regions in all: paper Fig. 4) and get -100 added between them, as the original code does, so
that they practically do not attend to each other.

Both biases reach the attention as one additive float bias per window (the seam's ``attention_bias`` inside
the entry), so the windows run on ``torch.nn.functional.scaled_dot_product_attention`` with the bias as its
float mask, or on an eager softmax when the owning model asks for ``attn_implementation="eager"`` or for the
attention maps.

As in the original code, a grid whose shorter side is at most the window is one window (the window shrinks
to that side) and is not shifted (``shrink_to_grid=True``; Swin's detection backbone keeps the window and
the shift at every size, ``shrink_to_grid=False``). A window smaller than ``window_size`` reads the offsets it
has from the same table. A grid that is not a multiple of the window is padded internally with keys that are
masked out (a model that wants the original's padding, zeros that take part, pads before projecting, as
``SwinLayer`` does). Prefix tokens ([CLS]) stay off the grid: every window also sees them (with no relative
bias) and they attend to every token. Attention maps come back as (B, H, L, L) in token order.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init

from ._masks import bias_at, dense_attention, masked_softmax
from ._settings import check_bool, check_int
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention

REGION_BIAS = -100.0  # between tokens of different regions of a shifted window (the original code's value)


def window_and_shift(grid: tuple[int, int], window_size: int, shift_size: int, shrink: bool = True) -> tuple[int, int]:
    """The window and shift used on a ``grid``: a grid whose shorter side is at most the window is one window of
    that side, unshifted (when ``shrink``)."""
    if shrink and min(grid) <= window_size:
        return min(grid), 0
    return window_size, shift_size


def padded_grid(grid: tuple[int, int], window: int) -> tuple[int, int]:
    """``grid`` rounded up to a multiple of ``window`` on both sides."""
    return -(-grid[0] // window) * window, -(-grid[1] // window) * window


def relative_position_index(window: int, table_window: int, device=None) -> torch.Tensor:
    """(window^2, window^2) rows of a (2 * table_window - 1)^2-row table: the offset (dy, dx) of key from query
    inside a ``window`` x ``window`` window, as ``(dy + T - 1) * (2T - 1) + (dx + T - 1)`` (the original's
    ``relative_position_index`` when ``window == table_window``)."""
    rows, cols = torch.meshgrid(torch.arange(window, device=device), torch.arange(window, device=device), indexing="ij")
    coords = torch.stack([rows.flatten(), cols.flatten()])  # (2, N)
    offsets = coords[:, :, None] - coords[:, None, :] + (table_window - 1)  # (2, N, N), each in [0, 2T - 2]
    return offsets[0] * (2 * table_window - 1) + offsets[1]


def region_bias(grid: tuple[int, int], window: int, shift: int, device=None) -> torch.Tensor | None:
    """(windows, N, N) bias of a rolled ``grid`` (already a multiple of ``window``): 0 within a region, -100
    between regions (the nine regions of the paper's Fig. 4: bands [0, -W), [-W, -s), [-s, end) per axis);
    None without a shift."""
    if shift == 0:
        return None
    bands = []
    for size in grid:
        index = torch.arange(size, device=device)
        bands.append((index >= size - window).long() + (index >= size - shift).long())  # 0, 1 or 2
    regions = bands[0][:, None] * 3 + bands[1][None, :]  # (Hp, Wp)
    regions = partition(regions[None, None, :, :, None], window)[0, 0, :, :, 0]  # (windows, N)
    different = regions[:, :, None] != regions[:, None, :]  # (windows, N, N)
    return different.to(torch.float32) * REGION_BIAS


def partition(x: torch.Tensor, window: int) -> torch.Tensor:
    """(B, H, Hp, Wp, D) -> (B, H, windows, window^2, D), windows in row-major order, tokens row-major inside."""
    batch, heads, height, width, dim = x.shape
    x = x.view(batch, heads, height // window, window, width // window, window, dim)
    return x.permute(0, 1, 2, 4, 3, 5, 6).reshape(batch, heads, -1, window * window, dim)


def unpartition(x: torch.Tensor, window: int, grid: tuple[int, int]) -> torch.Tensor:
    """The inverse of :func:`partition`: (B, H, windows, window^2, D) -> (B, H, Hp, Wp, D)."""
    batch, heads, _, _, dim = x.shape
    x = x.view(batch, heads, grid[0] // window, grid[1] // window, window, window, dim)
    return x.permute(0, 1, 2, 4, 3, 5, 6).reshape(batch, heads, grid[0], grid[1], dim)


class _Windows:
    """Where the tokens of a grid land in shifted windows: ``index`` (windows, N) holds the token index (after
    the prefix tokens) of each window slot, ``length`` (the token count) for padding slots."""

    def __init__(self, grid: tuple[int, int], window: int, shift: int, prefix: int, device):
        self.grid, self.window, self.shift, self.prefix = grid, window, shift, prefix
        self.padded = padded_grid(grid, window)
        self.length = prefix + grid[0] * grid[1]
        tokens = torch.arange(prefix, self.length, device=device).view(1, 1, *grid, 1)
        self.index = partition(self.to_padded(tokens, self.length), window)[0, 0, :, :, 0]  # (windows, N)
        self.has_padding = self.padded != tuple(grid)

    def to_padded(self, x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """(B, H, h, w, D) -> the padded, rolled grid (B, H, Hp, Wp, D)."""
        pad_h, pad_w = self.padded[0] - self.grid[0], self.padded[1] - self.grid[1]
        if pad_h or pad_w:
            x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h), value=fill)
        return torch.roll(x, (-self.shift, -self.shift), dims=(2, 3)) if self.shift else x

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, prefix + h * w, D) -> the grid tokens in windows (B, H, windows, N, D)."""
        batch, heads, _, dim = x.shape
        return partition(self.to_padded(x[:, :, self.prefix :].reshape(batch, heads, *self.grid, dim)), self.window)

    def merge(self, windows: torch.Tensor) -> torch.Tensor:
        """(B, H, windows, N, D) -> the grid tokens (B, H, h * w, D) in token order."""
        x = unpartition(windows, self.window, self.padded)
        if self.shift:
            x = torch.roll(x, (self.shift, self.shift), dims=(2, 3))
        x = x[:, :, : self.grid[0], : self.grid[1]]
        return x.reshape(x.shape[0], x.shape[1], self.grid[0] * self.grid[1], x.shape[-1])

    def key_index(self) -> torch.Tensor:
        """(windows, N + prefix): the token index of every key a window scores (its slots, then the prefix)."""
        prefix = torch.arange(self.prefix, device=self.index.device).expand(self.index.shape[0], self.prefix)
        return torch.cat([self.index, prefix], dim=1)


@register_attention
class ShiftedWindowAttention(AttentionCore):
    """Swin's (shifted) window multi-head self-attention with a learned relative position bias.

    Args:
        window_size: side W of the square windows, in tokens (Swin: 7; 12 at 384x384).
        shift_size: roll of the grid before windowing, 0 <= s < W (Swin: 0 in even blocks, W // 2 in odd ones).
        shrink_to_grid: a grid whose shorter side is at most W is one unshifted window of that side (the
            original classification code); False keeps window and shift at every size (its detection backbone).

    The learned ``relative_position_bias_table`` ((2W - 1)^2, heads) starts from a truncated normal of std 0.02,
    as in the original code. See the module docstring for padding, prefix tokens and the backends.
    """

    name = "shifted_window"
    capabilities = Capabilities(
        padding_mask=True,
        returns_weights=True,
        attention_bias=True,
        needs_grid=True,
        relative_positions=False,  # Swin adds no absolute positions by default, but a ViT keeps its own
        length_constraint="prefix_tokens + height * width tokens of any grid (padded to a multiple of the window "
        "internally); keys are the query tokens themselves (kv_len == q_len)",
    )
    small_kwargs = {"window_size": 2, "shift_size": 1}
    weights_are_copies = True  # the maps are scattered from the windows

    def __init__(
        self, num_heads: int, head_dim: int, window_size: int = 7, shift_size: int = 0, shrink_to_grid: bool = True
    ):
        super().__init__(num_heads, head_dim)
        self.window_size = check_int(self.name, "window_size", window_size, 1)
        self.shift_size = check_int(self.name, "shift_size", shift_size, 0)
        if self.shift_size >= self.window_size:
            raise ValueError(
                f"attention_type={self.name!r}: shift_size must be smaller than window_size ({window_size}), got "
                f"{shift_size}"
            )
        self.shrink_to_grid = check_bool(self.name, "shrink_to_grid", shrink_to_grid)
        self.relative_position_bias_table = nn.Parameter(torch.empty((2 * window_size - 1) ** 2, num_heads))
        init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def window_and_shift(self, grid: tuple[int, int]) -> tuple[int, int]:
        """The window and shift this core uses on ``grid``."""
        return window_and_shift(grid, self.window_size, self.shift_size, self.shrink_to_grid)

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any] | None:
        if grid is None:
            return None
        return {"window_size": max(grid), "shift_size": 0}  # one window holds the grid; the bias is zeroed

    def make_exact_(self) -> None:
        with torch.no_grad():
            self.relative_position_bias_table.zero_()

    def length_problems(self, q_len: int, kv_len: int, grid=None, prefix_tokens: int = 0) -> list[str]:
        problems = super().length_problems(q_len, kv_len, grid, prefix_tokens)
        if kv_len != q_len:
            problems.append(f"its keys must be the query tokens themselves, got {q_len} queries and {kv_len} keys")
        return problems

    def window_bias(self, window: int) -> torch.Tensor:
        """(heads, N, N) relative position bias of a ``window`` x ``window`` window."""
        index = relative_position_index(window, self.window_size, self.relative_position_bias_table.device)
        return self.relative_position_bias_table[index].permute(2, 0, 1)  # (H, N, N)

    def _bias_and_keep(
        self, windows: _Windows, call: AttentionCall, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The additive bias (B or 1, H, windows, N, N + prefix) and the boolean keep (B or 1, 1, windows, 1,
        N + prefix) of every window's scores, or None when every key is kept."""
        keys = windows.key_index()  # (windows, N + P)
        bias = self.window_bias(windows.window).to(dtype)[:, None]  # (H, 1, N, N)
        regions = region_bias(windows.padded, windows.window, windows.shift, bias.device)
        if regions is not None:
            bias = bias + regions.to(dtype)  # (H, windows, N, N)
        if windows.prefix:
            bias = F.pad(bias, (0, windows.prefix))  # no relative bias towards prefix keys
        bias = bias[None]  # (1, H, windows or 1, N, N + P)
        if call.bias is not None:
            bias = bias + bias_at(call.bias, windows.index[:, :, None], keys[:, None, :]).to(dtype)
        keep = None
        if call.key_keep is not None:
            padded_keep = F.pad(call.key_keep, (0, 1), value=False)  # the padding slots read index L: False
            keep = padded_keep[:, keys][:, None, :, None, :]  # (B, 1, windows, 1, N + P)
        elif windows.has_padding:
            keep = (keys < windows.length)[None, None, :, None, :]  # (1, 1, windows, 1, N + P)
        return bias, keep

    def _use_sdpa(self, call: AttentionCall) -> bool:
        config = getattr(call.module, "config", None)
        return not call.output_weights and getattr(config, "_attn_implementation", None) != "eager"

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        window, shift = self.window_and_shift(call.grid)
        windows = _Windows(call.grid, window, shift, call.prefix_tokens, q.device)
        prefix = windows.prefix
        q_win, k_win, v_win = windows.split(q), windows.split(k), windows.split(v)  # (B, H, nW, N, D)
        if prefix:  # every window also sees the prefix keys
            batch, heads, count, _, dim = k_win.shape
            k_win = torch.cat([k_win, k[:, :, None, :prefix].expand(batch, heads, count, prefix, dim)], dim=3)
            v_win = torch.cat([v_win, v[:, :, None, :prefix].expand(batch, heads, count, prefix, dim)], dim=3)
        bias, keep = self._bias_and_keep(windows, call, q.dtype)
        probs = None
        if self._use_sdpa(call):
            mask = bias if keep is None else bias.masked_fill(~keep, torch.finfo(q.dtype).min)
            out = F.scaled_dot_product_attention(
                q_win, k_win, v_win, attn_mask=mask, dropout_p=call.dropout, scale=call.scaling
            )  # (B, H, nW, N, D)
            if keep is not None:
                out = out * keep.any(dim=-1, keepdim=True)  # a window with no key to attend gives zeros
        else:
            scores = torch.matmul(q_win, k_win.transpose(-1, -2)) * call.scaling  # (B, H, nW, N, N + P)
            probs = masked_softmax(scores, keep, bias=bias)
            dropped = F.dropout(probs, p=call.dropout, training=call.dropout > 0)
            out = torch.matmul(dropped, v_win)
        values = windows.merge(out)  # (B, H, h * w, D)
        prefix_probs = None
        if prefix:
            mask = None if call.key_keep is None else call.key_keep[:, None, None, :]
            prefix_bias = None if call.bias is None else call.bias[:, :, :prefix]
            prefix_out, prefix_probs = dense_attention(
                q[:, :, :prefix], k, v, mask, call.scaling, call.dropout, call.dropout > 0, prefix_bias
            )
            values = torch.cat([prefix_out, values], dim=2)
        weights = self._dense_weights(windows, probs, prefix_probs) if call.output_weights else None
        return AttentionOutput(values, weights)

    @staticmethod
    def _dense_weights(windows: _Windows, probs: torch.Tensor, prefix_probs: torch.Tensor | None) -> torch.Tensor:
        """The window probabilities (B, H, nW, N, N + P) scattered into (B, H, L, L) in token order."""
        length = windows.length
        batch, heads = probs.shape[:2]
        dense = probs.new_zeros(batch, heads, length + 1, length + 1)  # row / column L collects padding slots
        dense[:, :, windows.index[:, :, None], windows.key_index()[:, None, :]] = probs
        if prefix_probs is not None:
            dense[:, :, : windows.prefix, :length] = prefix_probs
        return dense[:, :, :length, :length]
