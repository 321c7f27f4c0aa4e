"""``sparse_strided`` and ``sparse_fixed``: the Sparse Transformer's factorised patterns (Child et al. 2019).

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

An additive attention bias is added to the logits of the pairs the pattern keeps. The pattern machinery is
in ``_patterns``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..utils.checks import check_int
from ..utils.errors import UsageError
from ._patterns import SPARSE_CAPABILITIES, KeySet, SparsePattern, SparsePatternAttention, make_pattern
from ._positions import block_positions, neighbour_positions, positions_after_prefix, shift_body, with_prefix
from .registry import register_attention


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
        self.stride = check_int("stride", stride, 1, owner=self.owner)

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
        prefix = torch.arange(prefix_tokens, device=device)  # global
        return make_pattern(queries + prefix_tokens, key_sets, prefix, length, causal)

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
        self.block_size = check_int("block_size", block_size, 1, owner=self.owner)
        self.summary_cells = check_int("summary_cells", summary_cells, 1, owner=self.owner)
        if summary_cells > block_size:
            raise UsageError(
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
        # (N, 1, N*c), the same for every query of a block (no L x L/l*c mask); causal: (N, l, N*c)
        other = (summary[:, None, :] // block) != (queries[:, :1, None] // block)
        if causal:
            other = other & (summary[:, None, :] <= queries[:, :, None])
        key_sets = [
            KeySet(shift_body(queries, body, prefix_tokens), own),
            KeySet(shift_body(summary, body, prefix_tokens), other),
        ]
        prefix = torch.arange(prefix_tokens, device=device)  # global
        return make_pattern(queries + prefix_tokens, key_sets, prefix, length, causal)

    def dense_mask(self, q, k, causal=False, grid=None, prefix_tokens=0) -> torch.Tensor:
        i, j = positions_after_prefix(q.shape[2], prefix_tokens, q.device)
        block = self.block_size
        rule = (i // block == j // block) | (j % block >= block - self.summary_cells)
        rule = rule & (i >= 0) & (j >= 0)  # prefix pairs come from with_prefix
        if causal:
            rule = rule & (j <= i)
        return with_prefix(rule, prefix_tokens, causal)
