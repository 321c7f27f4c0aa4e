"""Fused attention over gathered groups of queries and keys, for the content-routed entries (lsh, routing,
sinkhorn): the memory of a fused kernel without a compiler.

Each group ``g`` of a (batch, head) holds the queries at ``q_idx[g]`` and the keys/values at ``k_idx[g]``; its
queries attend, in one softmax, to its keys only. The forward runs under no_grad a chunk of groups at a time
and keeps for backward only q, k, v, the index tensors, the key validity and the row log-sum-exp (lse); the
backward recomputes each chunk's probabilities ``P = exp(S - lse)`` and accumulates dq/dk/dv with ``index_add_``
(``Di = rowsum(P * dP)``, ``dS = P * (dP - Di + dlse)``). No whole-length gathered copy and no whole scores
tensor is ever alive. The chunk size (``chunk_elements``, scores per chunk) changes speed and memory, not results.

:func:`gathered_attention` serves ``lsh`` (groups = sorted chunks; it returns each round's values and lse, whose
gradient it takes, for the rounds' mix) and ``routing`` (groups = clusters; the caller averages them).
:func:`sorted_block_attention` serves ``sinkhorn``: the sorted slots are soft mixtures of blocks, rebuilt a slab
at a time, and the permutation gets its exact gradient. :func:`unit_distance` is routing's commitment loss
without kept unit vectors. Entries call the attention Functions only outside torch.compile, without dropout and
without returned weights; there they keep their plain autograd path.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ._masks import bias_per_head

# Scores (batch * heads * groups * queries * keys) computed at once: a few MiB per chunk.
CHUNK_ELEMENTS = 1 << 20
# Sinkhorn's sorted slots are mixed in slabs of at least 1 / SLABS of the slots or SLAB_ELEMENTS values (in backward
# four such tensors are alive): few slabs read the blocks few times (short sequences: one), many keep less alive.
SLABS, SLAB_ELEMENTS = 4, 1 << 20


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half precision, the dtype itself for float32/float64."""
    return torch.promote_types(dtype, torch.float32)


def _row_major(x: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, D) itself if its rows of D are laid out densely, (B, H, L) or (B, L, H) (a layer's projection
    seen per head), else a contiguous copy."""
    if x.is_contiguous() or x.transpose(1, 2).is_contiguous():
        return x
    return x.contiguous()


def _storage_rows(x: torch.Tensor) -> torch.Tensor:
    """The (B * H * L, D) view of a :func:`_row_major` tensor's storage, rows in memory order."""
    return (x if x.is_contiguous() else x.transpose(1, 2)).view(-1, x.shape[-1])


def _row_numbers(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows of :func:`_storage_rows` (x) that hold x[b, h, index[b, h, ...]]: (B * H * prod(rest),) long."""
    batch, heads = index.shape[:2]
    width = x.shape[-1]
    ones = [1] * (index.dim() - 2)
    b = torch.arange(batch, device=index.device).view(batch, 1, *ones) * (x.stride(0) // width)
    h = torch.arange(heads, device=index.device).view(1, heads, *ones) * (x.stride(1) // width)
    return (index * (x.stride(2) // width) + b + h).flatten()


def _rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x: (B, H, L, D) (:func:`_row_major`) at index (B, H, g, w) -> (B, H, g, w, D), one row copy each."""
    return _storage_rows(x).index_select(0, _row_numbers(x, index)).view(*index.shape, x.shape[-1])


def _flat_index(index: torch.Tensor, length: int) -> torch.Tensor:
    """Entries of a (B, H, length, ...) tensor's flattening at index (B, H, *rest) on dim 2: (B * H * prod(rest),)."""
    batch, heads = index.shape[:2]
    base = torch.arange(batch * heads, device=index.device).view(batch, heads, *([1] * (index.dim() - 2))) * length
    return (index + base).flatten()


class _Groups:
    """What defines the groups: indices, masks, bias and scaling, and the chunks of groups to run at once.

    q_idx: (B, H, G, wq); k_idx: (B, H, G, wk); key_ok: (B, Lk) bool or None (keys that may be attended);
    causal_offset: key j is seen by query i only if j <= i + offset (None: no causal mask); self_logit: the
    logit that replaces a query's score with its own position (None: none); scaling: factor on q.k (None: 1).
    """

    def __init__(self, q_idx, k_idx, key_ok, causal_offset, self_logit, scaling, chunk_elements):
        self.q_idx, self.k_idx, self.key_ok = q_idx, k_idx, key_ok
        self.causal_offset, self.self_logit, self.scaling = causal_offset, self_logit, scaling
        batch, heads, groups, wq = q_idx.shape
        per_group = batch * heads * wq * k_idx.shape[-1]
        self.step = max(1, chunk_elements // max(per_group, 1))
        self.groups = groups

    def chunks(self) -> list[tuple[int, int]]:
        """(start, stop) of each chunk of groups."""
        return [(start, min(start + self.step, self.groups)) for start in range(0, self.groups, self.step)]

    def logits(self, q, k, bias, start, stop):
        """Scores of groups start..stop: (S (B, H, g, wq, wk) float32+, keep or None, is_self or None, qi, ki)."""
        qi, ki = self.q_idx[:, :, start:stop], self.k_idx[:, :, start:stop]
        scores = torch.matmul(_rows(q, qi), _rows(k, ki).transpose(-1, -2))
        scores = scores.to(_acc_dtype(scores.dtype))
        if self.scaling is not None:
            scores.mul_(self.scaling)
        if bias is not None:
            scores += bias_per_head(bias, qi.unsqueeze(-1), ki.unsqueeze(-2)).to(scores.dtype)
        is_self = None
        if self.self_logit is not None:
            is_self = ki.unsqueeze(-2) == qi.unsqueeze(-1)  # (B, H, g, wq, wk)
            scores.masked_fill_(is_self, self.self_logit)
        keep = None
        if self.key_ok is not None:
            b = torch.arange(ki.shape[0], device=ki.device).view(-1, 1, 1, 1)
            keep = self.key_ok[b, ki].unsqueeze(-2)  # (B, H, g, 1, wk)
        if self.causal_offset is not None:
            seen = ki.unsqueeze(-2) <= qi.unsqueeze(-1) + self.causal_offset  # (B, H, g, wq, wk)
            keep = seen if keep is None else keep & seen
        return scores, keep, is_self, qi, ki


class _GatheredAttention(torch.autograd.Function):
    """(out (B, H, G, wq, D), lse (B, H, G, wq), served (B, H, G, wq) bool) of :func:`gathered_attention`."""

    @staticmethod
    def forward(ctx, q, k, v, bias, groups):
        q, k, v = _row_major(q), _row_major(k), _row_major(v)
        batch, heads, num_groups, wq = groups.q_idx.shape
        acc = _acc_dtype(q.dtype)
        out = q.new_empty(batch, heads, num_groups, wq, v.shape[-1])
        lse = torch.empty(batch, heads, num_groups, wq, dtype=acc, device=q.device)
        served = torch.ones(batch, heads, num_groups, wq, dtype=torch.bool, device=q.device)
        with torch.no_grad():
            for start, stop in groups.chunks():
                scores, keep, _, _, ki = groups.logits(q, k, bias, start, stop)
                row_served = None if keep is None else keep.any(-1)  # (B, H, g, wq) or (B, H, g, 1)
                probs, lse[:, :, start:stop] = _softmax_rows(scores, keep, row_served)
                if keep is not None:
                    served[:, :, start:stop] = row_served
                torch.matmul(probs.to(v.dtype), _rows(v, ki), out=out[:, :, start:stop])
        ctx.groups = groups
        ctx.save_for_backward(q, k, v, bias, lse)
        ctx.mark_non_differentiable(served)
        ctx.set_materialize_grads(False)  # an unused lse (one LSH round, routing) costs no pass in backward
        return out, lse, served

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_lse, _d_served):
        q, k, v, bias, lse = ctx.saved_tensors
        groups = ctx.groups
        if d_out is None:
            d_out = torch.zeros(*lse.shape, v.shape[-1], dtype=v.dtype, device=v.device)
        acc = _acc_dtype(q.dtype)
        batch, heads = q.shape[:2]
        # Gradients in the layout of q, k, v (a layer's (B, L, H, D) projections need no copy to flow back).
        dq, dk, dv = (torch.zeros_like(x, dtype=acc) for x in (q, k, v))
        dq_rows, dk_rows, dv_rows = _storage_rows(dq), _storage_rows(dk), _storage_rows(dv)
        d_bias = None
        if bias is not None and ctx.needs_input_grad[3]:
            d_bias = torch.zeros(batch, heads, *bias.shape[2:], dtype=acc, device=q.device)
        for start, stop in groups.chunks():
            scores, keep, is_self, qi, ki = groups.logits(q, k, bias, start, stop)
            if keep is not None:
                scores.masked_fill_(~keep, -torch.inf)
            # P = exp(S - lse), (B, H, g, wq, wk): masked scores (and rows with nothing to attend) give exp(-inf) = 0
            probs = scores.sub_(lse[:, :, start:stop].unsqueeze(-1)).exp_()
            grad_out = d_out[:, :, start:stop]  # (B, H, g, wq, D)
            values = _rows(v, ki)
            d_scores = torch.matmul(grad_out, values.transpose(-1, -2)).to(acc)  # dP
            d_scores -= (probs * d_scores).sum(-1, keepdim=True)  # dP - Di
            if d_lse is not None:
                d_scores += d_lse[:, :, start:stop].unsqueeze(-1).to(acc)
            d_scores.mul_(probs)  # dS
            if is_self is not None:
                d_scores.masked_fill_(is_self, 0.0)  # a constant logit
            if d_bias is not None:
                rows = qi.clamp(0, bias.shape[2] - 1).unsqueeze(-1) * bias.shape[3]
                flat = _flat_index(rows + ki.clamp(0, bias.shape[3] - 1).unsqueeze(-2), bias.shape[2] * bias.shape[3])
                d_bias.view(-1).index_add_(0, flat, d_scores.flatten())
            if groups.scaling is not None:
                d_scores.mul_(groups.scaling)
            d_scores = d_scores.to(q.dtype)
            d_q = torch.matmul(d_scores, _rows(k, ki)).flatten(0, -2)  # (B * H * g * wq, D)
            dq_rows.index_add_(0, _row_numbers(dq, qi), d_q.to(acc))
            d_k = torch.matmul(d_scores.transpose(-1, -2), _rows(q, qi)).flatten(0, -2)  # (B * H * g * wk, D)
            dk_rows.index_add_(0, _row_numbers(dk, ki), d_k.to(acc))
            d_v = torch.matmul(probs.to(v.dtype).transpose(-1, -2), grad_out).flatten(0, -2)
            dv_rows.index_add_(0, _row_numbers(dv, ki), d_v.to(acc))
        if d_bias is not None:
            reduce = [dim for dim in (0, 1) if bias.shape[dim] == 1]
            d_bias = (d_bias.sum(reduce, keepdim=True) if reduce else d_bias).to(bias.dtype)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), d_bias, None


def gathered_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_idx: torch.Tensor,
    k_idx: torch.Tensor,
    *,
    key_ok: torch.Tensor | None = None,
    causal_offset: int | None = None,
    self_logit: float | None = None,
    scaling: float | None = None,
    bias: torch.Tensor | None = None,
    chunk_elements: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Softmax attention of every group's queries over its own keys, fused (recomputed in backward).

    For group g of batch row b and head h: ``S = (q[q_idx] k[k_idx]^T) * scaling + bias[q_idx, k_idx]``
    (float32 or wider), a query's score with its own position set to ``self_logit``, keys with
    ``key_ok`` False or (``causal_offset``) beyond ``q_idx + causal_offset`` masked, ``out = softmax(S) v[k_idx]``.

    Args:
        q: (B, H, Lq, D); k, v: (B, H, Lk, D) (v may have another last size).
        q_idx: (B, H, G, wq) query positions of each group; k_idx: (B, H, G, wk) key positions.
        key_ok: (B, Lk) bool keys that may be attended, or None.
        bias: additive bias (B or 1, H or 1, Lq', Lk'), read as :func:`bias_per_head` does (differentiable).

    Returns:
        out (B, H, G, wq, D), zeros for a query with nothing to attend; lse (B, H, G, wq), the log-sum-exp of
        its kept scores (differentiable; the lowest finite value where nothing is attended); served
        (B, H, G, wq) bool, whether it had anything to attend.
    """
    chunk_elements = chunk_elements or CHUNK_ELEMENTS  # read on every call: tests shrink it
    groups = _Groups(q_idx, k_idx, key_ok, causal_offset, self_logit, scaling, chunk_elements)
    return _GatheredAttention.apply(q, k, v, bias, groups)


def _softmax_rows(
    scores: torch.Tensor, keep: torch.Tensor | None, served: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax of fresh scores (..., w) (overwritten), as :func:`masked_softmax` computes it to the bit,
    and the row log-sum-exp (...); a row with nothing kept gives zeros and the lowest finite lse. ``served``:
    ``keep.any(-1)``, when the caller has it at a lower cost (or masked the scores itself: ``keep`` None).

    The lse comes without a second pass of exp: the largest probability is exp(max - lse), at least 1 / w.
    """
    lowest = torch.finfo(scores.dtype).min
    if keep is not None:
        scores = scores.masked_fill_(~keep, lowest)
    probs = torch.softmax(scores, dim=-1)
    row_lse = scores.amax(-1).sub_(probs.amax(-1).log_())  # (...)
    if served is None and keep is not None:
        served = keep.any(-1)  # (...) or broadcastable to it
    if served is None or bool(served.all()):
        return probs, row_lse
    return probs.mul_(served.unsqueeze(-1)), row_lse.masked_fill_(~served, lowest)


class _SortedBlockAttention(torch.autograd.Function):
    """out (B, H, n, b, D) of :func:`sorted_block_attention`; the soft permutation gets its exact gradient.

    Two levels of chunks: the sorted slots are mixed a slab of ``slab`` slots at a time (a (slab, n) x (n, b * D)
    product reads every block once per slab, so slabs are made large), and attended ``step`` slots at a time.
    A short sequence, one chunk in all, keeps its probabilities for backward instead. The scores of a query are
    two (B, H, g, b, b) halves, against the sorted slot and against the own block, under one softmax.
    """

    @staticmethod
    def forward(ctx, q_blocks, k_blocks, v_blocks, perm, keep_sorted, keep_local, scaling, step, slab):
        batch, heads, num_blocks, block, head_dim = q_blocks.shape
        acc = _acc_dtype(q_blocks.dtype)
        # One contiguous copy each (the only whole-length ones): the slabs mix whole blocks as (n, b * D) rows, and
        # the chunks of queries go to matmuls as they are.
        q_blocks, k_blocks, v_blocks = q_blocks.contiguous(), k_blocks.contiguous(), v_blocks.contiguous()
        out = q_blocks.new_empty(batch, heads, num_blocks, block, v_blocks.shape[-1])
        lse = torch.empty(batch, heads, num_blocks, block, dtype=acc, device=q_blocks.device)
        with torch.no_grad():
            for first in range(0, num_blocks, slab):
                mixed = _SortedSlab(k_blocks, v_blocks, perm, first, min(first + slab, num_blocks))
                for start in range(first, mixed.stop, step):
                    stop = min(start + step, mixed.stop)
                    sorted_k, sorted_v = mixed.sorted(start, stop)
                    k_c, v_c = k_blocks[:, :, start:stop], v_blocks[:, :, start:stop]
                    halves = _slot_scores(q_blocks[:, :, start:stop], sorted_k, k_c, scaling)
                    probs, lse[:, :, start:stop] = _joint_softmax(halves, keep_sorted, keep_local, start, stop)
                    values = torch.matmul(probs[0].to(v_blocks.dtype), sorted_v)
                    out[:, :, start:stop] = values.add_(torch.matmul(probs[1].to(v_blocks.dtype), v_c))
        ctx.scaling, ctx.step, ctx.slab = scaling, step, slab
        ctx.kept = (mixed, probs) if step >= num_blocks else None  # one chunk: nothing to recompute
        ctx.save_for_backward(q_blocks, k_blocks, v_blocks, perm, keep_sorted, keep_local, lse)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        q_blocks, k_blocks, v_blocks, perm, keep_sorted, keep_local, lse = ctx.saved_tensors
        batch, heads, num_blocks, block, head_dim = q_blocks.shape
        acc = _acc_dtype(q_blocks.dtype)
        dq = torch.empty(q_blocks.shape, dtype=acc, device=q_blocks.device)
        dk = torch.zeros(k_blocks.shape, dtype=acc, device=q_blocks.device)
        dv = torch.zeros(v_blocks.shape, dtype=acc, device=q_blocks.device)
        d_perm = torch.empty(perm.shape, dtype=acc, device=q_blocks.device)
        for first in range(0, num_blocks, ctx.slab):
            if ctx.kept is None:
                mixed = _SortedSlab(k_blocks, v_blocks, perm, first, min(first + ctx.slab, num_blocks))
            else:
                mixed = ctx.kept[0]
            d_sorted_k, d_sorted_v = torch.empty_like(mixed.k_sorted), torch.empty_like(mixed.v_sorted)
            for start in range(first, mixed.stop, ctx.step):
                stop = min(start + ctx.step, mixed.stop)
                q_c, k_c, v_c = q_blocks[:, :, start:stop], k_blocks[:, :, start:stop], v_blocks[:, :, start:stop]
                sorted_k, sorted_v = mixed.sorted(start, stop)
                if ctx.kept is None:  # P = exp(S - lse), masked keys (and rows with nothing to attend) exp(-inf) = 0
                    halves = _slot_scores(q_c, sorted_k, k_c, ctx.scaling)
                    _mask_halves(halves, keep_sorted, keep_local, start, stop, -torch.inf)
                    row_lse = lse[:, :, start:stop].unsqueeze(-1)
                    probs = tuple(half.sub_(row_lse).exp_() for half in halves)  # 2 x (B, H, g, b, b)
                else:
                    probs = ctx.kept[1]
                grad_out = d_out[:, :, start:stop]  # (B, H, g, b, D)
                d_scores = [torch.matmul(grad_out, x.transpose(-1, -2)).to(acc) for x in (sorted_v, v_c)]  # dP
                row_dot = (probs[0] * d_scores[0]).sum(-1, keepdim=True) + (probs[1] * d_scores[1]).sum(
                    -1, keepdim=True
                )
                d_sorted, d_local = (
                    (d.sub_(row_dot).mul_(p).mul_(ctx.scaling)).to(q_blocks.dtype) for d, p in zip(d_scores, probs)
                )  # dS * scaling
                p_sorted, p_local = (p.to(v_blocks.dtype) for p in probs)
                dq[:, :, start:stop] = torch.matmul(d_sorted, sorted_k).add_(torch.matmul(d_local, k_c))
                dk[:, :, start:stop] += torch.matmul(d_local.transpose(-1, -2), q_c)
                dv[:, :, start:stop] += torch.matmul(p_local.transpose(-1, -2), grad_out)
                d_sorted_k[:, :, start - first : stop - first] = torch.matmul(d_sorted.transpose(-1, -2), q_c)
                d_sorted_v[:, :, start - first : stop - first] = torch.matmul(p_sorted.transpose(-1, -2), grad_out)
            mixed.backward(d_sorted_k, d_sorted_v, d_perm, dk, dv)
        grads = dq.to(q_blocks.dtype), dk.to(k_blocks.dtype), dv.to(v_blocks.dtype), d_perm.to(perm.dtype)
        return (*grads, None, None, None, None, None)


def _slot_scores(q_slots, sorted_k, local_k, scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores (float32+) of queries (B, H, g, b, D) against the sorted keys and against the own block's keys
    (B, H, g, b, D each): two (B, H, g, b, b) halves of one softmax."""
    acc = _acc_dtype(q_slots.dtype)
    return tuple(torch.matmul(q_slots, k.transpose(-1, -2)).mul_(scaling).to(acc) for k in (sorted_k, local_k))


def _mask_halves(halves, keep_sorted, keep_local, start: int, stop: int, fill: float) -> None:
    """Set the scores of slots start..stop that may not be attended to ``fill``, in place."""
    halves[0].masked_fill_(~keep_sorted[:, :, start:stop].unsqueeze(-2), fill)
    halves[1].masked_fill_(~keep_local[:, :, start:stop], fill)


def _joint_softmax(halves, keep_sorted, keep_local, start: int, stop: int):
    """One masked softmax over both halves of the scores (overwritten): the two (B, H, g, b, b) halves of the
    probabilities and the row log-sum-exp (B, H, g, b); a query with nothing to attend gets zeros and the lowest
    finite lse."""
    lowest = torch.finfo(halves[0].dtype).min
    _mask_halves(halves, keep_sorted, keep_local, start, stop, lowest)
    row_max = torch.maximum(halves[0].amax(-1, keepdim=True), halves[1].amax(-1, keepdim=True))
    probs = tuple(half.sub_(row_max).exp_() for half in halves)
    total = probs[0].sum(-1, keepdim=True) + probs[1].sum(-1, keepdim=True)
    row_lse = (row_max + total.log()).squeeze(-1)
    served = keep_sorted[:, :, start:stop].any(-1, keepdim=True) | keep_local[:, :, start:stop].any(-1)
    scale = total.reciprocal_()
    if not bool(served.all()):
        scale.mul_(served.unsqueeze(-1))
        row_lse = row_lse.masked_fill(~served, lowest)
    return tuple(p.mul_(scale) for p in probs), row_lse


class _SortedSlab:
    """Sorted keys and values of slots first..stop: ``sum_j perm[i, j] * block_j``, (B, H, s, b, D) each."""

    def __init__(self, k_blocks, v_blocks, perm, first, stop):
        batch, heads, num_blocks, block, _ = k_blocks.shape
        self.first, self.stop = first, stop
        self.k_blocks, self.v_blocks = k_blocks, v_blocks
        self.perm = perm[:, :, first:stop].to(k_blocks.dtype)  # (B, H, s, n)
        shape = (batch, heads, stop - first, block, -1)
        self.k_sorted = torch.matmul(self.perm, k_blocks.flatten(3)).view(shape)
        self.v_sorted = torch.matmul(self.perm, v_blocks.flatten(3)).view(shape)

    def sorted(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The sorted keys and values (B, H, g, b, D) of slots start..stop."""
        part = slice(start - self.first, stop - self.first)
        return self.k_sorted[:, :, part], self.v_sorted[:, :, part]

    def backward(self, d_k_sorted, d_v_sorted, d_perm, dk, dv) -> None:
        """sorted = perm @ blocks: d perm = d sorted @ blocks^T (into d_perm's rows), d blocks += perm^T @ d sorted."""
        acc = dk.dtype
        d_k_flat, d_v_flat = d_k_sorted.flatten(3), d_v_sorted.flatten(3)  # (B, H, s, b * D)
        d_perm[:, :, self.first : self.stop] = torch.matmul(d_k_flat, self.k_blocks.flatten(3).transpose(-1, -2))
        d_perm[:, :, self.first : self.stop] += torch.matmul(d_v_flat, self.v_blocks.flatten(3).transpose(-1, -2))
        perm_t = self.perm.transpose(-1, -2).flatten(0, 1).to(acc)  # (B * H, n, s)
        num_blocks = dk.shape[2]
        dk.view(-1, num_blocks, d_k_flat.shape[-1]).baddbmm_(perm_t, d_k_flat.flatten(0, 1).to(acc))
        dv.view(-1, num_blocks, d_v_flat.shape[-1]).baddbmm_(perm_t, d_v_flat.flatten(0, 1).to(acc))


def sorted_block_attention(
    q_blocks: torch.Tensor,
    k_blocks: torch.Tensor,
    v_blocks: torch.Tensor,
    perm: torch.Tensor,
    keep_sorted: torch.Tensor,
    keep_local: torch.Tensor,
    scaling: float,
    chunk_elements: int | None = None,
) -> torch.Tensor:
    """Sinkhorn attention, fused: every query block attends in one softmax to its sorted slot
    ``sum_j perm[i, j] * block_j`` (keys and values) and to its own block; the sorted slots are rebuilt a slab
    of slots at a time (in backward too) and never stored whole, the scores a chunk of ``chunk_elements``.

    Args:
        q_blocks, k_blocks, v_blocks: (B, H, n, b, D); perm: (B, H, n, n) soft permutation (differentiable).
        keep_sorted: (B, H, n, b) bool, sorted keys that may be attended; keep_local: (B, 1 or H, n, b or 1, b)
            bool, own-block keys each query may attend.

    Returns:
        (B, H, n, b, D) values, zeros for a query with nothing to attend.
    """
    batch, heads, num_blocks, block, _ = q_blocks.shape
    chunk_elements = chunk_elements or CHUNK_ELEMENTS
    step = max(1, chunk_elements // (batch * heads * block * 2 * block))
    if batch * heads * num_blocks * block * 2 * block <= 2 * chunk_elements:
        step = num_blocks  # short: one chunk, its probabilities kept for backward (no recomputation)
    slab = max(step, -(-num_blocks // SLABS), SLAB_ELEMENTS // (batch * heads * block * q_blocks.shape[-1]))
    return _SortedBlockAttention.apply(q_blocks, k_blocks, v_blocks, perm, keep_sorted, keep_local, scaling, step, slab)


class _UnitDistance(torch.autograd.Function):
    """Per-point distance of :func:`unit_distance`; saves only x and the small centroid tensors."""

    @staticmethod
    def forward(ctx, x, centroids, nearest, step):
        distance = x.new_empty(x.shape[:-1])
        with torch.no_grad():
            for start in range(0, x.shape[2], step):
                unit, routed = _unit_and_centroid(x, centroids, nearest, start, start + step)
                distance[:, :, start : start + step] = (unit - routed).pow_(2).mean(-1)
        ctx.step = step
        ctx.save_for_backward(x, centroids, nearest)
        return distance

    @staticmethod
    @once_differentiable
    def backward(ctx, d_distance):
        x, centroids, nearest = ctx.saved_tensors
        dx = torch.empty_like(x)
        for start in range(0, x.shape[2], ctx.step):
            stop = start + ctx.step
            piece = x[:, :, start:stop]  # (B, H, l, D)
            norm = torch.linalg.vector_norm(piece, dim=-1, keepdim=True)
            unit, routed = _unit_and_centroid(x, centroids, nearest, start, stop)
            grad_unit = (unit - routed).mul_(d_distance[:, :, start:stop, None] * (2.0 / x.shape[-1]))
            # Through x / max(|x|, eps): the radial part is removed only where the norm is not clamped.
            radial = (unit * grad_unit).sum(-1, keepdim=True) * (norm >= NORM_EPS)
            dx[:, :, start:stop] = grad_unit.sub_(unit * radial).div_(norm.clamp_min(NORM_EPS))
        return dx, None, None, None


# F.normalize's default floor on the norm.
NORM_EPS = 1e-12


def _unit_and_centroid(x, centroids, nearest, start, stop):
    """Unit vectors of x[:, :, start:stop] (B, H, l, D) and their centroids ``centroids[h, nearest]``."""
    unit = torch.nn.functional.normalize(x[:, :, start:stop], dim=-1, eps=NORM_EPS)
    near = nearest[:, :, start:stop]  # (B, H, l)
    heads = torch.arange(centroids.shape[0], device=x.device).view(1, -1, 1)
    return unit, centroids.to(x.dtype)[heads, near]


def unit_distance(x: torch.Tensor, centroids: torch.Tensor, nearest: torch.Tensor) -> torch.Tensor:
    """``mean_d (normalize(x) - centroids[h, nearest])^2`` per point, differentiable in x, computed (and
    recomputed in backward) a slice of positions at a time so that no whole-length unit or difference tensor
    is kept.

    Args:
        x: (B, H, N, D) points; centroids: (H, C, D) (no gradient); nearest: (B, H, N) long centroid indices.

    Returns:
        (B, H, N) distances.
    """
    batch, heads, _, width = x.shape
    step = max(1, CHUNK_ELEMENTS // (batch * heads * width))
    return _UnitDistance.apply(x, centroids.detach().clone(), nearest, step)  # a copy: callers update theirs
