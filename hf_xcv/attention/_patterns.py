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

import torch
import torch.nn.functional as F

from ._fused_patterns import fused_sparse_attention
from ._masks import bias_at, key_keep_rows, masked_softmax
from ._pattern_sets import KeySet, SparsePattern, _gather_rows, _group_matmul, _key_set_scores, make_pattern
from ._positions import neighbour_positions, positions_after_prefix, shift_body
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities

# ----------------------------------------------------------------------------------------------------------
# pattern machinery
# ----------------------------------------------------------------------------------------------------------


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
    # None (default): the fused path on CPU tensors only (AttentionCore.use_fused); True: always; False: every call
    # takes the unfused autograd path of :func:`sparse_attention` (tests compare)
    fused: bool | None = None

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
        values, weights = sparse_attention(q, k, v, pattern, call, fused=self.use_fused(q))
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
