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

This module also holds the block machinery the other blocked entries (``axial``, ``memory_compressed``)
reuse: a :class:`BlockLayout` names, per block, which queries it holds and which keys it may see, and
:func:`attend_layout` runs softmax attention block by block, with optional keys shared by every block.

Prefix tokens (ViT's [CLS]) stay out of the blocks in all these entries: every block also sees them, and
they attend to every key (only earlier ones when causal), so a class token can summarise the whole input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .registry import AttentionCore, AttentionOutput, Capabilities, register_attention
from .utils import check_int, key_padding_mask, masked_softmax

# ----------------------------------------------------------------------------------------------------------
# kwarg validation shared by the blocked entries
# ----------------------------------------------------------------------------------------------------------


def check_pair(entry: str, name: str, value: Any, minimum: int) -> tuple[int, int]:
    """``value`` as a (rows, columns) pair of ints >= ``minimum`` (lists come back from JSON configs)."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"attention_type={entry!r}: {name} must be a (rows, columns) pair, got {value!r}")
    return check_int(entry, f"{name}[0]", value[0], minimum), check_int(entry, f"{name}[1]", value[1], minimum)


def grid_problems(entry: str, q_len: int, kv_len: int, grid, prefix_tokens: int) -> list[str]:
    """Length problems of a grid entry: keys and queries are the same prefix + h*w tokens."""
    problems = []
    if grid is not None and q_len != prefix_tokens + grid[0] * grid[1]:
        problems.append(f"its {q_len} tokens are not {prefix_tokens} prefix token(s) plus a {grid[0]}x{grid[1]} grid")
    if kv_len != q_len:
        problems.append(f"it attends within one token grid, so kv_len ({kv_len}) must equal q_len ({q_len})")
    return problems


def check_call(entry: str, core: AttentionCore, q: torch.Tensor, k: torch.Tensor, grid, prefix_tokens: int) -> None:
    """Refuse a direct call the core declared unsupported (the owning layer checks the same beforehand)."""
    problems = core.length_problems(q.shape[2], k.shape[2], grid, prefix_tokens)
    if core.capabilities.needs_grid and grid is None:
        problems.insert(0, "it needs the (height, width) grid of the tokens (grid=None was passed)")
    if prefix_tokens < 0:
        problems.append(f"prefix_tokens must be >= 0, got {prefix_tokens}")
    if problems:
        raise ValueError(f"attention_type={entry!r} cannot be used here: " + "; ".join(problems))


# ----------------------------------------------------------------------------------------------------------
# block machinery
# ----------------------------------------------------------------------------------------------------------


@dataclass
class BlockLayout:
    """Which queries each block holds and which keys it may see.

    Indices point into the full query / key sequences (prefix tokens included). The index ``q_len`` (for
    queries) or ``kv_len`` (for keys) marks an empty slot: padding of the last block or a memory position
    outside the sequence. Every real non-prefix query appears in exactly one block.

    Attributes:
        queries: (N, Q) long, the queries of each of the N blocks.
        keys: (N, W) long, the W keys each block may attend to (its memory).
        keep: bool broadcastable to (N, Q, W): which of them each query may see (empty keys are False).
    """

    queries: torch.Tensor
    keys: torch.Tensor
    keep: torch.Tensor


def gather_blocks(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows of x (B, H, L, D) at ``index`` (N, S) -> (B, H, N, S, D); index L gives a zero row."""
    batch, heads, length, dim = x.shape
    padded = F.pad(x, (0, 0, 0, 1))  # (B, H, L + 1, D): row L is the empty slot
    return padded.index_select(2, index.reshape(-1)).view(batch, heads, *index.shape, dim)


def cat_keeps(masks: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate boolean masks along the last dim after broadcasting their leading dims together."""
    lead = torch.broadcast_shapes(*(m.shape[:-1] for m in masks))
    return torch.cat([m.expand(*lead, m.shape[-1]) for m in masks], dim=-1)


def lean_masked_softmax(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``utils.masked_softmax`` for a fresh scores tensor it may overwrite: masks in place, and zeroes rows
    with nothing to attend only when there are such rows (each skipped pass saves a scores-sized tensor)."""
    scores = scores.masked_fill_(~keep, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(scores.dtype)
    anything = keep.any(dim=-1, keepdim=True)  # no heads dimension: cheap
    return probs if bool(anything.all()) else probs.masked_fill(~anything, 0.0)


def blockwise_attention(
    q_blocks: torch.Tensor,
    k_blocks: torch.Tensor,
    v_blocks: torch.Tensor,
    keep: torch.Tensor,
    scaling: float,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One softmax per query over its block's keys.

    Args:
        q_blocks: (B, H, N, Q, D) queries by block.
        k_blocks, v_blocks: (B, H, N, W, D) keys and values of each block's memory.
        keep: bool broadcastable to (B, 1, N, Q, W).
        scaling: factor on the scores; dropout: probability of dropping an attention probability.

    Returns the values (B, H, N, Q, D) and the probabilities (B, H, N, Q, W).
    """
    # Scaling the queries is cheaper than scaling the (Q x W) scores.
    scores = torch.matmul(q_blocks * scaling, k_blocks.transpose(-1, -2))  # (B, H, N, Q, W)
    probs = lean_masked_softmax(scores, keep)  # a query with nothing to see gets zeros
    if dropout > 0.0:
        probs = F.dropout(probs, p=dropout)
    return torch.matmul(probs, v_blocks), probs


def prefix_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_keep: torch.Tensor | None,
    causal: bool,
    offset: int,
    scaling: float,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefix queries q (B, H, P', D), tokens ``offset .. offset + P' - 1``, attend to every key (only to
    earlier ones when causal). Returns values (B, H, P', D) and probabilities (B, H, P', Lk); cost O(P' Lk)."""
    keep = None if key_keep is None else key_keep[:, None, None, :]  # (B, 1, 1, Lk)
    if causal:
        query_token = offset + torch.arange(q.shape[2], device=q.device)[:, None]  # (P', 1)
        earlier = torch.arange(k.shape[2], device=q.device)[None, :] <= query_token  # (P', Lk)
        keep = earlier if keep is None else keep & earlier
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling  # (B, H, P', Lk)
    probs = masked_softmax(scores, keep)
    if dropout > 0.0:
        probs = F.dropout(probs, p=dropout)
    return torch.matmul(probs, v), probs


def scatter_weights(
    probs: torch.Tensor, layout: BlockLayout, q_len: int, kv_len: int, prefix_keys: int = 0
) -> torch.Tensor:
    """Dense (B, H, Lq, Lk) probabilities from block probabilities (B, H, N, Q, W + prefix_keys), the prefix
    keys last. Only built when weights are asked for (output_attentions): the one (L x L) tensor here."""
    batch, heads, blocks = probs.shape[:3]
    keys = layout.keys
    if prefix_keys:
        prefix = torch.arange(prefix_keys, device=keys.device).expand(blocks, prefix_keys)
        keys = torch.cat([keys, prefix], dim=1)  # (N, W + P)
    flat = (layout.queries[:, :, None] * (kv_len + 1) + keys[:, None, :]).reshape(-1)  # (N * Q * (W + P),)
    dense = probs.new_zeros(batch, heads, (q_len + 1) * (kv_len + 1))
    # A real (query, key) pair occurs at most once; empty slots land in the dropped last row / column.
    dense = dense.index_add(2, flat, probs[..., : keys.shape[1]].reshape(batch, heads, -1))
    return dense.view(batch, heads, q_len + 1, kv_len + 1)[:, :, :q_len, :kv_len]


def attend_layout(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: BlockLayout,
    *,
    key_keep: torch.Tensor | None,
    prefix_tokens: int,
    causal: bool,
    scaling: float,
    dropout: float,
    output_weights: bool,
    extra_shared: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Blocked attention of q (B, H, Lq, D) over k, v (B, H, Lk, D) following ``layout``.

    Queries are aligned with the last keys (query i is token ``Lk - Lq + i``). The first ``prefix_tokens``
    tokens are global: every block also sees them, and prefix queries attend to every key (earlier ones
    when causal). ``extra_shared`` = (keys (B, H, G, D), values, keep broadcastable to (B, 1, N, Q, G)) adds
    keys every block sees after the prefix keys (then ``output_weights`` is not available).
    Returns the values (B, H, Lq, D) and, if asked, the dense probabilities (B, H, Lq, Lk).
    """
    batch, heads, q_len, _ = q.shape
    kv_len = k.shape[2]
    offset = kv_len - q_len
    prefix_queries = max(0, prefix_tokens - offset)  # prefix tokens among the queries
    keep = layout.keep[None, None]  # (1, 1, N, Q or 1, W)
    if key_keep is not None:
        key_keep_padded = F.pad(key_keep, (0, 1))  # (B, Lk + 1): the empty slot is never kept
        keep = keep & key_keep_padded[:, layout.keys][:, None, :, None, :]  # (B, 1, N, Q, W)
    groups = []  # keys every block sees: (keys (B, H, G, D), values, keep broadcastable to (B, 1, N, Q, G))
    if prefix_tokens:
        prefix_keep = q.new_ones(1, prefix_tokens, dtype=torch.bool) if key_keep is None else key_keep
        # Prefix tokens precede every block token, so causal masking never hides them.
        groups.append(
            (k[:, :, :prefix_tokens], v[:, :, :prefix_tokens], prefix_keep[:, None, None, None, :prefix_tokens])
        )
    if extra_shared is not None:
        groups.append(extra_shared)
    q_blocks = gather_blocks(q, layout.queries)  # (B, H, N, Q, D)
    k_blocks = gather_blocks(k, layout.keys)  # (B, H, N, W, D)
    v_blocks = gather_blocks(v, layout.keys)  # (B, H, N, W, D)
    if groups:
        # Shared keys join every block's memory: one matmul each way, no slicing of the probabilities.
        blocks = layout.queries.shape[0]
        k_blocks = torch.cat([k_blocks] + [g[0][:, :, None].expand(-1, -1, blocks, -1, -1) for g in groups], dim=3)
        v_blocks = torch.cat([v_blocks] + [g[1][:, :, None].expand(-1, -1, blocks, -1, -1) for g in groups], dim=3)
        keep = cat_keeps([keep] + [g[2] for g in groups])  # (B or 1, 1, N, Q or 1, W + G)
    out_blocks, probs = blockwise_attention(q_blocks, k_blocks, v_blocks, keep, scaling, dropout)
    # Each block query back to its place in the sequence (empty slots point past the end and are dropped).
    slots = layout.queries.reshape(-1)
    order = torch.zeros(q_len + 1, dtype=torch.long, device=q.device)
    order[slots] = torch.arange(slots.numel(), device=q.device)
    values = out_blocks.reshape(batch, heads, -1, out_blocks.shape[-1])[:, :, order[prefix_queries:q_len]]
    weights = None
    if output_weights:
        weights = scatter_weights(probs, layout, q_len, kv_len, prefix_tokens)
    if prefix_queries:
        prefix_out, prefix_probs = prefix_attention(
            q[:, :, :prefix_queries], k, v, key_keep, causal, offset, scaling, dropout
        )
        values = torch.cat([prefix_out, values], dim=2)  # (B, H, Lq, D)
        if weights is not None:
            weights = torch.cat([prefix_probs, weights[:, :, prefix_queries:]], dim=2)
    return values, weights


# ----------------------------------------------------------------------------------------------------------
# layouts
# ----------------------------------------------------------------------------------------------------------


def local_1d_layout(
    q_len: int, kv_len: int, prefix_tokens: int, block_size: int, flange: int, causal: bool, device
) -> BlockLayout:
    """Blocks of ``block_size`` tokens after the prefix; each sees itself and ``flange`` tokens before it
    (and, non-causal, as many after it). Queries are the last ``q_len`` tokens; blocks holding none are dropped."""
    tokens = kv_len - prefix_tokens  # non-prefix tokens
    offset = kv_len - q_len
    num_blocks = -(-max(tokens, 0) // block_size)
    position = torch.arange(num_blocks * block_size, device=device).view(num_blocks, block_size)  # (N, b)
    query_token = prefix_tokens + position  # (N, b) token index
    has_query = (position < tokens) & (query_token >= offset)
    queries = torch.where(has_query, query_token - offset, q_len)
    width = flange + block_size + (0 if causal else flange)
    key_pos = position[:, :1] - flange + torch.arange(width, device=device)  # (N, W)
    key_valid = (key_pos >= 0) & (key_pos < tokens)
    keys = torch.where(key_valid, prefix_tokens + key_pos, kv_len)
    keep = key_valid[:, None, :]  # (N, 1, W)
    if causal:
        keep = keep & (key_pos[:, None, :] <= position[:, :, None])  # (N, b, W)
    used = has_query.any(dim=1)  # blocks with at least one query (all of them unless decoding with a cache)
    return BlockLayout(queries[used], keys[used], keep[used])


def local_2d_layout(
    grid: tuple[int, int],
    prefix_tokens: int,
    query_shape: tuple[int, int],
    memory_flange: tuple[int, int],
    causal: bool,
    device,
) -> BlockLayout:
    """Query rectangles of ``query_shape`` on the grid (padded to a multiple); the memory extends each by
    ``memory_flange`` rows above and below and columns left and right (causal: rows above only, and only keys
    before the query in the sequence, never the right flange beside the query rows)."""
    height, width = grid
    (qh, qw), (fh, fw) = query_shape, memory_flange
    length = prefix_tokens + height * width
    blocks_h, blocks_w = -(-height // qh), -(-width // qw)
    top = torch.arange(blocks_h, device=device)[:, None] * qh  # (nbh, 1) first row of each block
    left = torch.arange(blocks_w, device=device)[None, :] * qw  # (1, nbw) first column of each block

    def coordinates(rows: int, cols: int, row0: int, col0: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, rows * cols) row and column of each position of a (rows x cols) window starting at
        (top + row0, left + col0) of every block."""
        r = top[:, :, None, None] + row0 + torch.arange(rows, device=device)[:, None]  # (nbh, 1, rows, 1)
        c = left[:, :, None, None] + col0 + torch.arange(cols, device=device)  # (1, nbw, 1, cols)
        r, c = torch.broadcast_tensors(r, c)  # (nbh, nbw, rows, cols)
        return r.reshape(blocks_h * blocks_w, -1), c.reshape(blocks_h * blocks_w, -1)

    q_row, q_col = coordinates(qh, qw, 0, 0)  # (N, Q)
    k_row, k_col = coordinates(qh + fh + (0 if causal else fh), qw + 2 * fw, -fh, -fw)  # (N, W)
    q_valid = (q_row < height) & (q_col < width)
    k_valid = (k_row >= 0) & (k_row < height) & (k_col >= 0) & (k_col < width)
    queries = torch.where(q_valid, prefix_tokens + q_row * width + q_col, length)
    keys = torch.where(k_valid, prefix_tokens + k_row * width + k_col, length)
    keep = k_valid[:, None, :]  # (N, 1, W)
    if causal:
        block_top = q_row[:, :1, None]  # (N, 1, 1) first row of the query block
        block_right = q_col[:, :1, None] + qw  # (N, 1, 1) first column right of the query block
        flange_ok = (k_row[:, None, :] < block_top) | (k_col[:, None, :] < block_right)  # no right flange
        earlier = keys[:, None, :] <= queries[:, :, None]  # (N, Q, W) key not after the query in the sequence
        keep = keep & flange_ok & earlier
    return BlockLayout(queries, keys, keep)


# ----------------------------------------------------------------------------------------------------------
# dense patterns (tests): written from the definitions, independently of the layouts above
# ----------------------------------------------------------------------------------------------------------


def prefix_pattern(rule: torch.Tensor, q_len: int, kv_len: int, prefix_tokens: int, causal: bool) -> torch.Tensor:
    """Complete ``rule`` (Lq, Lk), the pattern among non-prefix tokens, with the prefix: prefix queries see
    every key and every query sees the prefix keys (causal: only keys not after the query)."""
    offset = kv_len - q_len
    q_tok = torch.arange(q_len, device=rule.device)[:, None] + offset  # (Lq, 1)
    k_tok = torch.arange(kv_len, device=rule.device)[None, :]  # (1, Lk)
    keep = rule | (q_tok < prefix_tokens) | (k_tok < prefix_tokens)
    if causal:
        keep = keep & (k_tok <= q_tok)
    return keep


class _BlockedCore(AttentionCore):
    """Shared forward of the entries defined by a :class:`BlockLayout`."""

    def layout(self, q_len: int, kv_len: int, grid, prefix_tokens: int, causal: bool, device) -> BlockLayout:
        raise NotImplementedError

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        causal: bool = False,
        grid: tuple[int, int] | None = None,
        state: Any = None,
        *,
        dropout: float = 0.0,
        scaling: float | None = None,
        output_weights: bool = False,
        module: nn.Module | None = None,
        prefix_tokens: int = 0,
    ) -> AttentionOutput:
        check_call(self.name, self, q, k, grid, prefix_tokens)
        key_keep = key_padding_mask(attention_mask, q.shape[0], k.shape[2], self.name)  # (B, Lk) or None
        layout = self.layout(q.shape[2], k.shape[2], grid, prefix_tokens, causal, q.device)
        values, weights = attend_layout(
            q,
            k,
            v,
            layout,
            key_keep=key_keep,
            prefix_tokens=prefix_tokens,
            causal=causal,
            scaling=q.shape[-1] ** -0.5 if scaling is None else scaling,
            dropout=dropout,
            output_weights=output_weights,
        )
        return AttentionOutput(values, weights)


@register_attention
class LocalAttention(_BlockedCore):
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
        length_constraint="any length (padded to a multiple of block_size internally); q_len <= kv_len, "
        "the queries being the last kv tokens",
    )
    small_kwargs = {"block_size": 4, "memory_flange": 2}

    def __init__(self, num_heads: int, head_dim: int, block_size: int = 256, memory_flange: int | None = None):
        super().__init__(num_heads, head_dim)
        self.block_size = check_int(self.name, "block_size", block_size, 1)
        if memory_flange is not None:
            check_int(self.name, "memory_flange", memory_flange, 0)
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
class Local2DAttention(_BlockedCore):
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
        self.query_shape = check_pair(self.name, "query_shape", query_shape, 1)
        self.memory_flange = check_pair(self.name, "memory_flange", memory_flange, 0)

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
