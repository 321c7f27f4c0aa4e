"""Pattern machinery of the fixed-pattern entries (``sparse_strided``, ``sparse_fixed``, ``longformer``,
``etc``, ``bigbird``).

A :class:`SparsePattern` puts the non-global queries into groups (usually blocks of consecutive tokens) and
lists :class:`KeySet` s, the keys each group may see (its window, strided or random keys, the global keys).
:func:`sparse_attention` scores every key set in a compact (group, query, key) layout, concatenates them and
takes one softmax per query, so the result is dense softmax attention under the union of the key sets as long
as they are disjoint (they are by construction). Global rows (queries that see every key) are computed apart, O(G L).

Without dropout and returned weights, eager calls go through the fused, chunked autograd Function of
``_fused_patterns`` (memory O(L) beyond q, k, v: no blocked score tensor kept for backward); ``fused = False`` on
an entry keeps the path below for every call.

An additive bias is read at the (query, key) pairs each key set scores. The dense patterns the tests
compare with are written from the definitions (:func:`window_mask` here, ``_positions.with_prefix``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._masks import bias_at, key_keep_rows, masked_softmax
from ._positions import neighbour_positions, positions_after_prefix, shift_body
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities

# ----------------------------------------------------------------------------------------------------------
# pattern machinery
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeySet:
    """Keys that each query group of a :class:`SparsePattern` may see.

    Positions index the sequence, prefix tokens included; a key position outside [0, length) is absent.

    Attributes:
        keys: (G, K) long; (1, K) when every group sees the same keys; (H, G, K) when heads differ (BigBird's
            random blocks).
        keep: bool broadcastable to (G, Q, K), or to (H, G, Q, K) with per-head keys: which query of the group
            sees which of the keys.
        transposed: the groups are the *columns* of the pattern's query groups (keys (Q, K), keep
            (Q, G, K)): the Sparse Transformer's strided keys, shared by the queries of one residue.
    """

    keys: torch.Tensor
    keep: torch.Tensor
    transposed: bool = False

    @property
    def per_head(self) -> bool:
        return self.keys.dim() == 3


@dataclass(frozen=True)
class SparsePattern:
    """A fixed attention pattern over one sequence.

    Attributes:
        queries: (G, Q) long, every non-prefix position exactly once, in groups; positions >= length are
            padding slots (their output is dropped).
        key_sets: what each group sees; disjoint, so that no (query, key) pair is counted twice.
        global_rows: (R,) long, the global queries: they attend to every key (only earlier ones when causal)
            and their rows in ``key_sets`` are empty.
        causal: whether the global rows are causal.
    """

    queries: torch.Tensor
    key_sets: list[KeySet]
    global_rows: torch.Tensor
    causal: bool

    def layout(self, key_set: KeySet) -> torch.Tensor:
        """The query positions in the layout of ``key_set``'s keep mask: (G, Q), or (Q, G) if transposed."""
        return self.queries.t() if key_set.transposed else self.queries


def _lookup(flags: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """flags (L,) at ``positions``; positions outside [0, L) read False."""
    length = flags.shape[0]
    inside = (positions >= 0) & (positions < length)
    return flags[positions.clamp(0, max(length - 1, 0))] & inside if length else inside


def make_pattern(
    queries: torch.Tensor, key_sets: list[KeySet], global_positions: torch.Tensor, length: int, causal: bool
) -> SparsePattern:
    """A pattern over ``length`` tokens where the tokens at ``global_positions`` (R,) (distinct, sorted) attend
    to every key and every query attends to them (causal: only earlier ones). Global pairs leave ``key_sets``
    (no double counting) and two pieces are added: a key set of the global keys, and the global rows.

    The positions are given, not found (no ``nonzero``), so that a compiled graph has no data-dependent shape."""
    is_global = torch.zeros(length, dtype=torch.bool, device=queries.device).index_fill(0, global_positions, True)
    cleaned = []
    for key_set in (ks for ks in key_sets if ks.keys.shape[-1]):  # key sets with no key (r = 0) drop out
        layout = queries.t() if key_set.transposed else queries
        local_query = ~_lookup(is_global, layout)[..., :, None]  # (G, Q, 1)
        local_key = ~_lookup(is_global, key_set.keys)[..., None, :]  # ([H,] G, 1, K)
        cleaned.append(KeySet(key_set.keys, key_set.keep & local_query & local_key, key_set.transposed))
    if global_positions.numel():
        keep = ~_lookup(is_global, queries)[:, :, None]  # (G, Q, 1): global rows are computed apart
        if causal:
            keep = keep & (global_positions[None, None, :] <= queries[:, :, None])  # (G, Q, R)
        cleaned.append(KeySet(global_positions[None], keep))
    return SparsePattern(queries, cleaned, global_positions, causal)


def _gather_rows(x: torch.Tensor, index: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of x (B, H, L, D) at ``index`` ((G, S) or (H, G, S), in range) -> (B, H, G, S, D)."""
    batch, _, _, dim = x.shape
    if index.dim() == 2 and batch == 1 and x.transpose(1, 2).is_contiguous():
        # A layer's projections give (1, L, H, D) storage seen as (1, H, L, D): gathering whole (H, D) rows along
        # the first dimension is a row copy each, several times faster than index_select along the third.
        rows = x[0].transpose(0, 1).index_select(0, index.reshape(-1))  # (G*S, H, D)
        return rows.view(*index.shape, heads, dim).permute(2, 0, 1, 3)[None]  # (1, H, G, S, D)
    if index.dim() == 2:
        return x.index_select(2, index.reshape(-1)).view(batch, heads, *index.shape, dim)
    head = torch.arange(heads, device=index.device)[:, None, None]  # (H, 1, 1)
    if batch == 1 and (x.is_contiguous() or x.transpose(1, 2).is_contiguous()):
        # One sequence: the (head, position) rows as one table, gathered along its first dimension (fast).
        if x.is_contiguous():
            table, flat = x.view(heads * x.shape[2], dim), head * x.shape[2] + index  # rows (h, l)
        else:
            table, flat = x.transpose(1, 2).reshape(x.shape[2] * heads, dim), index * heads + head  # rows (l, h)
        return table.index_select(0, flat.reshape(-1)).view(1, heads, *index.shape[1:], dim)
    return x[:, head, index]  # (B, H, G, S, D)


def _group_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (B, H, G, Q, X) @ b (B, H, G or 1, X, Y) -> (B, H, G, Q, Y); keys shared by every group (G = 1 in b)
    are multiplied once for all queries instead of being copied per group by broadcasting."""
    if b.shape[2] == 1 and a.shape[2] != 1:
        batch, heads, groups, per_group, inner = a.shape
        flat = torch.matmul(a.reshape(batch, heads, 1, groups * per_group, inner), b)  # (B, H, 1, G*Q, Y)
        return flat.view(batch, heads, groups, per_group, b.shape[-1])
    return torch.matmul(a, b)


def _key_set_scores(
    q_groups: torch.Tensor,
    k: torch.Tensor,
    key_set: KeySet,
    rows: torch.Tensor,
    key_keep: torch.Tensor | None,
    bias: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores of one key set in the (B, H, G, Q, K) layout of the query groups (masked entries at the lowest
    finite value), whether each query kept any key (broadcastable to (B, H, G, Q)), the key positions (clamped
    in range) and the gathered keys ((B, H, G or 1, K, D) in the key set's own layout; (B, H, Q, K, D) when
    transposed). ``rows`` are the query positions in the key set's own layout ((G, Q), or (Q, G) if transposed)."""
    length = k.shape[2]
    present = (key_set.keys >= 0) & (key_set.keys < length)  # ([H,] G, K)
    index = key_set.keys.clamp(0, length - 1)
    keep = key_set.keep & present[..., None, :]  # ([H,] G, Q, K) in the key set's own layout
    keep = keep[None] if key_set.per_head else keep[None, None]  # (1, H or 1, G, Q, K)
    if key_keep is not None:
        padding = key_keep[:, index]  # (B, [H,] G, K)
        keep = keep & (padding[:, :, :, None] if key_set.per_head else padding[:, None, :, None])
    queries = q_groups.transpose(2, 3) if key_set.transposed else q_groups  # (B, H, G', Q', D)
    keys = _gather_rows(k, index, k.shape[1])  # (B, H, G', K, D)
    scores = _group_matmul(queries, keys.transpose(-1, -2))  # (B, H, G', Q', K)
    if bias is not None:
        scores = scores + _key_set_bias(bias, key_set, rows, index, k.shape[1]).to(scores.dtype)
    scores = scores.masked_fill_(~keep, torch.finfo(scores.dtype).min)  # fresh: neither matmul nor add saves it
    any_key = keep.any(dim=-1)  # (B or 1, H or 1, G', Q')
    if key_set.transposed:
        scores, any_key = scores.transpose(2, 3), any_key.transpose(-1, -2)
    return scores, any_key, index, keys


def _key_set_bias(
    bias: torch.Tensor, key_set: KeySet, rows: torch.Tensor, index: torch.Tensor, heads: int
) -> torch.Tensor:
    """The bias (B', H', L, L) of a key set's pairs, (B', H' or H, G', Q', K) like its scores."""
    if not key_set.per_head:
        return bias_at(bias, rows[:, :, None], index[:, None, :])  # (G', Q', 1) x (G' or 1, 1, K)
    head = torch.arange(heads, device=index.device)[:, None, None, None]  # (H, 1, 1, 1)
    bias = bias.expand(bias.shape[0], heads, *bias.shape[2:])
    rows = rows.clamp(0, bias.shape[2] - 1)[None, :, :, None]  # (1, G, Q, 1)
    return bias[:, head, rows, index.clamp(0, bias.shape[3] - 1)[:, :, None, :]]  # (B', H, G, Q, K)


def _dense_weights(
    pattern: SparsePattern, probs: list[torch.Tensor], indices: list[torch.Tensor], slots: int, length: int
) -> torch.Tensor:
    """(B, H, slots, L) dense probabilities of the query groups, scattered from each key set's (B, H, G, Q, K)
    probabilities (built only for ``output_weights``: the one (L x L) tensor)."""
    batch, heads = probs[0].shape[:2]
    dense = probs[0].new_zeros(batch, heads, slots * length)
    rows = pattern.queries[:, :, None] * length  # (G, Q, 1)
    for key_set, chunk, index in zip(pattern.key_sets, probs, indices):
        if key_set.transposed:
            index = index[None]  # (1, Q, K): the keys of the query's column
        elif key_set.per_head:
            index = index[:, :, None]  # (H, G, 1, K)
        else:
            index = index[:, None]  # (G, 1, K)
        where = (rows + index).expand(chunk.shape[1:]).reshape(heads, -1)  # absent keys add a zero
        dense = dense.scatter_add(2, where[None].expand(batch, -1, -1), chunk.reshape(batch, heads, -1))
    return dense.view(batch, heads, slots, length)


def sparse_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: SparsePattern, call: AttentionCall, fused: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Softmax attention of q over k, v (all (B, H, L, D)) under ``pattern``, with the call's key padding, bias,
    scaling, dropout and weights request.

    With ``fused`` (the default) the call goes through ``_fused_patterns.fused_sparse_attention`` (chunked, keeps
    only q, k, v, the output and the log-sum-exp for backward) unless it asks for the weights, has dropout or is
    being compiled (the fused Function is eager only); those calls, and ``fused=False``, take the path below,
    autograd through the whole blocked score tensor.

    The key sets of the query groups are scored in (B, H, G, Q, K) layouts and share one softmax per query;
    the global rows get a dense softmax of their own. Padded keys are masked; a query with no key left gets
    zeros. The bias (B', H', L, L), broadcastable, is added to the logits of the pairs scored. Dropout acts on
    the probabilities. Returns the values (B, H, L, D) and, if asked, the dense (B, H, L, L) probabilities.
    """
    key_keep, bias, dropout = call.key_keep, call.bias, call.dropout
    if fused and not call.output_weights and dropout == 0.0 and not torch.compiler.is_compiling():
        from ._fused_patterns import fused_sparse_attention  # it builds on this module

        return fused_sparse_attention(q, k, v, pattern, key_keep, bias, call.scaling), None
    batch, heads, length, dim = q.shape
    q = q * call.scaling
    flat = pattern.queries.reshape(-1)  # (G*Q,)
    q_groups = q.index_select(2, flat.clamp(max=length - 1)).view(batch, heads, *pattern.queries.shape, dim)
    scored = [
        _key_set_scores(q_groups, k, key_set, pattern.layout(key_set), key_keep, bias) for key_set in pattern.key_sets
    ]
    scores = torch.cat([s for s, _, _, _ in scored], dim=-1) if len(scored) > 1 else scored[0][0]  # (B, H, G, Q, K)
    probs = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(v.dtype)
    any_key = functools.reduce(torch.logical_or, [a for _, a, _, _ in scored])  # (B or 1, H or 1, G, Q)
    probs = F.dropout(probs, p=dropout) if dropout > 0.0 else probs
    chunks = probs.split([s.shape[-1] for s, _, _, _ in scored], dim=-1)
    out = 0.0
    for key_set, chunk, (_, _, index, _) in zip(pattern.key_sets, chunks, scored):
        values = _gather_rows(v, index, heads)  # (B, H, G', K, D)
        if key_set.transposed:
            out = out + _group_matmul(chunk.transpose(2, 3), values).transpose(2, 3)  # (B, H, G, Q, D)
        else:
            out = out + _group_matmul(chunk, values)  # (B, H, G, Q, D)
    out = out * any_key[..., None]  # a query whose keys are all masked gets zeros (its softmax was uniform)
    slots = length + flat.numel()  # room for every real position and padding slot, without reading the indices
    values = q.new_zeros(batch, heads, slots, dim).index_copy(2, flat, out.flatten(2, 3).to(q.dtype))
    weights = None
    if call.output_weights:
        kept = [c * any_key[..., None] for c in chunks]
        weights = _dense_weights(pattern, kept, [index for _, _, index, _ in scored], slots, length)[:, :, :length]
    if pattern.global_rows.numel():
        rows = pattern.global_rows
        row_out, row_probs = _global_rows(q, k, v, rows, key_keep, pattern.causal, dropout, bias)
        values = values.index_copy(2, rows, row_out)
        weights = None if weights is None else weights.index_copy(2, rows, row_probs)
    return values[:, :, :length], weights


def _global_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rows: torch.Tensor,
    key_keep: torch.Tensor | None,
    causal: bool,
    dropout: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Global queries (rows (R,), q already scaled) attend to every key, only earlier ones when causal.
    Returns values (B, H, R, D) and probabilities (B, H, R, L)."""
    keep = key_keep_rows(key_keep)  # (B, 1, 1, L)
    if causal:
        earlier = torch.arange(k.shape[2], device=k.device)[None, :] <= rows[:, None]  # (R, L)
        keep = earlier if keep is None else keep & earlier
    scores = torch.matmul(q.index_select(2, rows), k.transpose(-1, -2))  # (B, H, R, L)
    if bias is not None:
        bias = bias_at(bias, rows[:, None], torch.arange(k.shape[2], device=k.device)[None, :])  # (B', H', R, L)
    probs = masked_softmax(scores, keep, bias=bias)
    probs = F.dropout(probs, p=dropout) if dropout > 0.0 else probs
    return torch.matmul(probs, v), probs


def pattern_counts(pattern: SparsePattern, length: int, heads: int) -> torch.Tensor:
    """(H, L, L) how many pieces of ``pattern`` keep each (query, key) pair, the global rows included: tests
    check that no pair is counted twice and that the union is the dense mask. Builds (L x L): tests only."""
    counts = torch.zeros(heads, length + 1, length + 1, dtype=torch.long)
    for key_set in pattern.key_sets:
        queries = pattern.layout(key_set).clamp(max=length).cpu()  # (G, Q)
        keys = torch.where((key_set.keys >= 0) & (key_set.keys < length), key_set.keys, length).cpu()
        keys = keys.expand(heads, *keys.shape[-2:])  # (H, G, K)
        shape = torch.broadcast_shapes(key_set.keep.shape[-3:], (*queries.shape, keys.shape[-1]))
        keep = key_set.keep.cpu().expand(heads, *shape)  # (H, G, Q, K)
        rows = queries[None, :, :, None].expand_as(keep)
        cols = keys[:, :, None, :].expand_as(keep)
        head = torch.arange(heads)[:, None, None, None].expand_as(keep)
        counts.index_put_((head[keep], rows[keep], cols[keep]), torch.tensor(1), accumulate=True)
    everything = torch.arange(length)
    for row in pattern.global_rows.tolist():
        seen = everything <= row if pattern.causal else torch.ones(length, dtype=torch.bool)
        counts[:, row, :length] += seen.long()
    return counts[:, :length, :length]


# ----------------------------------------------------------------------------------------------------------
# the shared core
# ----------------------------------------------------------------------------------------------------------


class SparsePatternAttention(AttentionCore):
    """Base of the fixed-pattern entries: self-attention under the pattern of :meth:`pattern`.

    Subclasses build the :class:`SparsePattern` for a length (and :meth:`dense_mask`, the same pattern written
    from its definition); this class runs :func:`sparse_attention` on it.
    """

    weights_are_copies = True  # the maps are assembled apart from the values
    fused = True  # False: every call takes the unfused autograd path of :func:`sparse_attention` (tests compare)

    def pattern(self, length: int, causal: bool, prefix_tokens: int, device) -> SparsePattern:
        """The pattern over ``length`` tokens, the first ``prefix_tokens`` of them global."""
        raise NotImplementedError

    def length_problems(
        self, q_len: int, kv_len: int, grid: tuple[int, int] | None = None, prefix_tokens: int = 0
    ) -> list[str]:
        problems = super().length_problems(q_len, kv_len, grid, prefix_tokens)
        if q_len != kv_len:
            problems.append(f"it attends within one sequence, so kv_len ({kv_len}) must equal q_len ({q_len})")
        return problems

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """``grid`` is not needed (the pattern is 1-D)."""
        length = q.shape[2]
        pattern = self.pattern(length, call.causal, min(call.prefix_tokens, length), q.device)
        values, weights = sparse_attention(q, k, v, pattern, call, fused=self.fused)
        return AttentionOutput(values, weights)


SPARSE_CAPABILITIES = Capabilities(
    padding_mask=True,
    causal=True,
    returns_weights=True,
    attention_bias=True,
    length_constraint="self-attention (kv_len == q_len); any length, padded internally to a multiple of the "
    "stride / block",
)


def window_pattern(
    length: int, prefix_tokens: int, window: int, dilation: int, num_global: int, causal: bool, device
) -> SparsePattern:
    """The pattern of a dilated sliding window of one-sided width ``window`` over the tokens after the prefix,
    with the prefix and the first ``num_global`` tokens after it global (``longformer`` and ``etc``)."""
    body = length - prefix_tokens
    block = max(window, 1)  # queries per block; radius 0 still needs one
    sub_blocks = -(-body // (block * dilation))  # blocks per subsequence
    # Subsequence s holds positions s, s + d, s + 2d, ...; t is the index within the subsequence.
    t_query = torch.arange(sub_blocks * block, device=device).view(sub_blocks, block)  # (N, w)
    t_key = neighbour_positions(sub_blocks, block, 1, 0 if causal else 1, device)  # (N, 2w or 3w)
    gap = t_query[:, :, None] - t_key[:, None, :]  # (N, w, W) distance within the subsequence
    keep = (gap <= window) & (gap >= (0 if causal else -window))  # (N, w, W)
    residue = torch.arange(dilation, device=device)[:, None, None]  # (d, 1, 1)
    queries = (residue + dilation * t_query[None]).flatten(0, 1)  # (d*N, w) body positions
    keys = torch.where(t_key[None] >= 0, residue + dilation * t_key[None], -1).flatten(0, 1)  # (d*N, W)
    keep = keep.repeat(dilation, 1, 1)  # (d*N, w, W)
    global_positions = torch.arange(min(length, prefix_tokens + num_global), device=device)
    key_set = KeySet(shift_body(keys, body, prefix_tokens), keep)
    return make_pattern(queries + prefix_tokens, [key_set], global_positions, length, causal)


def window_mask(
    length: int, prefix_tokens: int, window: int, dilation: int, num_global: int, causal: bool, device
) -> torch.Tensor:
    """The same pattern as :func:`window_pattern`, written from its definition: (1, 1, L, L) bool."""
    i, j = positions_after_prefix(length, prefix_tokens, device)
    gap = i - j
    keep = (gap.abs() <= window * dilation) & (gap % dilation == 0)
    is_global = torch.arange(length, device=device) < prefix_tokens + num_global
    keep = keep | is_global[:, None] | is_global[None, :]
    if causal:
        keep = keep & (gap >= 0)
    return keep[None, None]
