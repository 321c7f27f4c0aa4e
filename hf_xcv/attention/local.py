"""``local`` and ``local_2d``: the Image Transformer's blocked local attention (Parmar et al. 2018).

Both split the queries into blocks and let each block attend to a fixed *memory* of nearby keys, so the
cost is O(L * memory) and no (L x L) tensor is built (except the weights, when they are asked for):

* ``local`` (1-D): blocks of ``block_size`` consecutive tokens. Non-causal, a block sees itself and
  ``memory_flange`` tokens on each side (tensor2tensor's ``local_attention_1d``); causal, it sees itself
  (causally) and the ``memory_flange`` tokens before it (``masked_local_attention_1d``: one whole block).
* ``local_2d``: query rectangles of ``query_shape`` on the token grid, with a memory flange of
  ``memory_flange`` rows and columns around them (``local_attention_2d``). Causal, the memory is the flange
  above plus the flange left of the query rows (``masked_local_attention_2d`` and its
  ``make_2d_block_raster_mask``), restricted to keys that precede the query in the token sequence.

Prefix tokens (ViT's [CLS]) stay out of the blocks: every block also sees them, and they attend to every key
(only earlier ones when causal), so a class token can summarise the whole input. An additive attention bias
is added to the logits of the pairs each block scores. The block machinery is in ``_blocks``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..utils.checks import check_int, check_pair
from ._blocks import BlockLayout, LayoutAttention, grid_problems, local_1d_layout, local_2d_layout, prefix_pattern
from .registry import Capabilities, register_attention


@register_attention
class LocalAttention(LayoutAttention):
    """Image Transformer 1-D local attention: blocks of ``block_size`` tokens, each attending to itself and a
    memory flange of ``memory_flange`` tokens on each side (only before it when causal).

    Args:
        block_size: tokens per query block (tensor2tensor's ``block_length``; paper: 256).
        memory_flange: tokens of memory beyond the block. None gives tensor2tensor's Image Transformer
            settings: causal, the whole previous block (``masked_local_attention_1d``, memory = ``block_size``);
            non-causal, ``block_size // 2`` on each side (``local_attention_1d`` with ``block_width`` 128 for
            ``block_length`` 256). ``memory_flange=block_size`` gives one whole neighbouring block per side.

    With block(t) the block of token t and flange f, query i sees key j iff start(block(i)) - f <= j <
    end(block(i)) + f (causal: ... <= j <= i). Prefix tokens are global (see the module docstring). Lengths
    are padded to a block multiple internally; with fewer queries than keys (decoding with a cache) the
    queries are the last tokens.
    """

    name = "local"
    capabilities = Capabilities(
        padding_mask=True,
        causal=True,
        returns_weights=True,
        attention_bias=True,
        length_constraint="any length (padded to a multiple of block_size internally); q_len <= kv_len, "
        "the queries being the last kv tokens",
    )
    small_kwargs = {"block_size": 4, "memory_flange": 2}

    def __init__(self, num_heads: int, head_dim: int, block_size: int = 256, memory_flange: int | None = None):
        super().__init__(num_heads, head_dim)
        self.block_size = check_int("block_size", block_size, 1, owner=self.owner)
        if memory_flange is not None:
            check_int("memory_flange", memory_flange, 0, owner=self.owner)
        self.memory_flange = memory_flange

    def flange(self, causal: bool) -> int:
        """The memory flange in tokens for this mode (see ``memory_flange``)."""
        if self.memory_flange is not None:
            return self.memory_flange
        return self.block_size if causal else self.block_size // 2

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {"block_size": max(1, length)}  # one block holds every token

    def length_problems(self, q_len: int, kv_len: int, grid=None, prefix_tokens: int = 0) -> list[str]:
        if q_len > kv_len:
            return [f"it has more queries ({q_len}) than keys ({kv_len}); queries must be the last kv tokens"]
        return []

    def layout(self, q_len: int, kv_len: int, grid, prefix_tokens: int, causal: bool, device) -> BlockLayout:
        return local_1d_layout(q_len, kv_len, prefix_tokens, self.block_size, self.flange(causal), causal, device)

    def dense_mask(self, q, k, causal=False, grid=None, prefix_tokens=0) -> torch.Tensor:
        q_len, kv_len = q.shape[2], k.shape[2]
        q_pos = torch.arange(q_len, device=q.device)[:, None] + kv_len - q_len - prefix_tokens  # (Lq, 1)
        k_pos = torch.arange(kv_len, device=q.device)[None, :] - prefix_tokens  # (1, Lk)
        start = torch.div(q_pos, self.block_size, rounding_mode="floor") * self.block_size  # query block start
        flange = self.flange(causal)
        near = (k_pos >= start - flange) & (k_pos < start + self.block_size + (0 if causal else flange))
        return prefix_pattern(near, q_len, kv_len, prefix_tokens, causal)[None, None]


@register_attention
class Local2DAttention(LayoutAttention):
    """Image Transformer 2-D local attention on the token grid: query rectangles of ``query_shape`` attend to
    their rectangle extended by ``memory_flange`` (rows, columns) on every side.

    Args:
        query_shape: (rows, columns) of a query block (paper / tensor2tensor: (8, 16)).
        memory_flange: (rows, columns) of memory around it (paper / tensor2tensor: (8, 16)).

    Causal follows tensor2tensor's ``make_2d_block_raster_mask``: the memory is the flange rows above (full
    width), the left flange and the query block itself, never the right flange beside the query rows; it is
    further restricted to keys not after the query in the token sequence (row-major raster order), because
    the models generate tokens in sequence order, where t2t's block-raster order would let a query see the
    left flange on rows below it. Prefix tokens ([CLS]) stay off the grid: they attend to every token and
    every token attends to them. The grid is padded to a multiple of ``query_shape`` internally.
    """

    name = "local_2d"
    capabilities = Capabilities(
        padding_mask=True,
        causal=True,
        returns_weights=True,
        attention_bias=True,
        needs_grid=True,
        length_constraint="prefix_tokens + height * width tokens of any grid (padded to a multiple of query_shape "
        "internally); keys are the query tokens themselves (kv_len == q_len)",
    )
    small_kwargs = {"query_shape": (2, 2), "memory_flange": (1, 1)}

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        query_shape: tuple[int, int] = (8, 16),
        memory_flange: tuple[int, int] = (8, 16),
    ):
        super().__init__(num_heads, head_dim)
        self.query_shape = check_pair("query_shape", query_shape, 1, owner=self.owner)
        self.memory_flange = check_pair("memory_flange", memory_flange, 0, owner=self.owner)

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any] | None:
        if grid is None:
            return None
        return {"query_shape": (max(1, grid[0]), max(1, grid[1])), "memory_flange": (0, 0)}  # one block

    def length_problems(self, q_len: int, kv_len: int, grid=None, prefix_tokens: int = 0) -> list[str]:
        return grid_problems(self.name, q_len, kv_len, grid, prefix_tokens)

    def layout(self, q_len: int, kv_len: int, grid, prefix_tokens: int, causal: bool, device) -> BlockLayout:
        return local_2d_layout(grid, prefix_tokens, self.query_shape, self.memory_flange, causal, device)

    def dense_mask(self, q, k, causal=False, grid=None, prefix_tokens=0) -> torch.Tensor:
        if grid is None:
            raise ValueError(f"attention_type={self.name!r} needs the grid to build its dense mask")
        (qh, qw), (fh, fw) = self.query_shape, self.memory_flange
        cell = (torch.arange(q.shape[2], device=q.device) - prefix_tokens).clamp(min=0)
        row, col = cell // grid[1], cell % grid[1]  # (L,) grid coordinates (prefix tokens: dummy (0, 0))
        top, left = (row // qh * qh)[:, None], (col // qw * qw)[:, None]  # (L, 1) query block corner
        below = top + qh + (0 if causal else fh)  # first memory row past the window
        in_rows = (row[None, :] >= top - fh) & (row[None, :] < below)
        in_cols = (col[None, :] >= left - fw) & (col[None, :] < left + qw + fw)
        near = in_rows & in_cols
        if causal:
            near = near & ((row[None, :] < top) | (col[None, :] < left + qw))  # no right flange beside the block
        return prefix_pattern(near, q.shape[2], k.shape[2], prefix_tokens, causal)[None, None]
