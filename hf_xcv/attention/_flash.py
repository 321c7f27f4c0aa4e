"""Fused "gathered-block" softmax attention: blocks of queries, each over its own keys, without keeping the
blocked scores, probabilities or key / value copies alive for backward.

A block n holds the queries at ``q_index[n]`` (Q of them) and may see the keys at ``k_index[n]`` (W of them),
plus G keys shared by every block (prefix tokens, compressed memory). :func:`gathered_block_attention` runs the
blocks a chunk at a time (one head, a few blocks: ``SCORE_BUDGET`` scores, ``ROW_BUDGET`` queries) and saves
only q, k, v and each query's log-sum-exp (plus the small index and mask tensors). Not even the output:
backward needs rowsum(dO * O), which equals rowsum(P * dP) of the chunk, so the caller's layer can free O.
Backward recomputes a chunk's probabilities from the log-sum-exp (P = exp(S - lse); dS = P (dP - rowsum(P dP));
dQ = dS K * scale; dK = dS^T Q * scale; dV = P^T dO) and accumulates dq, dk, dv into full-size gradients.
Exponentials are taken in base 2 (see :func:`_chunk_scores`). A chunk whose blocks are evenly strided runs of
rows (1-D windows, grid rows or columns) reads them through a strided view of q, k, v (copied to a contiguous
chunk) and adds its gradients back in place; other chunks gather with ``index_select`` and ``index_add_`` back.
The peak is a chunk's scores plus O(L D) tensors, and the result does not depend on the chunk size.

Index conventions (as :class:`hf_xcv.attention._blocks.BlockLayout`): ``q_index`` (N, Q) or per batch row and
head (B, H, N, Q) into the Lq queries, ``Lq`` marking an empty slot; ``k_index`` (N, W) or (B, H, N, W) into the
Lk keys, ``Lk`` marking an empty slot. A query with nothing to attend (every key masked) gives zeros and a zero
gradient. Every real query should sit in at most one block; queries in no block give zeros.

:func:`plan_blocks`, :func:`blocks_forward` and :func:`blocks_backward` are the pieces, for Functions that
chain several block passes (``axial``).
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

LOG2E = math.log2(math.e)  # exp(x) = exp2(x * LOG2E)
SCORE_BUDGET = 2**18  # score elements per chunk (1 MiB in float32, about a core's cache): the speed / memory knob
ROW_BUDGET = 1024  # query rows per chunk: with few keys per block, its (rows x D) copies would outgrow the scores


class _Rows:
    """How a chunk reaches its rows of a (B, H, L, D) tensor: through an index (a gathered copy, ``index_add_``
    back) or, when its blocks are evenly strided runs of rows (a window of consecutive rows, a grid column) at
    evenly spaced starts, through a strided view of the tensor itself (no copy; added back in place).

    Attributes:
        index: (n, S) or (B, H, n, S) long, the rows of the chunk's blocks (``L`` or more: an empty slot).
        window: (first row, spacing of the blocks' starts, blocks, step between a block's rows, whether no row
            repeats) when every block is such a run inside the sequence, else None.
    """

    def __init__(self, index: torch.Tensor, window: tuple[int, int, int, int, bool] | None):
        self.index, self.window = index, window

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """The rows (B, h, n, S, D) of x (B, h, L, D): a view for a window, else a copy (empty slots read row
        L - 1: the caller masks them)."""
        if self.window is not None:
            return self._view(x)
        batch, heads, length, dim = x.shape
        index = self.index.clamp(max=length - 1)
        if index.dim() == 2:
            return x.index_select(2, index.reshape(-1)).view(batch, heads, *index.shape, dim)
        flat = index.expand(batch, heads, -1, -1).reshape(batch, heads, -1, 1).expand(-1, -1, -1, dim)  # (B,h,nS,D)
        return torch.gather(x, 2, flat).view(batch, heads, *index.shape[2:], dim)

    def add(self, target: torch.Tensor, rows: torch.Tensor) -> None:
        """target (B, h, L, D) += rows (B, h, n, S, D) at the chunk's rows (the rows of empty slots must be zero)."""
        if self.window is not None:
            self._write(target, rows, torch.Tensor.add_)
            return
        batch, heads, length, dim = target.shape
        index = self.index.clamp(max=length - 1)
        rows = rows.reshape(batch, heads, -1, dim)  # (B, h, nS, D)
        if index.dim() == 2:
            target.index_add_(2, index.reshape(-1), rows)
        else:
            flat = index.expand(batch, heads, -1, -1).reshape(batch, heads, -1, 1).expand(-1, -1, -1, dim)
            target.scatter_add_(2, flat, rows)

    def set(self, target: torch.Tensor, rows: torch.Tensor) -> None:
        """target (B, h, L, D) at the chunk's rows := rows (B, h, n, S, D); the rows must be distinct real rows."""
        if self.window is not None:
            self._write(target, rows, torch.Tensor.copy_)
            return
        batch, heads, _, dim = target.shape
        if self.index.dim() == 2:
            target.index_copy_(2, self.index.reshape(-1), rows.reshape(batch, heads, -1, dim))
        else:
            flat = self.index.expand(batch, heads, -1, -1).reshape(batch, heads, -1, 1).expand(-1, -1, -1, dim)
            target.scatter_(2, flat, rows.reshape(batch, heads, -1, dim))

    def _write(self, target: torch.Tensor, rows: torch.Tensor, op) -> None:
        """``op`` (in-place add or copy) of rows into the window's view of target; block by block where the
        blocks share rows (an in-place write cannot go through an overlapping view)."""
        first, spacing, blocks, _, distinct = self.window
        if distinct:
            op(self._view(target), rows)
            return
        for n in range(blocks):
            op(self._view(target, first + n * spacing, 1)[:, :, 0], rows[:, :, n])

    def _view(self, x: torch.Tensor, first: int | None = None, blocks: int | None = None) -> torch.Tensor:
        """The (B, h, n, S, D) strided view of x (B, h, L, D) at the window (or ``blocks`` blocks from ``first``)."""
        start, spacing, count, step, _ = self.window
        first, blocks = (start, count) if first is None else (first, blocks)
        stride_b, stride_h, stride_l, stride_d = x.stride()
        size = (x.shape[0], x.shape[1], blocks, self.index.shape[-1], x.shape[3])
        stride = (stride_b, stride_h, spacing * stride_l, step * stride_l, stride_d)
        return x.as_strided(size, stride, x.storage_offset() + first * stride_l)


def _window_starts(index: torch.Tensor, length: int) -> tuple[list[int], list[int], list[bool]] | None:
    """For an (N, S) index: each block's first row, the step between its rows, and whether the block is the run
    first, first + step, ... (step >= 1) inside the sequence; None for per-head indices and empty blocks."""
    if index.dim() != 2 or index.shape[1] == 0:
        return None
    first = index[:, 0]
    step = index[:, 1] - first if index.shape[1] > 1 else torch.ones_like(first)
    run = first[:, None] + step[:, None] * torch.arange(index.shape[1], device=index.device)  # (N, S)
    ok = (index == run).all(dim=1) & (step >= 1) & (first >= 0) & (index[:, -1] < length)
    return first.tolist(), step.tolist(), ok.tolist()


def _chunk_rows(index: torch.Tensor, starts, heads: tuple[int, int], blocks: tuple[int, int]) -> _Rows:
    """The :class:`_Rows` of blocks ``blocks`` (and heads ``heads`` of a per-head index)."""
    start, stop = blocks
    if index.dim() != 2:
        return _Rows(_part(index, heads, blocks), None)
    window = None
    if starts is not None and all(starts[2][start:stop]) and len(set(starts[1][start:stop])) == 1:
        first = starts[0][start:stop]
        spacing = first[1] - first[0] if len(first) > 1 else 0
        if spacing >= 0 and all(b - a == spacing for a, b in zip(first, first[1:])):
            rows = index[start:stop]
            distinct = stop - start == 1 or rows.unique().numel() == rows.numel()
            window = (first[0], spacing, stop - start, starts[1][start], distinct)
    return _Rows(index[start:stop], window)


def _part(x: torch.Tensor | None, heads: tuple[int, int], blocks: tuple[int, int]) -> torch.Tensor | None:
    """The heads ``heads`` and blocks ``blocks`` ((start, stop) each) of x (·, H or 1, N or 1, ...): dimensions 1
    and 2, each narrowed unless it broadcasts (size 1)."""
    if x is None:
        return x
    for dim, (start, stop) in ((1, heads), (2, blocks)):
        if x.shape[dim] != 1:
            x = x.narrow(dim, start, stop - start)
    return x


def _sum_to(x: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """x summed over the dimensions where ``shape`` (same rank) is 1 and x is not."""
    dims = [d for d, (have, want) in enumerate(zip(x.shape, shape)) if want == 1 and have != 1]
    return x.sum(dim=dims, keepdim=True) if dims else x


def _five(x: torch.Tensor) -> torch.Tensor:
    """x with leading size-1 dimensions up to 5."""
    return x.reshape((1,) * (5 - x.dim()) + tuple(x.shape))


def _heads(x: torch.Tensor | None, heads: tuple[int, int]) -> torch.Tensor | None:
    """The heads ``heads`` of x (B, H, L, D) (a view)."""
    return None if x is None else x.narrow(1, heads[0], heads[1] - heads[0])


class _Chunk:
    """One chunk: its heads and blocks ((start, stop) each), its query and key :class:`_Rows`, its part of the
    drop mask (True: masked; None when nothing is) and of the rows with nothing to attend (None when none)."""

    def __init__(self, heads, blocks, queries: _Rows, keys: _Rows, drop, nothing):
        self.heads, self.blocks, self.queries, self.keys = heads, blocks, queries, keys
        self.drop, self.nothing = drop, nothing


def _plan(q_index, k_index, keep, shared_keep, q_len, kv_len, heads, width, chunk_blocks) -> list[_Chunk]:
    """The chunks of a call: one head and as many whole blocks as fit ``SCORE_BUDGET`` scores and ``ROW_BUDGET``
    query rows (at least one), or ``chunk_blocks`` blocks of every head when given."""
    blocks, queries = q_index.shape[-2:]
    q_valid = (q_index < q_len)[..., None]  # (.., N, Q, 1)
    k_valid = (k_index < kv_len)[..., None, :]  # (.., N, 1, W)
    every_query = bool(q_valid.all())  # then no (.., N, Q, W) mask is built for the empty query slots
    keep = keep if bool(k_valid.all()) else keep & k_valid
    keep = _five(keep if every_query else keep & q_valid)  # broadcastable to (B, H, N, Q, W)
    if shared_keep is not None:
        shared_keep = _five(shared_keep if every_query else shared_keep & q_valid)
        lead = torch.broadcast_shapes(keep.shape[:-1], shared_keep.shape[:-1])
        keep = torch.cat([keep.expand(*lead, -1), shared_keep.expand(*lead, -1)], dim=-1)
    drop, nothing = ~keep, ~keep.any(dim=-1, keepdim=True)  # (.., N, Q or 1, W + G), (.., N, Q or 1, 1)
    any_drop, any_nothing = drop.flatten(3).any(dim=-1), nothing.flatten(3).any(dim=-1)  # (.., N)
    per_block = queries * width
    # One head per chunk: a strided view of several heads' windows could not be one batched matmul operand.
    head_step = heads if chunk_blocks else 1
    block_step = chunk_blocks or max(1, min(SCORE_BUDGET // max(per_block, 1), ROW_BUDGET // max(queries, 1)))
    q_starts, k_starts = _window_starts(q_index, q_len), _window_starts(k_index, kv_len)
    chunks = []
    for h in range(0, heads, head_step):
        for n in range(0, blocks, block_step):
            part = (h, min(h + head_step, heads)), (n, min(n + block_step, blocks))
            queries_c, keys_c = _chunk_rows(q_index, q_starts, *part), _chunk_rows(k_index, k_starts, *part)
            drop_c = _part(drop, *part) if bool(_part(any_drop, *part).any()) else None
            nothing_c = _part(nothing, *part) if bool(_part(any_nothing, *part).any()) else None
            chunks.append(_Chunk(*part, queries_c, keys_c, drop_c, nothing_c))
    return chunks


def _chunk_inputs(chunk: _Chunk, q, k, v, shared_k, shared_v, dtype):
    """Queries (B, h, n, Q, D) and keys, values (B, h, n, W + G, D) of a chunk in ``dtype``."""
    heads = chunk.heads
    # Contiguous copies of the windows: a chunk's worth, and the matmuls run 15-25 % faster on them than on
    # views with the sequence's row stride.
    qc = chunk.queries.read(_heads(q, heads)).to(dtype).contiguous()
    kc = chunk.keys.read(_heads(k, heads)).to(dtype).contiguous()
    vc = chunk.keys.read(_heads(v, heads)).to(dtype).contiguous()
    if shared_k is not None:
        lead = kc.shape[:3]
        kc = torch.cat([kc, _heads(shared_k, heads).to(dtype)[:, :, None].expand(*lead, -1, -1)], dim=3)
        vc = torch.cat([vc, _heads(shared_v, heads).to(dtype)[:, :, None].expand(*lead, -1, -1)], dim=3)
    return qc, kc, vc


def _chunk_scores(chunk: _Chunk, qc, kc, scaling, bias):
    """Masked scores of a chunk in base 2: ((q * scaling) k^T + bias) * log2(e) (B, h, n, Q, W + G), masked
    entries at the dtype's minimum.

    Base 2 because ``exp2`` keeps its speed where ``exp`` crawls: on arguments whose result underflows (masked
    entries, and the far tail of a peaked softmax), torch's ``exp`` is 40-150x slower than on ordinary ones."""
    scores = torch.matmul(qc * (scaling * LOG2E), kc.transpose(-1, -2))
    if bias is not None:
        scores = scores.add_(_part(bias, chunk.heads, chunk.blocks).to(scores.dtype), alpha=LOG2E)
        scores = scores.clamp_(min=torch.finfo(scores.dtype).min)  # a bias at the minimum would overflow to -inf
    if chunk.drop is not None:
        scores = scores.masked_fill_(chunk.drop, torch.finfo(scores.dtype).min)
    return scores


def blocks_forward(q, k, v, chunks: list[_Chunk], scaling: float, bias=None, shared_k=None, shared_v=None):
    """The blocks' attention under no_grad: the values (B, H, Lq, D), in q's layout and at least float32, and the
    row log-sum-exp in base 2 (B, H, N, Q, 1) (+inf for a query with nothing to attend)."""
    dtype = torch.promote_types(q.dtype, torch.float32)  # accumulate in at least float32
    out = torch.zeros_like(q, dtype=dtype)  # q's layout: heads split from (B, L, H * D) merge back as a view
    # One buffer for every chunk's log-sum-exp: no small long-lived allocations between the chunks' ones.
    blocks = max((chunk.blocks[1] for chunk in chunks), default=0)
    queries = chunks[0].queries.index.shape[-1] if chunks else 0
    lse_all = q.new_empty(q.shape[0], q.shape[1], blocks, queries, 1, dtype=dtype)  # (B, H, N, Q, 1)
    for chunk in chunks:
        qc, kc, vc = _chunk_inputs(chunk, q, k, v, shared_k, shared_v, dtype)
        scores = _chunk_scores(chunk, qc, kc, scaling, bias)  # (B, h, n, Q, W + G)
        top = scores.amax(dim=-1, keepdim=True)  # (B, h, n, Q, 1)
        weights = torch.exp2(scores.sub_(top), out=scores)  # unnormalised probabilities
        total = weights.sum(dim=-1, keepdim=True)  # (B, h, n, Q, 1)
        values = torch.matmul(weights, vc).div_(total)  # normalised after the matmul: Q x D, not Q x W
        lse = top.add_(total.log2_())  # base 2, like the scores
        if chunk.nothing is not None:  # a query with nothing to see: zeros, and lse = inf so that P = 0
            values = values.masked_fill_(chunk.nothing, 0.0)
            lse = lse.masked_fill_(chunk.nothing, float("inf"))
        chunk.queries.add(_heads(out, chunk.heads), values)
        _part(lse_all, chunk.heads, chunk.blocks).copy_(lse)
    return out, lse_all


def blocks_backward(q, k, v, chunks, lse_all, grad_out, scaling, grads, bias=None, shared=None, reuse=None):
    """Accumulate the gradients of :func:`blocks_forward` for ``grad_out`` (B, H, Lq, D) into ``grads`` =
    (dq, dk, dv, d_bias or None) (dv and the bias's gradient may be None: not wanted) and, with ``shared`` =
    (keys, values, d_keys, d_values) (B, H, G, D) each, into the shared keys' gradients.

    ``reuse`` lets dv share memory with an input, to save a whole-length buffer: ``"v"`` (dv is v: every key row
    belongs to one chunk, read there before its gradient overwrites it) or ``"grad_out"`` (dv is grad_out: besides,
    each chunk's key rows are its query rows). The rows of dv are then set, not added.
    """
    dq, dk, dv, d_bias = grads
    shared_k, shared_v, d_shared_k, d_shared_v = shared if shared is not None else (None,) * 4
    dtype = lse_all.dtype
    for chunk in chunks:
        heads, lse, own = chunk.heads, _part(lse_all, chunk.heads, chunk.blocks), chunk.keys.index.shape[-1]
        qc, kc, vc = _chunk_inputs(chunk, q, k, v, shared_k, shared_v, dtype)
        if reuse == "v" and vc._base is not None:
            vc = vc.clone()  # a view of the rows about to be overwritten
        scores = _chunk_scores(chunk, qc, kc, scaling, bias)
        probs = torch.exp2(scores.sub_(lse), out=scores)  # (B, h, n, Q, W + G)
        d_out_c = chunk.queries.read(_heads(grad_out, heads)).to(dtype).contiguous()  # (B, h, n, Q, D)
        if reuse == "grad_out" and d_out_c._base is not None:
            d_out_c = d_out_c.clone()
        d_v_c = torch.matmul(probs.transpose(-1, -2), d_out_c)  # (B, h, n, W + G, D)
        d_scores = torch.matmul(d_out_c, vc.transpose(-1, -2)).mul_(probs)  # P dP (B, h, n, Q, W + G)
        row = d_scores.sum(dim=-1, keepdim=True)  # sum_w P dP = sum_d dO O (B, h, n, Q, 1)
        d_scores = d_scores.addcmul_(probs, row, value=-1.0)  # dS = P (dP - row)
        if d_bias is not None:
            part = _part(d_bias, heads, chunk.blocks)
            part.add_(_sum_to(d_scores, part.shape))
        d_q_c = torch.matmul(d_scores, kc).mul_(scaling)  # (B, h, n, Q, D)
        d_k_c = torch.matmul(d_scores.transpose(-1, -2), qc).mul_(scaling)  # (B, h, n, W + G, D)
        chunk.queries.add(_heads(dq, heads), d_q_c)
        chunk.keys.add(_heads(dk, heads), d_k_c[:, :, :, :own])
        if dv is not None:
            if reuse is not None:
                chunk.keys.set(_heads(dv, heads), d_v_c[:, :, :, :own])
            else:
                chunk.keys.add(_heads(dv, heads), d_v_c[:, :, :, :own])
        if shared is not None:
            _heads(d_shared_k, heads).add_(d_k_c[:, :, :, own:].sum(dim=2))
            _heads(d_shared_v, heads).add_(d_v_c[:, :, :, own:].sum(dim=2))


def plan_blocks(q, k, q_index, k_index, keep, shared_keep=None, shared_keys=0, chunk_blocks=None) -> list[_Chunk]:
    """The chunks of :func:`blocks_forward` / :func:`blocks_backward` for q (B, H, Lq, D) and k (B, H, Lk, D) with
    the arguments of :func:`gathered_block_attention`."""
    width = k_index.shape[-1] + shared_keys
    return _plan(q_index, k_index, keep, shared_keep, q.shape[2], k.shape[2], q.shape[1], width, chunk_blocks)


class GatheredBlockAttention(torch.autograd.Function):
    """Autograd Function of :func:`gathered_block_attention` (see there); inputs in the order of ``forward``."""

    @staticmethod
    def forward(ctx, q, k, v, bias, shared_k, shared_v, q_index, k_index, keep, shared_keep, scaling, chunk_blocks):
        shared_keys = 0 if shared_k is None else shared_k.shape[2]
        chunks = plan_blocks(q, k, q_index, k_index, keep, shared_keep, shared_keys, chunk_blocks)
        out, lse_all = blocks_forward(q, k, v, chunks, scaling, bias, shared_k, shared_v)
        ctx.chunks, ctx.scaling = chunks, scaling
        # Not the output: its row terms sum_d dO O = sum_w P dP come from the chunk (the caller's layer frees O).
        ctx.save_for_backward(q, k, v, bias, shared_k, shared_v, lse_all)
        return out.to(q.dtype)

    @staticmethod
    @once_differentiable  # the backward is not itself differentiable: a double backward raises
    def backward(ctx, grad_out):
        q, k, v, bias, shared_k, shared_v, lse_all = ctx.saved_tensors
        dtype = lse_all.dtype
        dq, dk, dv = (torch.zeros_like(x, dtype=dtype) for x in (q, k, v))
        d_bias = shared = None
        if bias is not None and ctx.needs_input_grad[3]:
            d_bias = torch.zeros(bias.shape, dtype=dtype, device=bias.device)
        if shared_k is not None:
            d_shared = torch.zeros_like(shared_k, dtype=dtype), torch.zeros_like(shared_v, dtype=dtype)
            shared = (shared_k, shared_v, *d_shared)
        blocks_backward(q, k, v, ctx.chunks, lse_all, grad_out, ctx.scaling, (dq, dk, dv, d_bias), bias, shared)
        d_shared_k = d_shared_v = None
        if shared is not None:
            d_shared_k, d_shared_v = shared[2].to(shared_k.dtype), shared[3].to(shared_v.dtype)
        d_bias = None if d_bias is None else d_bias.to(bias.dtype)
        grads = (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), d_bias, d_shared_k, d_shared_v)
        return grads + (None,) * 6


def gathered_block_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_index: torch.Tensor,
    k_index: torch.Tensor,
    keep: torch.Tensor,
    scaling: float,
    bias: torch.Tensor | None = None,
    shared: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    chunk_blocks: int | None = None,
) -> torch.Tensor:
    """Softmax attention of each block's queries over its own keys (and the shared keys), fused.

    Args:
        q: (B, H, Lq, D) queries; k, v: (B, H, Lk, D) keys and values.
        q_index: (N, Q) or (B, H, N, Q) long, the queries of each block (``Lq``: an empty slot).
        k_index: (N, W) or (B, H, N, W) long, the keys each block may see (``Lk``: an empty slot).
        keep: bool broadcastable to (B, H, N, Q, W): which of its keys each query may see.
        scaling: factor on q.k.
        bias: additive logits broadcastable to (B, H, N, Q, W + G) (the shared keys last), or None; it gets a
            gradient when it requires one.
        shared: (keys (B, H, G, D), values (B, H, G, D), keep broadcastable to (B, H, N, Q, G)): keys every
            block sees after its own, or None.
        chunk_blocks: blocks per chunk (None: about ``SCORE_BUDGET`` scores per chunk); changes the speed and
            the peak memory, not the result.

    Returns:
        (B, H, Lq, D): softmax(q k^T * scaling + bias, masked) v for every query held by a block, in sequence
        order; zeros for queries with nothing to attend and for queries in no block.
    """
    shared_k, shared_v, shared_keep = shared if shared is not None else (None, None, None)
    return GatheredBlockAttention.apply(
        q, k, v, bias, shared_k, shared_v, q_index, k_index, keep, shared_keep, scaling, chunk_blocks
    )
