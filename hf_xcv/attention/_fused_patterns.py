"""The fused path of the fixed-pattern entries: :func:`fused_sparse_attention`, the same softmax attention as
``_patterns.sparse_attention`` under a :class:`~._patterns.SparsePattern`, computed chunk by chunk by one
``torch.autograd.Function`` that keeps for backward only q, k, v, the output and small per-query log-sum-exp
tensors ((B, H, L) each, only where pieces are merged or rows are global).

Forward (under no_grad): the query groups are taken a chunk at a time (at most ``chunk_scores`` score elements);
each chunk gathers the keys and values its key sets name, scores them, takes one softmax per query over its key
sets and adds P V to the output. A transposed key set (the Sparse Transformer's strided keys) is a piece of its
own, chunked over its own layout, and merged with the others by the log-sum-exp of each piece (the flash merge:
out = sum_i exp(lse_i - lse) out_i). Global rows (queries that see every key) are chunks of rows over the whole
sequence. No whole-length gathered copy of k or v, and no blocked score tensor of the whole sequence, is alive.

Backward recomputes each chunk's probabilities P and, with Di = rowsum(dO * O): dS = P * (dP - Di),
dQ = dS K * scale, dK = dS^T (Q * scale), dV = P^T dO; the key and value gradients of gathered rows are added
back with ``index_add_``. An additive bias gets dS at the pairs it was read at (summed over the dimensions it
broadcasts along). Within a piece, P is ``torch.softmax`` of the recomputed scores (the forward's probabilities
bit for bit), times exp(lse_piece - lse) where pieces are merged, rather than exp(S - lse): on the CPU ``exp`` of
the masked entries (scores at the lowest finite value) runs some 20 times slower than softmax's kernel. Global
rows go backward by chunks of keys with P = exp(S - lse) on unmasked scores (masks applied to P), so that each
key's dk, dv rows are written once.

A query with nothing to attend gets a zero row of P: zeros out and zero gradient, as on the old path. Scores are
taken in the input dtype and softmaxed in at least float32 (dS too), as on the old path.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ._masks import bias_at
from ._pattern_sets import KeySet, SparsePattern, _gather_rows, _group_matmul, _key_set_scores

# Score elements per chunk: a speed / memory knob, not a result change. Short sequences take larger chunks (fewer
# steps of Python; their memory is small anyway): 2^32 / L, between 2^19 (2 MiB of float32, from L = 8192) and 2^22.
CHUNK_SCORES, CHUNK_SCORES_MAX, CHUNK_SPAN = 1 << 19, 1 << 22, 1 << 32


def chunk_scores_for(length: int) -> int:
    """The default score elements per chunk for sequences of ``length`` tokens."""
    return min(CHUNK_SCORES_MAX, max(CHUNK_SCORES, CHUNK_SPAN // max(1, length)))


def _pieces(pattern: SparsePattern) -> list[tuple[torch.Tensor, list[KeySet]]]:
    """The pattern's key sets as pieces (query layout (G', Q'), key sets in that layout): the key sets in the
    layout of the query groups form one piece; a transposed key set (keys (Q, K), keep (Q, G, K)) is a piece of
    its own over the transposed layout (Q, G), where it is an ordinary key set. Each piece has its own softmax;
    :class:`_PatternAttention` merges them by their log-sum-exp."""
    plain = [ks for ks in pattern.key_sets if not ks.transposed]
    pieces = [(pattern.queries, plain)] if plain else []
    for key_set in pattern.key_sets:
        if key_set.transposed:
            pieces.append((pattern.queries.t(), [KeySet(key_set.keys, key_set.keep)]))
    return pieces


def _slice_key_set(key_set: KeySet, start: int, stop: int) -> KeySet:
    """``key_set`` (not transposed) restricted to the query groups [start, stop): keys and keep sliced along
    their group dimension where it is not broadcast."""
    keys, keep = key_set.keys, key_set.keep
    group_dim = keys.dim() - 2  # keys (G, K) or (H, G, K)
    if keys.shape[group_dim] > 1:
        keys = keys.narrow(group_dim, start, stop - start)
    keep_dim = keep.dim() - 3  # keep (G, Q, K) or (H, G, Q, K)
    if keep.shape[keep_dim] > 1:
        keep = keep.narrow(keep_dim, start, stop - start)
    return KeySet(keys, keep)


def _apply_t(probs: torch.Tensor, x: torch.Tensor, groups: int) -> torch.Tensor:
    """probs^T x per key row: probs (B, H, c, Q, K), x (B, H, c, Q, X) -> (B, H, c', K, X), c' = ``groups``
    (1 for keys shared by every group: summed over the groups)."""
    if groups == 1 and probs.shape[2] != 1:
        batch, heads, chunk, per_group, width = probs.shape
        flat = probs.reshape(batch, heads, 1, chunk * per_group, width)  # (B, H, 1, c*Q, K)
        return torch.matmul(flat.transpose(-1, -2), x.reshape(batch, heads, 1, chunk * per_group, -1))
    return torch.matmul(probs.transpose(-1, -2), x)


def _add_rows(target: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> None:
    """target (B, H, L, X) += rows (B, H, *index.shape[-2:], X) at positions ``index`` ((c, K), in range), or
    per head with ``index`` (H, c, K)."""
    batch, heads, length, width = target.shape
    head = torch.arange(heads, device=index.device)[:, None, None]  # (1, H, 1)
    if index.dim() == 3 and target.is_contiguous():
        flat = index + head * length  # (H, c, K) rows of target seen as (B, H*L, X)
        target.view(batch, heads * length, width).index_add_(1, flat.reshape(-1), rows.reshape(batch, -1, width))
    elif index.dim() == 3:  # target has (B, L, H, X) storage (see _like): rows of it seen as (B, L*H, X)
        flat = index * heads + head  # (H, c, K)
        target.transpose(1, 2).view(batch, length * heads, width).index_add_(
            1, flat.reshape(-1), rows.reshape(batch, -1, width)
        )
    else:
        target.index_add_(2, index.reshape(-1), rows.reshape(batch, heads, -1, width))


def _add_bias_grad(
    grad: torch.Tensor, d_scores: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, per_head: bool
) -> None:
    """grad (B', H', Lq', Lk') += d_scores (B, H, c, Q, K) at query positions ``rows`` (c, Q) and key positions
    ``cols`` (broadcastable to (c, Q, K), or (H, c, Q, K) when ``per_head``), summed where the bias broadcasts."""
    if grad.shape[0] == 1:
        d_scores = d_scores.sum(0, keepdim=True)
    if grad.shape[1] == 1 and not per_head:  # per-head keys differ by head: their index keeps the heads apart
        d_scores = d_scores.sum(1, keepdim=True)
    batch, heads = d_scores.shape[:2]
    device = d_scores.device
    b = torch.arange(batch, device=device) if grad.shape[0] > 1 else torch.zeros(1, dtype=torch.long, device=device)
    h = torch.arange(heads, device=device) if grad.shape[1] > 1 else torch.zeros(1, dtype=torch.long, device=device)
    b, h = b.view(-1, 1, 1, 1, 1), h.view(1, -1, 1, 1, 1)
    rows = rows.clamp(0, grad.shape[2] - 1)[None, None, :, :, None]  # (1, 1, c, Q, 1)
    cols = cols.clamp(0, grad.shape[3] - 1)
    cols = cols[None] if per_head else cols[None, None]  # (1, H or 1, c, Q, K)
    grad.index_put_((b, h, rows, cols), d_scores.to(grad.dtype), accumulate=True)


class _Chunk:
    """Query groups [start, stop) of one piece (layout (G', Q'), key sets): their positions, scaled queries and,
    per key set, the masked scores, the gathered keys' positions and the gathered keys."""

    def __init__(self, q, k, piece, start: int, stop: int, key_keep, bias, scaling: float):
        layout, key_sets = piece
        length = q.shape[2]
        self.positions = layout[start:stop]  # (c, Q)
        self.index = self.positions.clamp(max=length - 1).reshape(-1)  # (c*Q,)
        self.slot = torch.where(self.positions < length, self.positions, length).reshape(-1)  # padding -> slot L
        self.valid = (self.positions < length)[..., None]  # (c, Q, 1): padding slots are dropped
        self.all_valid = bool(self.valid.all())  # eager only: skips a pass when the chunk has no padding slot
        q_rows = q.index_select(2, self.index) * scaling  # (B, H, c*Q, D)
        self.q = q_rows.view(*q.shape[:2], *self.positions.shape, q.shape[-1])  # (B, H, c, Q, D)
        self.key_sets = [_slice_key_set(ks, start, stop) for ks in key_sets]
        scored = [_key_set_scores(self.q, k, ks, self.positions, key_keep, bias) for ks in self.key_sets]
        self.widths = [s.shape[-1] for s, _, _, _ in scored]
        self.scores = [s for s, _, _, _ in scored]  # (B, H, c, Q, K) each
        self.any_key = scored[0][1]
        for _, anything, _, _ in scored[1:]:
            self.any_key = self.any_key | anything  # (B or 1, H or 1, c, Q)
        self.key_index = [index for _, _, index, _ in scored]
        self.keys = [keys for _, _, _, keys in scored]  # (B, H, c or 1, K, D)

    def probs(self, dtype: torch.dtype, with_lse: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The probabilities (B, H, c, Q, K total) in ``dtype`` (float32 or wider), zero rows for queries with no
        key, and, if asked, the log-sum-exp (B, H, c, Q) of the scores (-inf for a query with no key)."""
        scores = torch.cat(self.scores, dim=-1) if len(self.scores) > 1 else self.scores[0]
        self.scores = []  # no longer needed: let them go before the softmax
        scores = scores.to(dtype)
        probs = _softmax(scores, self.any_key, dtype)
        if not with_lse:
            return probs, None
        # The top probability is exp(max - lse): no exp of the masked entries (slow on the CPU, see above).
        lse = scores.amax(dim=-1) - probs.amax(dim=-1).log()
        return probs, lse.masked_fill(~self.any_key, float("-inf"))


def _softmax(scores: torch.Tensor, any_key: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Softmax over the last dimension of the masked ``scores`` in ``dtype``, rows where ``any_key`` (broadcastable
    to the rows) is False set to zero."""
    probs = torch.softmax(scores, dim=-1, dtype=dtype)
    if bool(any_key.all()):  # eager only (the fused path is not compiled): skip a pass when every row has a key
        return probs
    return probs.masked_fill_(~any_key[..., None], 0.0)


def _dense_row_chunk(q, k, rows: torch.Tensor, causal: bool, key_keep, bias, scaling: float):
    """Scaled queries (B, H, c, D) and masked scores (B, H, c, L) of the global rows ``rows`` (c,), with
    whether each row kept any key (broadcastable to (B, H, c))."""
    length = k.shape[2]
    q_rows = q.index_select(2, rows) * scaling  # (B, H, c, D)
    scores = torch.matmul(q_rows, k.transpose(-1, -2))  # (B, H, c, L)
    if bias is not None:
        scores = scores + bias_at(bias, rows[:, None], torch.arange(length, device=k.device)[None, :]).to(scores.dtype)
    keep = None if key_keep is None else key_keep[:, None, None, :]  # (B, 1, 1, L)
    if causal:
        earlier = torch.arange(length, device=k.device)[None, :] <= rows[:, None]  # (c, L)
        keep = earlier if keep is None else keep & earlier
    if keep is None:
        return q_rows, scores, torch.ones((), dtype=torch.bool, device=k.device)
    return q_rows, scores.masked_fill_(~keep, torch.finfo(scores.dtype).min), keep.any(dim=-1)


class _PatternAttention(torch.autograd.Function):
    """Softmax attention under a fixed pattern, fused: see the module docstring. ``forward(q, k, v, bias, pattern,
    key_keep, scaling, chunk_scores)`` -> values (B, H, L, D)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, pattern, key_keep, scaling, chunk_scores):
        batch, heads, length, dim = q.shape
        acc = torch.promote_types(q.dtype, torch.float32)
        pieces = _pieces(pattern)
        out = _like(q)
        # Log-sum-exp per position (slot L: padding slots): all pieces so far, and each piece's own.
        total = q.new_full((batch, heads, length + 1), float("-inf"), dtype=acc)
        own = [total.clone() for _ in pieces] if len(pieces) > 1 else []
        # Short sequences: while every chunk's probabilities together stay within one chunk's budget, the chunks
        # (their gathered keys) and probabilities are kept, and backward takes them instead of scoring again.
        kept, kept_scores = [], 0
        for number, piece in enumerate(pieces):
            for start, stop in _group_chunks(piece, batch * heads, chunk_scores):
                chunk = _Chunk(q, k, piece, start, stop, key_keep, bias, scaling)
                probs, lse = chunk.probs(acc, with_lse=len(pieces) > 1)
                kept_scores += probs.numel()
                kept = kept + [(chunk, probs)] if kept is not None and kept_scores <= chunk_scores else None
                values = _values(chunk, probs.to(v.dtype), v).flatten(2, 3)  # (B, H, c*Q, D)
                if lse is None:  # one piece: its softmax is the whole one
                    values = values if chunk.all_valid else values * chunk.valid.reshape(-1, 1)
                    out.index_add_(2, chunk.index, values)
                    continue
                lse = lse.expand(batch, heads, -1, -1).flatten(2, 3)  # (B, H, c*Q)
                own[number].index_copy_(2, chunk.slot, lse)
                _merge(out, total, chunk, values, lse, first=number == 0)
        if own:
            total = total.masked_fill(total == float("-inf"), float("inf"))  # no key anywhere: every P is zero
        rows = pattern.global_rows
        row_lse = q.new_empty(batch, heads, rows.shape[0], dtype=acc)  # (B, H, R)
        for start, stop in _row_chunks(rows.shape[0], batch * heads * length, chunk_scores):
            _, scores, anything = _dense_row_chunk(q, k, rows[start:stop], pattern.causal, key_keep, bias, scaling)
            scores = scores.to(acc)
            probs = _softmax(scores, anything, acc)  # (B, H, c, L)
            lse = scores.amax(dim=-1) - probs.amax(dim=-1).log()  # as in _Chunk.probs; +inf: no key, P = 0
            row_lse[:, :, start:stop] = lse.masked_fill(~anything, float("inf"))
            out.index_copy_(2, rows[start:stop], torch.matmul(probs.to(v.dtype), v))
        ctx.kept = kept
        ctx.save_for_backward(q, k, v, bias, key_keep, out, row_lse, total, *own)
        ctx.pattern, ctx.scaling, ctx.chunk_scores = pattern, scaling, chunk_scores
        return out

    @staticmethod
    @once_differentiable  # the backward is not itself differentiable: a double backward raises
    def backward(ctx, d_out):
        q, k, v, bias, key_keep, out, row_lse, total, *own = ctx.saved_tensors
        pattern, scaling = ctx.pattern, ctx.scaling
        batch, heads, length, _ = q.shape
        acc = torch.promote_types(q.dtype, torch.float32)
        dq, dk, dv = _like(q), _like(k), _like(v)
        d_bias = torch.zeros_like(bias) if bias is not None and ctx.needs_input_grad[3] else None
        di = (d_out.to(acc) * out.to(acc)).sum(-1)  # (B, H, L)
        kept = iter(ctx.kept) if ctx.kept is not None else None
        for number, piece in enumerate(_pieces(pattern)):
            for start, stop in _group_chunks(piece, batch * heads, ctx.chunk_scores):
                if kept is not None:
                    chunk, probs = next(kept)
                else:
                    chunk = _Chunk(q, k, piece, start, stop, key_keep, bias, scaling)
                    probs, _ = chunk.probs(acc)
                if own:  # this piece's share of each query's softmax: exp(own lse - total lse)
                    share = (own[number].index_select(2, chunk.slot) - total.index_select(2, chunk.slot)).exp_()
                    probs = probs.mul_(share.view(*share.shape[:2], *chunk.positions.shape, 1))
                grads = _chunk_grads(chunk, probs, v, di, d_out, d_bias, dk, dv)  # (B, H, c, Q, D)
                dq.index_add_(2, chunk.index, grads.flatten(2, 3) * scaling)
        if pattern.global_rows.numel():
            grads = (dq, dk, dv, d_bias)
            _global_rows_backward(
                q, k, v, d_out, di, row_lse, pattern, key_keep, bias, scaling, grads, ctx.chunk_scores
            )
        ctx.kept = None
        return dq, dk, dv, d_bias, None, None, None, None


def _global_rows_backward(q, k, v, d_out, di, row_lse, pattern, key_keep, bias, scaling, grads, chunk_scores):
    """Backward of the global rows (R,), by chunks of keys: P = exp(S - lse) (no masked entry is exponentiated:
    the masks are applied to P), and each key's dk, dv rows are written once. ``grads`` = (dq, dk, dv, d_bias or
    None) are added to; ``di`` (B, H, L) is rowsum(dO * O), ``row_lse`` (B, H, R) the rows' log-sum-exp."""
    dq, dk, dv, d_bias = grads
    rows, length = pattern.global_rows, k.shape[2]
    q_rows = q.index_select(2, rows) * scaling  # (B, H, R, D)
    d_rows = d_out.index_select(2, rows)  # (B, H, R, D)
    di_rows = di.index_select(2, rows)[..., None]  # (B, H, R, 1)
    dq_rows = torch.zeros_like(q_rows)
    step = max(1, chunk_scores // max(1, q.shape[0] * q.shape[1] * rows.shape[0]))
    for start in range(0, length, step):
        keys = torch.arange(start, min(start + step, length), device=k.device)  # (n,)
        k_part, v_part = k[:, :, start : start + step], v[:, :, start : start + step]  # (B, H, n, D)
        scores = torch.matmul(q_rows, k_part.transpose(-1, -2))  # (B, H, R, n)
        if bias is not None:
            scores = scores + bias_at(bias, rows[:, None], keys[None, :]).to(scores.dtype)
        probs = scores.to(row_lse.dtype).sub_(row_lse[..., None]).exp_()  # (B, H, R, n)
        keep = None if key_keep is None else key_keep[:, None, None, start : start + step]  # (B, 1, 1, n)
        if pattern.causal:
            earlier = keys[None, :] <= rows[:, None]  # (R, n)
            keep = earlier if keep is None else keep & earlier
        if keep is not None:
            probs = probs.masked_fill_(~keep, 0.0)
        d_scores = torch.matmul(d_rows, v_part.transpose(-1, -2)).to(probs.dtype).sub_(di_rows).mul_(probs)
        if d_bias is not None:
            _add_bias_grad(d_bias, d_scores[:, :, None], rows[None, :], keys[None, None, :], False)
        d_scores = d_scores.to(q.dtype)
        dv[:, :, start : start + step] += torch.matmul(probs.to(v.dtype).transpose(-1, -2), d_rows)
        dk[:, :, start : start + step] += torch.matmul(d_scores.transpose(-1, -2), q_rows)
        dq_rows += torch.matmul(d_scores, k_part)
    dq.index_add_(2, rows, dq_rows * scaling)


def _like(x: torch.Tensor) -> torch.Tensor:
    """Zeros shaped like x (B, H, L, D), with (B, L, H, D) storage when x has it (a layer's projections): the
    layer then merges the heads of the output, and the projections take the gradients, without a copy."""
    if x.transpose(1, 2).is_contiguous():
        return x.new_zeros(x.shape[0], x.shape[2], x.shape[1], x.shape[3]).transpose(1, 2)
    return x.new_zeros(x.shape)


def _merge(
    out: torch.Tensor, total: torch.Tensor, chunk: _Chunk, values: torch.Tensor, lse: torch.Tensor, first: bool
) -> None:
    """Fold one piece's chunk into the running output: out (B, H, L, D) and total (B, H, L + 1) log-sum-exp
    become those of the softmax over the pieces so far and this one (values (B, H, c*Q, D), lse (B, H, c*Q)).
    The ``first`` piece is copied (a position sees each piece's queries once)."""
    keep = chunk.valid.reshape(-1).nonzero().squeeze(1)  # real positions only (eager: data-dependent size)
    where, values, lse = chunk.slot[keep], values[:, :, keep], lse[:, :, keep]
    if first:
        out.index_copy_(2, where, values)
        total.index_copy_(2, where, lse)
        return
    before = total.index_select(2, where)  # (B, H, n)
    after = torch.logaddexp(before, lse)
    safe = after.masked_fill(after == float("-inf"), float("inf"))  # no key yet: both weights zero
    old_weight, new_weight = (before - safe).exp_()[..., None], (lse - safe).exp_()[..., None]
    merged = out.index_select(2, where) * old_weight.to(out.dtype) + values * new_weight.to(out.dtype)
    out.index_copy_(2, where, merged)
    total.index_copy_(2, where, after)


def _values(chunk: _Chunk, probs: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The chunk's output (B, H, c, Q, D): its probabilities split by key set, each times its gathered values."""
    out = None
    for part, index in zip(probs.split(chunk.widths, dim=-1), chunk.key_index):
        values = _group_matmul(part, _gather_rows(v, index, v.shape[1]))
        out = values if out is None else out + values
    return out


def _chunk_grads(chunk: _Chunk, probs, v, di, d_out, d_bias, dk, dv) -> torch.Tensor:
    """Backward of one chunk: adds its key and value gradients into dk, dv (B, H, L, D) and its bias gradient
    into ``d_bias``; returns dS K (B, H, c, Q, D), the query gradient before the scaling. ``di`` (B, H, L) is
    rowsum(dO * O)."""
    shape = chunk.q.shape
    d_rows = d_out.index_select(2, chunk.index).view(shape).to(v.dtype)  # (B, H, c, Q, D)
    d_i = di.index_select(2, chunk.index).view(shape[:-1])[..., None]  # (B, H, c, Q, 1)
    if not chunk.all_valid:  # padding slots read row L - 1: their gradient must be zero
        d_rows, d_i = d_rows * chunk.valid, d_i * chunk.valid
    grads = None
    parts = probs.split(chunk.widths, dim=-1)
    for key_set, part, index, keys in zip(chunk.key_sets, parts, chunk.key_index, chunk.keys):
        values = _gather_rows(v, index, v.shape[1])  # (B, H, c or 1, K, D)
        d_scores = _group_matmul(d_rows, values.transpose(-1, -2)).to(probs.dtype).sub_(d_i).mul_(part)  # P (dP - Di)
        if d_bias is not None:
            _add_bias_grad(d_bias, d_scores, chunk.positions, index[..., None, :], key_set.per_head)
        d_scores = d_scores.to(chunk.q.dtype)
        groups = values.shape[2]
        _add_rows(dv, index, _apply_t(part.to(v.dtype), d_rows, groups))
        _add_rows(dk, index, _apply_t(d_scores, chunk.q, groups))
        grad = _group_matmul(d_scores, keys)
        grads = grad if grads is None else grads + grad
    return grads


def _group_chunks(piece, batch_heads: int, chunk_scores: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of a piece's query groups with at most ``chunk_scores`` score elements each (one group
    at least)."""
    layout, key_sets = piece
    groups, per_group = layout.shape
    width = sum(ks.keys.shape[-1] for ks in key_sets)
    step = max(1, chunk_scores // max(1, batch_heads * per_group * width))
    step = -(-groups // -(-groups // step)) if groups else 1  # chunks of even sizes (no small last one)
    return [(start, min(start + step, groups)) for start in range(0, groups, step)]


def _row_chunks(rows: int, row_size: int, chunk_scores: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of global rows with at most ``chunk_scores`` scores each (one row at least)."""
    step = max(1, chunk_scores // max(1, row_size))
    return [(start, min(start + step, rows)) for start in range(0, rows, step)]


def fused_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pattern: SparsePattern,
    key_keep: torch.Tensor | None,
    bias: torch.Tensor | None,
    scaling: float,
    chunk_scores: int | None = None,
) -> torch.Tensor:
    """Softmax attention of q over k, v (all (B, H, L, D)) under ``pattern``, with key padding ``key_keep``
    (B, L) bool, an additive ``bias`` broadcastable to (B, H, L, L) and ``scaling`` on q.k; returns the values
    (B, H, L, D). Equal to ``_patterns.sparse_attention`` without dropout and weights; ``chunk_scores`` bounds the
    score elements alive at once (default: :func:`chunk_scores_for` the length)."""
    chunk_scores = chunk_scores_for(q.shape[2]) if chunk_scores is None else chunk_scores
    return _PatternAttention.apply(q, k, v, bias, pattern, key_keep, scaling, chunk_scores)
