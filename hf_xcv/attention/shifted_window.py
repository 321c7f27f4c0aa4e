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

from ..utils.checks import check_bool, check_int
from ._masks import bias_at, dense_attention, masked_softmax
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
    regions = partition(regions[None], window)[0]  # (windows, N)
    different = regions[:, :, None] != regions[:, None, :]  # (windows, N, N)
    return different.to(torch.float32) * REGION_BIAS


def partition(x: torch.Tensor, window: int) -> torch.Tensor:
    """(B, Hp, Wp, ...) -> (B, windows, window^2, ...): windows in row-major order, tokens row-major inside."""
    batch, height, width, *rest = x.shape
    x = x.reshape(batch, height // window, window, width // window, window, *rest)
    x = x.transpose(2, 3)  # (B, nh, nw, W, W, ...)
    return x.reshape(batch, (height // window) * (width // window), window * window, *rest)


def unpartition(x: torch.Tensor, window: int, grid: tuple[int, int]) -> torch.Tensor:
    """The inverse of :func:`partition`: (B, windows, window^2, ...) -> (B, Hp, Wp, ...)."""
    batch, _, _, *rest = x.shape
    x = x.reshape(batch, grid[0] // window, grid[1] // window, window, window, *rest)
    return x.transpose(2, 3).reshape(batch, *grid, *rest)


class _Windows:
    """Where the tokens of a grid land in (shifted) windows, and the gathers that move them there and back.

    ``index`` (windows, N) holds the token index (prefix tokens first) of every window slot after padding to whole
    windows and rolling by (-shift, -shift); padding slots hold ``length``, a zero row appended to the tokens.
    :meth:`split` moves q, k or v into windows, (B * windows, H, N, D), as transformers' Swin lays them out, and
    :meth:`merge` moves the attended values back; the index places masks, biases and maps.
    """

    def __init__(self, grid: tuple[int, int], window: int, shift: int, prefix: int, device):
        self.grid, self.window, self.shift, self.prefix = grid, window, shift, prefix
        self.padded = padded_grid(grid, window)
        self.length = prefix + grid[0] * grid[1]
        self.has_padding = self.padded != tuple(grid)
        # One window holding the whole grid, in token order: q, k, v and biases need no moving at all.
        self.identity = prefix == 0 and shift == 0 and tuple(grid) == (window, window)
        tokens = torch.arange(prefix, self.length, device=device).view(1, *grid)
        pad_h, pad_w = self.padded[0] - grid[0], self.padded[1] - grid[1]
        tokens = F.pad(tokens, (0, pad_w, 0, pad_h), value=self.length)
        if shift:
            tokens = torch.roll(tokens, (-shift, -shift), dims=(1, 2))
        self.index = partition(tokens, window)[0]  # (windows, N)
        self.count = self.index.shape[0]
        self.regions = region_bias(self.padded, window, shift, device)  # (windows, N, N) or None
        # (windows, N + prefix): the token index of every key a window scores (its slots, then the prefix)
        prefix_keys = torch.arange(prefix, device=device).expand(self.count, prefix)
        self.keys = torch.cat([self.index, prefix_keys], dim=1)
        # The slot of every grid token: sorting the slots by the token they hold puts the grid tokens first, in
        # token order (each holds one slot; padding slots hold ``length``, the largest). A sort, not a nonzero():
        # the number of real slots stays a static size when the layout is traced (torch.export, ONNX).
        order = torch.argsort(self.index.flatten(), stable=True)
        self.slot_of_token = order[: grid[0] * grid[1]]

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, prefix + h * w, D) -> the grid tokens in windows (B * windows, H, N, D), padding slots zero. One
        ``index_select`` over the tokens (pad, roll and cut at once; its backward is an ``index_add``)."""
        if self.identity:
            return x
        tokens = x.transpose(1, 2)  # (B, L, H, D): contiguous when x is a layer's heads view
        if self.has_padding:
            tokens = F.pad(tokens, (0, 0, 0, 0, 0, 1))  # the zero row that padding slots read
        slots = tokens.index_select(1, self.index.flatten())  # (B, windows * N, H, D)
        batch, _, heads, dim = slots.shape
        return slots.view(batch * self.count, self.window**2, heads, dim).transpose(1, 2)

    def merge(self, windows: torch.Tensor, batch: int) -> torch.Tensor:
        """(B * windows, H, N, D) -> the grid tokens (B, h * w, H, D) in token order."""
        tokens = windows.transpose(1, 2)  # (B * windows, N, H, D): contiguous as the flash kernel lays it out
        if torch.compiler.is_compiling():  # an exported graph may run a kernel that lays it out otherwise
            tokens = tokens.clone(memory_format=torch.contiguous_format)
        if self.identity:
            return tokens
        heads, dim = windows.shape[1], windows.shape[3]
        slots = tokens.reshape(batch, self.count * self.window**2, heads, dim)
        return slots.index_select(1, self.slot_of_token)

    def per_window(self, x: torch.Tensor | None, batch: int) -> torch.Tensor | None:
        """(B or 1, windows or 1, H or 1, N, K) -> a 4-D tensor that broadcasts to (B * windows, H, N, K)."""
        if x is None or (x.shape[0] == 1 and x.shape[1] == 1):
            return None if x is None else x[0]
        return x.expand(batch, self.count, *x.shape[2:]).reshape(batch * self.count, *x.shape[2:])


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
        self.window_size = check_int("window_size", window_size, 1, owner=self.owner)
        self.shift_size = check_int("shift_size", shift_size, 0, owner=self.owner)
        if self.shift_size >= self.window_size:
            raise ValueError(
                f"attention_type={self.name!r}: shift_size must be smaller than window_size ({window_size}), got "
                f"{shift_size}"
            )
        self.shrink_to_grid = check_bool("shrink_to_grid", shrink_to_grid, owner=self.owner)
        # Window layouts and table indices by grid (small integer tensors; rebuilt while tracing, never cached there).
        self._layouts: dict[tuple, Any] = {}
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

    def _cached(self, key: tuple, build: Any) -> Any:
        """``build()``, kept per ``key`` in eager calls (a traced graph builds its own constants)."""
        if torch.compiler.is_compiling():
            return build()
        if key not in self._layouts:
            self._layouts[key] = build()
        return self._layouts[key]

    def windows(self, grid: tuple[int, int], prefix: int, device: torch.device) -> _Windows:
        """Where the tokens of ``grid`` go in this core's windows."""
        window, shift = self.window_and_shift(grid)
        return self._cached(("windows", grid, prefix, device), lambda: _Windows(grid, window, shift, prefix, device))

    def region_bias(self, grid: tuple[int, int], window: int, shift: int, device: torch.device) -> torch.Tensor | None:
        """:func:`region_bias`, kept per grid like the layouts (for a model that windows its grid itself)."""
        return self._cached(("regions", grid, window, shift, device), lambda: region_bias(grid, window, shift, device))

    def window_bias(self, window: int) -> torch.Tensor:
        """(heads, N, N) relative position bias of a ``window`` x ``window`` window."""
        table = self.relative_position_bias_table
        index = self._cached(
            ("index", window, table.device), lambda: relative_position_index(window, self.window_size, table.device)
        )
        return table[index].permute(2, 0, 1).contiguous()  # (H, N, N); contiguous, so sums with it are too

    def _bias_and_keep(
        self, windows: _Windows, call: AttentionCall, batch: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The additive bias and the boolean keep (or None when every key is kept) of every window's scores, each
        broadcastable to (B * windows, H, N, N + prefix)."""
        keys = windows.keys  # (windows, N + P)
        bias = self.window_bias(windows.window).to(dtype)[None, None]  # (1, 1, H, N, N)
        regions = windows.regions
        if regions is not None:
            bias = bias + regions.to(dtype)[None, :, None]  # (1, windows, H, N, N)
        if windows.prefix:
            bias = F.pad(bias, (0, windows.prefix))  # no relative bias towards prefix keys
        if call.bias is not None and windows.identity:  # (B', H', N, N), already in window order
            bias = bias + call.bias.to(dtype)[:, None]
        elif call.bias is not None:  # (B', H', windows, N, N + P) -> (B', windows, H', N, N + P)
            bias = bias + bias_at(call.bias, windows.index[:, :, None], keys[:, None, :]).to(dtype).transpose(1, 2)
        keep = None
        if call.key_keep is not None:
            padded_keep = F.pad(call.key_keep, (0, 1), value=False)  # the padding slots read index L: False
            keep = padded_keep[:, keys][:, :, None, None, :]  # (B, windows, 1, 1, N + P)
        elif windows.has_padding:
            keep = (keys < windows.length)[None, :, None, None, :]  # (1, windows, 1, 1, N + P)
        return windows.per_window(bias, batch), windows.per_window(keep, batch)

    def _use_sdpa(self, call: AttentionCall) -> bool:
        config = getattr(call.module, "config", None)
        return not call.output_weights and getattr(config, "_attn_implementation", None) != "eager"

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        windows = self.windows(call.grid, call.prefix_tokens, q.device)
        batch, prefix = q.shape[0], windows.prefix
        q_win, k_win, v_win = windows.split(q), windows.split(k), windows.split(v)  # (B * nW, H, N, D)
        if prefix:  # every window also sees the prefix keys
            k_win = torch.cat([k_win, _per_window_prefix(k, prefix, windows.count)], dim=2)
            v_win = torch.cat([v_win, _per_window_prefix(v, prefix, windows.count)], dim=2)
        bias, keep = self._bias_and_keep(windows, call, batch, q.dtype)
        probs = None
        if self._use_sdpa(call):
            mask = bias if keep is None else bias.masked_fill(~keep, torch.finfo(q.dtype).min)
            out = F.scaled_dot_product_attention(
                q_win, k_win, v_win, attn_mask=mask, dropout_p=call.dropout, scale=call.scaling
            )  # (B * nW, H, N, D)
            if keep is not None:
                out = out * keep.any(dim=-1, keepdim=True)  # a window with no key to attend gives zeros
        else:
            scores = torch.matmul(q_win, k_win.transpose(-1, -2)) * call.scaling  # (B * nW, H, N, N + P)
            probs = masked_softmax(scores, keep, bias=bias)
            out = torch.matmul(F.dropout(probs, p=call.dropout, training=call.dropout > 0), v_win)
        tokens = windows.merge(out, batch)  # (B, h * w, H, D)
        prefix_probs = None
        if prefix:
            mask = None if call.key_keep is None else call.key_keep[:, None, None, :]
            prefix_bias = None if call.bias is None else call.bias[:, :, :prefix]
            prefix_out, prefix_probs = dense_attention(
                q[:, :, :prefix], k, v, mask, call.scaling, call.dropout, call.dropout > 0, prefix_bias
            )
            tokens = torch.cat([prefix_out.transpose(1, 2), tokens], dim=1)  # (B, L, H, D)
        weights = self._dense_weights(windows, probs, prefix_probs, batch) if call.output_weights else None
        return AttentionOutput(tokens.transpose(1, 2), weights)  # (B, H, L, D), a view of (B, L, H, D)

    @staticmethod
    def _dense_weights(
        windows: _Windows, probs: torch.Tensor, prefix_probs: torch.Tensor | None, batch: int
    ) -> torch.Tensor:
        """The window probabilities (B * nW, H, N, N + P) scattered into (B, H, L, L) in token order."""
        length = windows.length
        probs = probs.view(batch, windows.count, *probs.shape[1:]).transpose(1, 2)  # (B, H, nW, N, N + P)
        dense = probs.new_zeros(batch, probs.shape[1], length + 1, length + 1)  # row / column L: padding slots
        dense[:, :, windows.index[:, :, None], windows.keys[:, None, :]] = probs
        if prefix_probs is not None:
            dense[:, :, : windows.prefix, :length] = prefix_probs
        return dense[:, :, :length, :length]


def window_maps_to_tokens(
    probs: torch.Tensor, grid: tuple[int, int], window: int, shift: int, batch: int
) -> torch.Tensor:
    """Per-window attention maps (B * windows, H, N, N) of a padded, rolled ``grid`` as (B, H, h * w, h * w) in
    token order (the padding tokens' share, where a grid was padded with tokens that take part, is left out)."""
    return ShiftedWindowAttention._dense_weights(_Windows(grid, window, shift, 0, probs.device), probs, None, batch)


def read_back_window_maps(
    maps: torch.Tensor, probs: torch.Tensor, grid: tuple[int, int], window: int, shift: int
) -> torch.Tensor:
    """The per-window maps ``probs`` (B * windows, H, N, N) of a padded, rolled ``grid`` read back from their
    token-order ``maps`` (B, H, h * w, h * w) (:func:`window_maps_to_tokens`) where query and key are grid tokens, and
    taken from ``probs`` where either is a padding token: the same values, computed from ``maps``, so that what is
    computed from them depends on the maps on the autograd graph."""
    layout = _Windows(grid, window, shift, 0, probs.device)
    length = layout.length
    slots = layout.index.clamp(max=length - 1)  # (windows, N): padding slots read any token, then are replaced
    real = layout.index < length
    read = maps[:, :, slots[:, :, None], slots[:, None, :]]  # (B, H, windows, N, N)
    read = read.transpose(1, 2).reshape(probs.shape)  # (B * windows, H, N, N)
    both_real = layout.per_window((real[:, :, None] & real[:, None, :])[None, :, None], maps.shape[0])
    return torch.where(both_real, read, probs)


def _per_window_prefix(x: torch.Tensor, prefix: int, count: int) -> torch.Tensor:
    """The prefix tokens of ``x`` (B, H, L, D) repeated for every window: (B * windows, H, prefix, D)."""
    batch, heads, _, dim = x.shape
    return x[:, None, :, :prefix].expand(batch, count, heads, prefix, dim).reshape(batch * count, heads, prefix, dim)
