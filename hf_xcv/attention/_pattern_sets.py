"""The data of a fixed attention pattern (:class:`SparsePattern`, its :class:`KeySet` s) and the gathers and
products that score one key set, shared by the autograd path of ``_patterns`` and the fused path of
``_fused_patterns`` (both build on this module, neither on the other's internals).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._masks import bias_at


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
    key_sets = [ks for ks in key_sets if ks.keys.shape[-1]]  # key sets with no key (r = 0) drop out
    if not global_positions.numel():  # nothing to take out: keep masks stay as given (broadcast ones too)
        return SparsePattern(queries, key_sets, global_positions, causal)
    is_global = torch.zeros(length, dtype=torch.bool, device=queries.device).index_fill(0, global_positions, True)
    cleaned = []
    for key_set in key_sets:
        layout = queries.t() if key_set.transposed else queries
        local_query = ~_lookup(is_global, layout)[..., :, None]  # (G, Q, 1)
        local_key = ~_lookup(is_global, key_set.keys)[..., None, :]  # ([H,] G, 1, K)
        cleaned.append(KeySet(key_set.keys, key_set.keep & local_query & local_key, key_set.transposed))
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
