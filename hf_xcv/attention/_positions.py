"""Position arithmetic of the block patterns (``_patterns``, ``sparse_strided``, ``sparse_fixed``, ``bigbird``):
positions of blocks and of their neighbours, positions counted after the prefix tokens, and the dense rules
(``dense_mask``) completed with global prefix tokens."""

from __future__ import annotations

import torch


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
