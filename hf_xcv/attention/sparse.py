"""``sparse_strided`` and ``sparse_fixed``: the Sparse Transformer's factorised patterns (Child et al. 2019),
and the pattern machinery the other fixed-pattern entries (``longformer``, ``etc``, ``bigbird``) share.

Both entries use the paper's *merged* form: one head attends to A1 ∪ A2 under a single softmax. With stride
(or block length) ``l``, for query position i and key position j:

* strided, causal (the paper): A1 = {j : 0 <= i - j < l} (the previous l tokens), A2 = {j <= i :
  (i - j) mod l = 0} (every l-th token before i).
* fixed, causal (the paper): A1 = {j <= i : floor(j / l) = floor(i / l)} (own block), A2 = {j <= i :
  j mod l >= l - c} (the last ``c`` "summary" cells of every block).
* The bidirectional forms (for encoders such as ViT or sequence classification) drop the ``j <= i`` half
  of every set: strided A1 = {|i - j| < l}, A2 = {(i - j) mod l = 0}; fixed A1 = own block, A2 = every
  summary cell of the sequence.

Positions count from the first token after the ``prefix_tokens`` (ViT's [CLS]), so with ``stride`` = grid
width A2 is "the same column". Prefix tokens are global: they attend to every key and every query attends
to them (causal: only to earlier ones). Lengths are padded to a multiple of ``l`` internally (the padding is
masked); the last, partial block has no summary cells if its tail positions lie past the end.

Cost: the strided pattern scores O(L (3 l + L / l)) pairs (2 l + L / l causal), the fixed one O(L (l + c L / l)),
so O(L sqrt(L)) for l ~ sqrt(L); no (L x L) tensor is built outside :meth:`dense_mask` and ``output_weights``.

Not implemented: the interleaved (A1 and A2 in alternate layers) and multi-head (different sets or
summary offsets per head) combinations of the paper, and its block-sparse GPU kernels.

The machinery (shared with ``longformer``, ``etc`` and ``bigbird``): a :class:`SparsePattern` puts the
non-global queries into groups (usually blocks of consecutive tokens) and lists :class:`KeySet` s, the keys
each group may see (its window, strided or random keys, the global keys). :func:`sparse_attention` scores
every key set in a compact (group, query, key) layout, concatenates them and takes one softmax per query, so
the result is dense softmax attention under the union of the key sets as long as they are disjoint (they are
by construction). Global rows (queries that see every key) are computed apart, O(G L).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .registry import AttentionCore, AttentionOutput, Capabilities, raise_problems, register_attention
from .utils import check_int, key_padding_mask, masked_softmax

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


def block_positions(num_blocks: int, block: int, device) -> torch.Tensor:
    """(N, b) positions 0 .. N*b - 1, one row per block."""
    return torch.arange(num_blocks * block, device=device).view(num_blocks, block)


def neighbour_positions(num_blocks: int, block: int, before: int, after: int, device) -> torch.Tensor:
    """(N, (before + 1 + after) * b): for block m, the positions of blocks m - before .. m + after
    (positions outside the sequence are left for the caller to mark absent)."""
    span = torch.arange(-before * block, (after + 1) * block, device=device)  # (W,)
    return torch.arange(num_blocks, device=device)[:, None] * block + span[None, :]


def shift_body(positions: torch.Tensor, body: int, prefix: int) -> torch.Tensor:
    """Positions counted after the prefix -> sequence positions; those outside [0, body) become -1 (absent)."""
    return torch.where((positions >= 0) & (positions < body), positions + prefix, -1)


def _lookup(flags: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """flags (L,) at ``positions``; positions outside [0, L) read False."""
    length = flags.shape[0]
    inside = (positions >= 0) & (positions < length)
    return flags[positions.clamp(0, max(length - 1, 0))] & inside if length else inside


def make_pattern(queries: torch.Tensor, key_sets: list[KeySet], is_global: torch.Tensor, causal: bool) -> SparsePattern:
    """A pattern where the tokens flagged by ``is_global`` (L,) attend to every key and every query attends to
    them (causal: only earlier ones). Global pairs leave ``key_sets`` (no double counting) and two pieces are
    added: a key set of the global keys, and the global rows."""
    global_positions = is_global.nonzero().flatten()  # (R,)
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
    if index.dim() == 2:
        return x.index_select(2, index.reshape(-1)).view(batch, heads, *index.shape, dim)
    head = torch.arange(heads, device=index.device)[:, None, None]  # (H, 1, 1)
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
    q_groups: torch.Tensor, k: torch.Tensor, key_set: KeySet, key_keep: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scores of one key set in the (B, H, G, Q, K) layout of the query groups (masked entries at the lowest
    finite value), whether each query kept any key (broadcastable to (B, H, G, Q)), and the key positions."""
    length = k.shape[2]
    present = (key_set.keys >= 0) & (key_set.keys < length)  # ([H,] G, K)
    index = key_set.keys.clamp(0, length - 1)
    keep = key_set.keep & present[..., None, :]  # ([H,] G, Q, K) in the key set's own layout
    keep = keep[None] if key_set.per_head else keep[None, None]  # (1, H or 1, G, Q, K)
    if key_keep is not None:
        padding = key_keep[:, index]  # (B, [H,] G, K)
        keep = keep & (padding[:, :, :, None] if key_set.per_head else padding[:, None, :, None])
    queries = q_groups.transpose(2, 3) if key_set.transposed else q_groups  # (B, H, G', Q', D)
    scores = _group_matmul(queries, _gather_rows(k, index, k.shape[1]).transpose(-1, -2))  # (B, H, G', Q', K)
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    any_key = keep.any(dim=-1)  # (B or 1, H or 1, G', Q')
    if key_set.transposed:
        scores, any_key = scores.transpose(2, 3), any_key.transpose(-1, -2)
    return scores, any_key, index


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
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pattern: SparsePattern,
    *,
    key_keep: torch.Tensor | None,
    scaling: float,
    dropout: float,
    output_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Softmax attention of q over k, v (all (B, H, L, D)) under ``pattern``.

    The key sets of the query groups are scored in (B, H, G, Q, K) layouts and share one softmax per query;
    the global rows get a dense softmax of their own. ``key_keep`` (B, L) masks padding keys; a query with no
    key left gets zeros. Dropout acts on the probabilities. Returns the values (B, H, L, D) and, if asked, the
    dense (B, H, L, L) probabilities.
    """
    batch, heads, length, dim = q.shape
    q = q * scaling
    flat = pattern.queries.reshape(-1)  # (G*Q,)
    q_groups = q.index_select(2, flat.clamp(max=length - 1)).view(batch, heads, *pattern.queries.shape, dim)
    scored = [_key_set_scores(q_groups, k, key_set, key_keep) for key_set in pattern.key_sets]
    scores = torch.cat([s for s, _, _ in scored], dim=-1) if len(scored) > 1 else scored[0][0]  # (B, H, G, Q, K)
    probs = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(v.dtype)
    any_key = functools.reduce(torch.logical_or, [a for _, a, _ in scored])  # (B or 1, H or 1, G, Q)
    probs = F.dropout(probs, p=dropout) if dropout > 0.0 else probs
    chunks = probs.split([s.shape[-1] for s, _, _ in scored], dim=-1)
    out = 0.0
    for key_set, chunk, (_, _, index) in zip(pattern.key_sets, chunks, scored):
        values = _gather_rows(v, index, heads)  # (B, H, G', K, D)
        if key_set.transposed:
            out = out + _group_matmul(chunk.transpose(2, 3), values).transpose(2, 3)  # (B, H, G, Q, D)
        else:
            out = out + _group_matmul(chunk, values)  # (B, H, G, Q, D)
    out = out * any_key[..., None]  # a query whose keys are all masked gets zeros (its softmax was uniform)
    slots = max(length, int(flat.max()) + 1 if flat.numel() else 0)  # real positions and padding slots
    values = q.new_zeros(batch, heads, slots, dim).index_copy(2, flat, out.flatten(2, 3).to(q.dtype))
    weights = None
    if output_weights:
        kept = [c * any_key[..., None] for c in chunks]
        weights = _dense_weights(pattern, kept, [index for _, _, index in scored], slots, length)[:, :, :length]
    if pattern.global_rows.numel():
        rows = pattern.global_rows
        row_out, row_probs = _global_rows(q, k, v, rows, key_keep, pattern.causal, dropout)
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Global queries (rows (R,), q already scaled) attend to every key, only earlier ones when causal.
    Returns values (B, H, R, D) and probabilities (B, H, R, L)."""
    keep = None if key_keep is None else key_keep[:, None, None, :]  # (B, 1, 1, L)
    if causal:
        earlier = torch.arange(k.shape[2], device=k.device)[None, :] <= rows[:, None]  # (R, L)
        keep = earlier if keep is None else keep & earlier
    scores = torch.matmul(q.index_select(2, rows), k.transpose(-1, -2))  # (B, H, R, L)
    probs = masked_softmax(scores, keep)
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
    from its definition); this class checks the call, extracts the key padding mask and runs
    :func:`sparse_attention`.
    """

    def pattern(self, length: int, causal: bool, prefix_tokens: int, device) -> SparsePattern:
        """The pattern over ``length`` tokens, the first ``prefix_tokens`` of them global."""
        raise NotImplementedError

    def length_problems(
        self, q_len: int, kv_len: int, grid: tuple[int, int] | None = None, prefix_tokens: int = 0
    ) -> list[str]:
        problems = super().length_problems(q_len, kv_len, grid, prefix_tokens)
        if q_len != kv_len:
            problems.append(f"it attends within one sequence, so kv_len ({kv_len}) must equal q_len ({q_len})")
        if prefix_tokens < 0:
            problems.append(f"prefix_tokens must be >= 0, got {prefix_tokens}")
        return problems

    def call_problems(
        self, q: torch.Tensor, k: torch.Tensor, causal: bool, state: Any, prefix_tokens: int
    ) -> list[str]:
        """Every reason a direct call cannot be served (the owning layer checks the same beforehand)."""
        problems = []
        if causal and not self.capabilities.causal:
            problems.append("it does not support causal (autoregressive) masking")
        if state is not None:
            problems.append("it carries no memory from a previous call (state must be None)")
        return problems + self.length_problems(q.shape[2], k.shape[2], None, prefix_tokens)

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
        """``grid`` is not needed (the pattern is 1-D); see :class:`AttentionCore` for the arguments."""
        raise_problems(self.name, self.call_problems(q, k, causal, state, prefix_tokens))
        batch, _, length, _ = q.shape
        key_keep = key_padding_mask(attention_mask, batch, length, self.name)  # (B, L) or None
        pattern = self.pattern(length, causal, min(prefix_tokens, length), q.device)
        training = (self if module is None else module).training
        values, weights = sparse_attention(
            q,
            k,
            v,
            pattern,
            key_keep=key_keep,
            scaling=q.shape[-1] ** -0.5 if scaling is None else scaling,
            dropout=dropout if training else 0.0,
            output_weights=output_weights,
        )
        return AttentionOutput(values, weights)


def positions_after_prefix(length: int, prefix_tokens: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, 1) query and (1, L) key positions counted from the first token after the prefix (for dense masks)."""
    position = torch.arange(length, device=device) - prefix_tokens
    return position[:, None], position[None, :]


def with_prefix(rule: torch.Tensor, prefix_tokens: int, causal: bool) -> torch.Tensor:
    """Complete ``rule`` ([H,] L, L), the pattern among tokens after the prefix, with global prefix tokens (and
    the causal half); returns (1, 1 or H, L, L) for dense masks."""
    length = rule.shape[-1]
    position = torch.arange(length, device=rule.device)
    is_prefix = position < prefix_tokens
    keep = rule | is_prefix[:, None] | is_prefix[None, :]
    if causal:
        keep = keep & (position[None, :] <= position[:, None])
    return keep.view(1, -1, length, length)


SPARSE_CAPABILITIES = Capabilities(
    padding_mask=True,
    causal=True,
    returns_weights=True,
    length_constraint="self-attention (kv_len == q_len); any length, padded internally to a multiple of the "
    "stride / block",
)


# ----------------------------------------------------------------------------------------------------------
# the Sparse Transformer entries
# ----------------------------------------------------------------------------------------------------------


@register_attention
class StridedSparseAttention(SparsePatternAttention):
    """Sparse Transformer, strided pattern, merged (A1 ∪ A2 in one head); see the module docstring.

    Args:
        stride: l, the local width and the stride (paper: l ~ sqrt(L); 128 suits sequences of ~16K tokens,
            the grid width suits images).

    Exact: ``stride >= length`` (A1 then covers every key, causal or not).
    """

    name = "sparse_strided"
    capabilities = SPARSE_CAPABILITIES
    small_kwargs = {"stride": 4}

    def __init__(self, num_heads: int, head_dim: int, stride: int = 128):
        super().__init__(num_heads, head_dim)
        self.stride = check_int(self.name, "stride", stride, 1)

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {"stride": max(1, length)}

    def pattern(self, length: int, causal: bool, prefix_tokens: int, device) -> SparsePattern:
        body, stride = length - prefix_tokens, self.stride
        blocks = -(-body // stride)
        queries = block_positions(blocks, stride, device)  # (N, l)
        # A1: the band |i - j| < l, from the block itself and its neighbour(s).
        keys = neighbour_positions(blocks, stride, 1, 0 if causal else 1, device)  # (N, 2l or 3l)
        distance = queries[:, :, None] - keys[:, None, :]  # (N, l, W) i - j
        band = (distance < stride) & (distance > (-1 if causal else -stride))
        # A2: the keys with the query's residue mod l, i.e. the query's column of the block layout (a
        # transposed key set); i itself is already in A1.
        residues = queries.t()  # (l, N): row r holds the positions r, r + l, ...
        strided = residues[:, :, None] != residues[:, None, :]  # (l, N, N)
        if causal:
            strided = strided & (residues[:, None, :] <= residues[:, :, None])
        key_sets = [
            KeySet(shift_body(keys, body, prefix_tokens), band),
            KeySet(shift_body(residues, body, prefix_tokens), strided, transposed=True),
        ]
        is_global = torch.arange(length, device=device) < prefix_tokens
        return make_pattern(queries + prefix_tokens, key_sets, is_global, causal)

    def dense_mask(self, q, k, causal=False, grid=None, prefix_tokens=0) -> torch.Tensor:
        i, j = positions_after_prefix(q.shape[2], prefix_tokens, q.device)
        gap = i - j
        if causal:
            rule = (gap >= 0) & ((gap < self.stride) | (gap % self.stride == 0))
        else:
            rule = (gap.abs() < self.stride) | (gap % self.stride == 0)
        return with_prefix(rule, prefix_tokens, causal)


@register_attention
class FixedSparseAttention(SparsePatternAttention):
    """Sparse Transformer, fixed pattern, merged (A1 ∪ A2 in one head); see the module docstring.

    Args:
        block_size: l, the block length (paper, EnWik8: 128).
        summary_cells: c, the cells at the end of every block that all later (or, bidirectional, all)
            queries see (paper, EnWik8: 32); 1 <= c <= l.

    Exact: ``block_size >= length`` (one block: full attention, lower-triangular when causal).
    """

    name = "sparse_fixed"
    capabilities = SPARSE_CAPABILITIES
    small_kwargs = {"block_size": 4, "summary_cells": 1}

    def __init__(self, num_heads: int, head_dim: int, block_size: int = 128, summary_cells: int = 32):
        super().__init__(num_heads, head_dim)
        self.block_size = check_int(self.name, "block_size", block_size, 1)
        self.summary_cells = check_int(self.name, "summary_cells", summary_cells, 1)
        if summary_cells > block_size:
            raise ValueError(
                f"attention_type={self.name!r}: summary_cells ({summary_cells}) must not exceed block_size "
                f"({block_size})"
            )

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {"block_size": max(1, length), "summary_cells": 1}

    def pattern(self, length: int, causal: bool, prefix_tokens: int, device) -> SparsePattern:
        body, block, cells = length - prefix_tokens, self.block_size, self.summary_cells
        blocks = -(-body // block)
        queries = block_positions(blocks, block, device)  # (N, l)
        # A1: the own block.
        own = torch.ones(1, block, block, dtype=torch.bool, device=device)
        if causal:
            own = torch.ones(block, block, dtype=torch.bool, device=device).tril()[None]
        # A2: the summary cells of the other blocks (those of the own block are in A1).
        summary = queries[:, block - cells :].reshape(1, -1)  # (1, N*c), seen by every block
        other = (summary[:, None, :] // block) != (queries[:, :, None] // block)  # (N, l, N*c)
        if causal:
            other = other & (summary[:, None, :] <= queries[:, :, None])
        key_sets = [
            KeySet(shift_body(queries, body, prefix_tokens), own),
            KeySet(shift_body(summary, body, prefix_tokens), other),
        ]
        is_global = torch.arange(length, device=device) < prefix_tokens
        return make_pattern(queries + prefix_tokens, key_sets, is_global, causal)

    def dense_mask(self, q, k, causal=False, grid=None, prefix_tokens=0) -> torch.Tensor:
        i, j = positions_after_prefix(q.shape[2], prefix_tokens, q.device)
        block = self.block_size
        rule = (i // block == j // block) | (j % block >= block - self.summary_cells)
        rule = rule & (i >= 0) & (j >= 0)  # prefix pairs come from with_prefix
        if causal:
            rule = rule & (j <= i)
        return with_prefix(rule, prefix_tokens, causal)
