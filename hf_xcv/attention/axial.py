"""``axial``: the Axial Transformer's row and column attention on the token grid (Ho et al. 2019).

The paper stacks separate row-attention and column-attention layers, each with its own projections. A
registry core gets one set of queries, keys and values, so ``axial`` runs both passes with them, one after
the other (``passes="row_column"``, the default):

    rows    = A_row v          softmax over the keys of the query's row
    output  = A_col rows       softmax over the keys of the query's column, whose values are the row outputs

i.e. ``output = A_col A_row v``: the column pass attends over the row pass's outputs, so every token's
receptive field is the whole grid after one core call (the paper's sequential row -> column, not
lucidrains' parallel sum). Both passes use the same q and k; each is plain masked softmax attention, with
the dense pattern :meth:`AxialAttention.pass_masks` returns. ``passes="row"`` or ``"column"`` runs one pass
only; then the core is pattern-based and :meth:`AxialAttention.dense_mask` gives its pattern (with two
passes it returns None: a product of two attention matrices is no single masked softmax).

Causal (raster order): the row pass sees the keys left of the query in its row (and itself), the column
pass the keys above it in its column, so the output at (r, c) depends on the tokens (r', c') with r' <= r
and c' <= c: nothing later in the sequence. The paper's shifted conditioning stack, which extends this to
the whole raster past, is a model-level construct outside one attention core.

Prefix tokens ([CLS]) stay off the grid: in each pass every grid token also attends to the prefix tokens,
and prefix tokens attend to every token (their outputs of the row pass are their values in the column pass).
Cost O(L (h + w)) per pass, with no (L x L) tensor unless weights are asked for.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from ..utils.errors import UsageError
from ._blocks import BlockLayout, attend_layout, grid_problems, own_keep, prefix_pattern
from ._flash import blocks_backward, blocks_forward, plan_blocks
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention

_PASSES = {"row_column": ("row", "column"), "row": ("row",), "column": ("column",)}


def axis_layout(grid: tuple[int, int], prefix_tokens: int, axis: str, causal: bool, device) -> BlockLayout:
    """One block per row (``axis="row"``) or column (``"column"``) of the grid; causal: keys up to the query."""
    height, width = grid
    cells = prefix_tokens + torch.arange(height * width, device=device).view(height, width)  # token of each cell
    lines = cells if axis == "row" else cells.T  # (N, Q): one block per row or per column
    size = lines.shape[1]
    keep = torch.ones(lines.shape[0], 1, size, dtype=torch.bool, device=device)  # (N, 1, W)
    if causal:
        keep = torch.ones(size, size, dtype=torch.bool, device=device).tril()[None]  # (1, Q, W): earlier in line
    return BlockLayout(lines, lines, keep)


class _RowColumn(torch.autograd.Function):
    """Both passes in one autograd Function: ``A_col (A_row v)`` with the fused block kernels of ``_flash``.

    Saved for backward: q, k, v and the two passes' row log-sum-exp. The row outputs are recomputed in backward,
    and one whole-length buffer holds them, then their gradient, then the gradient of v: the column blocks
    partition the tokens (a row's values are read by one chunk, before that chunk writes its gradient there), and
    each row block's keys are its own queries. Inputs: q, k, v (B, H, L, D), the row and column chunks (from
    :func:`plan_blocks`), the scaling; returns the values (B, H, L, D).
    """

    @staticmethod
    def forward(ctx, q, k, v, row_chunks, column_chunks, scaling):
        rows, lse_row = blocks_forward(q, k, v, row_chunks, scaling)  # (B, H, L, D), (B, H, h, w, 1)
        out, lse_column = blocks_forward(q, k, rows, column_chunks, scaling)
        del rows  # recomputed in backward: one whole-length tensor less kept
        ctx.chunks, ctx.scaling = (row_chunks, column_chunks), scaling
        ctx.save_for_backward(q, k, v, lse_row, lse_column)
        return out.to(q.dtype)

    @staticmethod
    @once_differentiable  # the backward is not itself differentiable: a double backward raises
    def backward(ctx, grad_out):
        q, k, v, lse_row, lse_column = ctx.saved_tensors
        (row_chunks, column_chunks), scaling = ctx.chunks, ctx.scaling
        buffer, _ = blocks_forward(q, k, v, row_chunks, scaling)  # the row outputs again
        dq, dk = torch.zeros_like(q, dtype=buffer.dtype), torch.zeros_like(k, dtype=buffer.dtype)
        # Column pass: its values are the row outputs; their gradient replaces them in the buffer.
        blocks_backward(q, k, buffer, column_chunks, lse_column, grad_out, scaling, (dq, dk, buffer, None), reuse="v")
        # Row pass: its output gradient is in the buffer; the gradient of v replaces it.
        blocks_backward(q, k, v, row_chunks, lse_row, buffer, scaling, (dq, dk, buffer, None), reuse="grad_out")
        return dq.to(q.dtype), dk.to(k.dtype), buffer.to(v.dtype), None, None, None


def fused_row_column(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> torch.Tensor:
    """The two passes without prefix tokens as one :class:`_RowColumn`: q, k, v (B, H, L, D) -> (B, H, L, D)."""
    chunks = []
    for axis in ("row", "column"):
        layout = axis_layout(call.grid, 0, axis, call.causal, q.device)
        keep = own_keep(layout, call.key_keep)  # (B or 1, 1, N, Q or 1, W)
        chunks.append(plan_blocks(q, k, layout.queries, layout.keys, keep))
    return _RowColumn.apply(q, k, v, chunks[0], chunks[1], call.scaling)


@register_attention
class AxialAttention(AttentionCore):
    """Axial attention: row attention, then column attention over the row outputs (see the module docstring).

    Args:
        passes: ``"row_column"`` (both, the default), ``"row"`` or ``"column"`` (one pass).
    """

    weights_are_copies = True  # the maps are assembled apart from the values
    # None (default): the fused path on CPU tensors only (AttentionCore.use_fused); True: always; False: the blocked
    # tensors on autograd's graph (see ``attend_layout``), e.g. to compare with
    fused: bool | None = None

    name = "axial"
    capabilities = Capabilities(
        padding_mask=True,
        causal=True,
        returns_weights=True,
        needs_grid=True,
        length_constraint="prefix_tokens + height * width tokens of any grid; keys are the query tokens "
        "themselves (kv_len == q_len)",
    )
    small_kwargs: dict[str, Any] = {}  # rows of a 4x4 grid already see only 4 of 16 tokens

    def __init__(self, num_heads: int, head_dim: int, passes: str = "row_column"):
        super().__init__(num_heads, head_dim)
        if passes not in _PASSES:
            raise UsageError(f"attention_type='axial': passes must be one of {sorted(_PASSES)}, got {passes!r}")
        self.passes = passes

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any] | None:
        """Exact only on a single-row or single-column grid, with the pass along it."""
        if grid is not None and grid[0] == 1:
            return {"passes": "row"}
        if grid is not None and grid[1] == 1:
            return {"passes": "column"}
        return None

    def length_problems(self, q_len: int, kv_len: int, grid=None, prefix_tokens: int = 0) -> list[str]:
        return grid_problems(self.name, q_len, kv_len, grid, prefix_tokens)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """Both passes as one fused Function when it can serve the call (no prefix tokens, weights, dropout or
        compiler); else pass by pass through ``attend_layout`` (fused per pass where that can serve it)."""
        if (
            self.use_fused(q)
            and self.passes == "row_column"
            and call.prefix_tokens == 0
            and not call.output_weights
            and call.dropout == 0.0
            and not torch.compiler.is_compiling()
        ):
            return AttentionOutput(fused_row_column(q, k, v, call), None)
        values, weights = v, None
        for axis in _PASSES[self.passes]:
            layout = axis_layout(call.grid, call.prefix_tokens, axis, call.causal, q.device)
            # the column pass attends over the row pass's outputs
            values, pass_weights = attend_layout(q, k, values, layout, call, fused=self.use_fused(q))
            if call.output_weights:  # output = A_col (A_row v): the weights compose as A_col A_row
                weights = pass_weights if weights is None else torch.matmul(pass_weights, weights)
        return AttentionOutput(values, weights)

    def pass_masks(
        self, q: torch.Tensor, k: torch.Tensor, causal: bool = False, grid=None, prefix_tokens: int = 0
    ) -> list[torch.Tensor]:
        """The (1, 1, L, L) keep mask of each pass, in order: ``dense_attention`` with the first mask, then with
        the next mask on its output as values, ..., equals the core's output."""
        if grid is None:
            raise ValueError("attention_type='axial' needs the grid to build its dense masks")
        cell = (torch.arange(q.shape[2], device=q.device) - prefix_tokens).clamp(min=0)
        row, col = cell // grid[1], cell % grid[1]  # grid coordinates (prefix tokens: dummy (0, 0))
        same = {"row": row[:, None] == row[None, :], "column": col[:, None] == col[None, :]}
        return [
            prefix_pattern(same[axis], q.shape[2], k.shape[2], prefix_tokens, causal)[None, None]
            for axis in _PASSES[self.passes]
        ]

    def dense_mask(self, q, k, causal=False, grid=None, prefix_tokens=0) -> torch.Tensor | None:
        masks = self.pass_masks(q, k, causal, grid, prefix_tokens)
        return masks[0] if len(masks) == 1 else None
