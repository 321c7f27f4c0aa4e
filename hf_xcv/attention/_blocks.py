"""Block machinery of the blocked entries (``local``, ``local_2d``, ``axial``, ``memory_compressed``).

A :class:`BlockLayout` names, per block, which queries it holds and which keys it may see, and
:func:`attend_layout` runs softmax attention block by block, with optional keys shared by every block (fused, a
chunk of blocks at a time, by ``_flash.gathered_block_attention`` where it can serve the call). The
layouts of 1-D blocks with a memory flange and of 2-D query rectangles live here too, with the dense
patterns the tests compare them with.

Prefix tokens (ViT's [CLS]) stay out of the blocks: every block also sees them, and they attend to every key
(only earlier ones when causal), so a class token can summarise the whole input. An additive bias is read at
the (query, key) pairs each block scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._flash import gathered_block_attention
from ._masks import bias_at, key_keep_rows, lean_masked_softmax, masked_softmax
from .registry import AttentionCall, AttentionCore, AttentionOutput


def grid_problems(entry: str, q_len: int, kv_len: int, grid, prefix_tokens: int) -> list[str]:
    """Length problems of a grid entry: keys and queries are the same prefix + h*w tokens."""
    problems = []
    if grid is not None and q_len != prefix_tokens + grid[0] * grid[1]:
        problems.append(f"its {q_len} tokens are not {prefix_tokens} prefix token(s) plus a {grid[0]}x{grid[1]} grid")
    if kv_len != q_len:
        problems.append(f"it attends within one token grid, so kv_len ({kv_len}) must equal q_len ({q_len})")
    return problems


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


def blockwise_attention(
    q_blocks: torch.Tensor,
    k_blocks: torch.Tensor,
    v_blocks: torch.Tensor,
    keep: torch.Tensor,
    scaling: float,
    dropout: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One softmax per query over its block's keys.

    Args:
        q_blocks: (B, H, N, Q, D) queries by block.
        k_blocks, v_blocks: (B, H, N, W, D) keys and values of each block's memory.
        keep: bool broadcastable to (B, 1, N, Q, W).
        scaling: factor on the scores; dropout: probability of dropping an attention probability.
        bias: additive logits broadcastable to (B, H, N, Q, W), or None.

    Returns the values (B, H, N, Q, D) and the probabilities (B, H, N, Q, W).
    """
    # Scaling the queries is cheaper than scaling the (Q x W) scores.
    scores = torch.matmul(q_blocks * scaling, k_blocks.transpose(-1, -2))  # (B, H, N, Q, W)
    if bias is not None:
        scores = scores.add_(bias.to(scores.dtype))
    probs = lean_masked_softmax(scores, keep)  # a query with nothing to see gets zeros
    if dropout > 0.0:
        probs = F.dropout(probs, p=dropout)
    return torch.matmul(probs, v_blocks), probs


def prefix_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int, call: AttentionCall
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefix queries q (B, H, P', D), the first P' queries (tokens ``offset .. offset + P' - 1``), attend to
    every key (only to earlier ones when causal), with the call's padding, bias, scaling and dropout.
    Returns values (B, H, P', D) and probabilities (B, H, P', Lk); cost O(P' Lk)."""
    keep = key_keep_rows(call.key_keep)  # (B, 1, 1, Lk)
    if call.causal:
        query_token = offset + torch.arange(q.shape[2], device=q.device)[:, None]  # (P', 1)
        earlier = torch.arange(k.shape[2], device=q.device)[None, :] <= query_token  # (P', Lk)
        keep = earlier if keep is None else keep & earlier
    scores = torch.matmul(q, k.transpose(-1, -2)) * call.scaling  # (B, H, P', Lk)
    bias = call.bias
    if bias is not None and bias.shape[2] > 1:
        bias = bias[:, :, : q.shape[2]]  # (B', H', P', Lk or 1)
    probs = masked_softmax(scores, keep, bias=bias)
    if call.dropout > 0.0:
        probs = F.dropout(probs, p=call.dropout)
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
    call: AttentionCall,
    extra_shared: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    fused: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Blocked attention of q (B, H, Lq, D) over k, v (B, H, Lk, D) following ``layout``, with the call's key
    padding, causal flag, prefix tokens, bias, scaling, dropout and weights request.

    Queries are aligned with the last keys (query i is token ``Lk - Lq + i``). The first ``prefix_tokens``
    tokens are global: every block also sees them, and prefix queries attend to every key (earlier ones
    when causal). The bias (B', H', Lq, Lk), broadcastable, is added to the logits of the pairs scored.
    ``extra_shared`` = (keys (B, H, G, D), values, keep broadcastable to (B, 1, N, Q, G)) adds keys every block
    sees after the prefix keys (then neither weights nor a bias are available: they are not tokens).

    ``fused`` runs the blocks through :func:`gathered_block_attention`: chunk by chunk, with only q, k, v and the
    row log-sum-exp kept for backward (and the blocked bias (B', H', N, Q, W + P), when there is a bias). The
    blocked tensors are built whole and kept by autograd instead (the unfused path) when ``fused`` is False, when
    weights are asked for (they are the probabilities), with attention dropout (the fused backward recomputes
    the probabilities and would need the dropout mask), and under torch.compile / export (the compiler sees
    plain operations). Both paths give the same values and gradients.
    Returns the values (B, H, Lq, D) and, if asked, the dense probabilities (B, H, Lq, Lk).
    """
    if call.bias is not None and extra_shared is not None:
        raise ValueError("attend_layout: a bias covers tokens, not the extra shared keys")
    q_len, prefix_tokens = q.shape[2], call.prefix_tokens
    prefix_queries = max(0, prefix_tokens - (k.shape[2] - q_len))  # prefix tokens among the queries
    block_bias = None
    if call.bias is not None:  # the bias of every (block query, block key) pair, the prefix keys last
        prefix = torch.arange(prefix_tokens, device=q.device).expand(layout.keys.shape[0], prefix_tokens)
        keys = torch.cat([layout.keys, prefix], dim=1)  # (N, W + P)
        block_bias = bias_at(call.bias, layout.queries[:, :, None], keys[:, None, :])  # (B', H', N, Q, W + P)
    use_fused = fused and not call.output_weights and call.dropout == 0.0 and not torch.compiler.is_compiling()
    if use_fused:
        values, weights = _fused_layout(q, k, v, layout, call, extra_shared, block_bias), None
    else:
        values, weights = _unfused_layout(q, k, v, layout, call, extra_shared, block_bias)
    if prefix_queries:
        prefix_out, prefix_probs = prefix_attention(q[:, :, :prefix_queries], k, v, k.shape[2] - q_len, call)
        values = torch.cat([prefix_out, values[:, :, prefix_queries:]], dim=2)  # (B, H, Lq, D)
        if weights is not None:
            weights = torch.cat([prefix_probs, weights[:, :, prefix_queries:]], dim=2)
    return values, weights


def _fused_layout(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: BlockLayout,
    call: AttentionCall,
    extra_shared: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
    block_bias: torch.Tensor | None,
) -> torch.Tensor:
    """:func:`attend_layout`'s blocks through :func:`gathered_block_attention`: (B, H, Lq, D) values, the rows
    of prefix queries (in no block) zero."""
    keep = own_keep(layout, call.key_keep)  # (B or 1, 1, N, Q or 1, W)
    groups = _shared_groups(k, v, call.key_keep, call.prefix_tokens, extra_shared)
    shared = None
    if len(groups) == 1:
        shared = groups[0]
    elif groups:  # a few shared keys: small copies
        shared = (
            torch.cat([g[0] for g in groups], dim=2),  # (B, H, G, D)
            torch.cat([g[1] for g in groups], dim=2),
            cat_keeps([g[2] for g in groups]),  # (B or 1, 1, N or 1, Q or 1, G)
        )
    if block_bias is not None and block_bias.dim() < 5:
        block_bias = block_bias.reshape((1,) * (5 - block_bias.dim()) + tuple(block_bias.shape))
    return gathered_block_attention(
        q, k, v, layout.queries, layout.keys, keep, call.scaling, bias=block_bias, shared=shared
    )


def _unfused_layout(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: BlockLayout,
    call: AttentionCall,
    extra_shared: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
    block_bias: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`attend_layout`'s blocks as whole blocked tensors on autograd's graph: (B, H, Lq, D) values (prefix
    query rows: whatever, replaced by the caller) and, if asked, the dense probabilities (B, H, Lq, Lk)."""
    batch, heads, q_len, _ = q.shape
    kv_len, prefix_tokens = k.shape[2], call.prefix_tokens
    q_blocks = gather_blocks(q, layout.queries)  # (B, H, N, Q, D)
    k_blocks, v_blocks, keep = _block_memory(k, v, layout, call.key_keep, prefix_tokens, extra_shared)
    out_blocks, probs = blockwise_attention(q_blocks, k_blocks, v_blocks, keep, call.scaling, call.dropout, block_bias)
    # Each block query back to its place in the sequence (empty slots point past the end and are dropped).
    slots = layout.queries.reshape(-1)
    order = torch.zeros(q_len + 1, dtype=torch.long, device=q.device)
    order[slots] = torch.arange(slots.numel(), device=q.device)
    values = out_blocks.reshape(batch, heads, -1, out_blocks.shape[-1])[:, :, order[:q_len]]
    weights = scatter_weights(probs, layout, q_len, kv_len, prefix_tokens) if call.output_weights else None
    return values, weights


def own_keep(layout: BlockLayout, key_keep: torch.Tensor | None) -> torch.Tensor:
    """Which of its own memory keys each block query may see: bool broadcastable to (B, 1, N, Q, W)."""
    keep = layout.keep[None, None]  # (1, 1, N, Q or 1, W)
    if key_keep is not None:
        key_keep_padded = F.pad(key_keep, (0, 1))  # (B, Lk + 1): the empty slot is never kept
        keep = keep & key_keep_padded[:, layout.keys][:, None, :, None, :]  # (B, 1, N, Q, W)
    return keep


def _shared_groups(
    k: torch.Tensor,
    v: torch.Tensor,
    key_keep: torch.Tensor | None,
    prefix_tokens: int,
    extra_shared: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The keys every block sees: (keys (B, H, G, D), values, keep broadcastable to (B, 1, N, Q, G)) for the
    prefix tokens, then ``extra_shared``."""
    groups = []
    if prefix_tokens:
        prefix_keep = k.new_ones(1, prefix_tokens, dtype=torch.bool) if key_keep is None else key_keep
        # Prefix tokens precede every block token, so causal masking never hides them.
        groups.append(
            (k[:, :, :prefix_tokens], v[:, :, :prefix_tokens], prefix_keep[:, None, None, None, :prefix_tokens])
        )
    if extra_shared is not None:
        groups.append(extra_shared)
    return groups


def _block_memory(
    k: torch.Tensor,
    v: torch.Tensor,
    layout: BlockLayout,
    key_keep: torch.Tensor | None,
    prefix_tokens: int,
    extra_shared: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every block's keys and values (B, H, N, W + G, D) and keep mask (broadcastable to (B, 1, N, Q, W + G)):
    its own memory, then the keys every block sees (the prefix tokens, then ``extra_shared``)."""
    keep = own_keep(layout, key_keep)  # (B or 1, 1, N, Q or 1, W)
    groups = _shared_groups(k, v, key_keep, prefix_tokens, extra_shared)
    k_blocks = gather_blocks(k, layout.keys)  # (B, H, N, W, D)
    v_blocks = gather_blocks(v, layout.keys)  # (B, H, N, W, D)
    if groups:
        # Shared keys join every block's memory: one matmul each way, no slicing of the probabilities.
        blocks = layout.queries.shape[0]
        k_blocks = torch.cat([k_blocks] + [g[0][:, :, None].expand(-1, -1, blocks, -1, -1) for g in groups], dim=3)
        v_blocks = torch.cat([v_blocks] + [g[1][:, :, None].expand(-1, -1, blocks, -1, -1) for g in groups], dim=3)
        keep = cat_keeps([keep] + [g[2] for g in groups])  # (B or 1, 1, N, Q or 1, W + G)
    return k_blocks, v_blocks, keep


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
    if q_len == kv_len:  # every block holds queries: no selection (a shape-dependent one would not compile)
        return BlockLayout(queries, keys, keep)
    used = has_query.any(dim=1)  # decoding with a cache: the blocks with at least one query
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


class LayoutAttention(AttentionCore):
    """Base of the entries defined by a :class:`BlockLayout`: subclasses give :meth:`layout`."""

    weights_are_copies = True  # the maps are assembled apart from the values
    # None (default): the fused path on CPU tensors only (AttentionCore.use_fused); True: always; False: today's
    # unfused path on autograd's graph (see attend_layout), e.g. to compare with
    fused: bool | None = None

    def layout(self, q_len: int, kv_len: int, grid, prefix_tokens: int, causal: bool, device) -> BlockLayout:
        raise NotImplementedError

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        layout = self.layout(q.shape[2], k.shape[2], call.grid, call.prefix_tokens, call.causal, q.device)
        return AttentionOutput(*attend_layout(q, k, v, layout, call, fused=self.use_fused(q)))
