"""TTSR's texture attention (Yang et al. 2020, section 3.1): relevance embedding, hard attention, soft attention.

Its own small interface, not a q/k/v core: queries are the 3x3 patches of the upsampled input's texture features
(at a quarter of the output resolution), keys the degraded reference's, and each query takes the *one* most
relevant reference patch (hard attention) at three scales, where softmax attention would average them.

* Relevance: the cosine of two 3x3 patches of features, ``<q / |q|, k / |k|>`` over C * 9 values.
* Hard attention: the index of the most relevant key of each query (the first among equals).
* Soft attention: that relevance, S = max_k relevance (a confidence map, (B, 1, H, W)).
* Transfer: each query position takes the reference patch at its index; overlapping patches are summed back
  and divided by 9 (the original's ``unfold`` / ``gather`` / ``fold``). At scale s (1, 2, 4) the patch is 3s x 3s
  with stride s, so an output pixel P receives, from each of the 9 neighbouring queries q, the value at
  ``P + s * (index(q) - q)``: a copy displaced by the match. :func:`transfer_textures` computes exactly that, 9
  gathers per level, instead of materialising the unfolded reference (C * 9 s^2 values per reference position).

The original computes the whole (reference area) x (input area) relevance matrix at once (13 GB for a 600x600
reference); :func:`best_matches` computes it in blocks of ``chunk_size`` x ``chunk_size`` and keeps a running
arg-max, so memory is bounded by the block, not by the image sizes.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def unfold_3x3(features: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, C * 9, H * W): every position's 3x3 neighbourhood (zero-padded), in the layout of
    ``F.unfold(features, 3, padding=1)`` (channel-major, then the offsets row by row). Built from slices, so that it
    exports everywhere ``unfold`` may not."""
    batch, channels, height, width = features.shape
    padded = F.pad(features, (1, 1, 1, 1))
    shifted = [padded[:, :, dy : dy + height, dx : dx + width] for dy in range(3) for dx in range(3)]
    return torch.stack(shifted, dim=2).reshape(batch, channels * 9, height * width)  # (B, C * 9, H * W)


def patch_vectors(features: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H * W, C * 9): each position's 3x3 patch, L2-normalised (``F.normalize``'s eps)."""
    return F.normalize(unfold_3x3(features), dim=1).transpose(1, 2)


@torch.no_grad()
def best_matches(queries: torch.Tensor, keys: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """For each query, the index of the most relevant key: ``argmax_k <queries[q], keys[k]>``, the first among
    equals (as ``torch.max``), computed in blocks of at most ``chunk_size`` queries x ``chunk_size`` keys.

    Args:
        queries: (B, Lq, D) normalised patch vectors.
        keys: (B, Lk, D) normalised patch vectors.
        chunk_size: positions per block on each axis; a block holds ``chunk_size**2`` relevances.

    Returns:
        (B, Lq) int64 indices into the keys.
    """
    batch, num_queries, _ = queries.shape
    num_keys = keys.shape[1]
    indices = []
    for q0 in range(0, num_queries, chunk_size):
        rows = queries[:, q0 : q0 + chunk_size]  # (B, cq, D)
        best_value = best_index = None
        for k0 in range(0, num_keys, chunk_size):
            block = torch.matmul(rows, keys[:, k0 : k0 + chunk_size].transpose(1, 2))  # (B, cq, ck)
            value, index = block.max(dim=2)  # (B, cq): the first maximum within the block
            index = index + k0
            if best_value is None:
                best_value, best_index = value, index
            else:  # strictly greater: an equal value in a later block does not replace the first
                better = value > best_value
                best_value = torch.where(better, value, best_value)
                best_index = torch.where(better, index, best_index)
        indices.append(best_index)
    return torch.cat(indices, dim=1) if indices else queries.new_zeros((batch, 0), dtype=torch.long)


def matched_relevance(queries: torch.Tensor, keys: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B, Lq): the relevance of each query and its matched key (the soft attention S), differentiable in both, as
    the original's ``max`` over the relevance matrix is at its arg-max."""
    matched = keys.gather(1, index.unsqueeze(-1).expand(-1, -1, keys.shape[-1]))  # (B, Lq, D)
    return (queries * matched).sum(dim=-1)


def transfer_textures(
    values: torch.Tensor, index: torch.Tensor, grid: tuple[int, int], reference_grid: tuple[int, int], scale: int
) -> torch.Tensor:
    """The hard-attention transfer at one scale: the original's unfold (kernel 3s, stride s, padding s) of the
    reference features, gather at ``index`` and fold back divided by 9, without the unfolded copy.

    Args:
        values: (B, C, s * Hr, s * Wr) reference features at this scale.
        index: (B, H * W) matched reference position (in the Hr x Wr grid) of each query position.
        grid: (H, W), the query grid; ``reference_grid``: (Hr, Wr).
        scale: s, the level's resolution relative to the relevance's (1, 2 or 4).

    Returns:
        (B, C, s * H, s * W) transferred textures.
    """
    batch, channels = values.shape[:2]
    (height, width), (ref_height, ref_width) = grid, reference_grid
    out_h, out_w, src_h, src_w = scale * height, scale * width, scale * ref_height, scale * ref_width
    flat = values.reshape(batch, channels, src_h * src_w)
    # each query's match as a displacement (rows, columns) in query cells; -1 marks "no query" (outside the grid)
    padded = F.pad(index.view(batch, height, width), (1, 1, 1, 1), value=-1)  # (B, H + 2, W + 2)
    rows = torch.arange(out_h, device=values.device).view(1, out_h, 1)
    cols = torch.arange(out_w, device=values.device).view(1, 1, out_w)
    out = values.new_zeros(batch, channels, out_h * out_w)
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            match = padded[:, 1 + dy : 1 + dy + height, 1 + dx : 1 + dx + width]  # (B, H, W): index of q0 + d
            match = match.repeat_interleave(scale, 1).repeat_interleave(scale, 2)  # (B, sH, sW)
            src_y = rows + scale * (match.div(ref_width, rounding_mode="floor") - (rows // scale + dy))
            src_x = cols + scale * (match.remainder(ref_width) - (cols // scale + dx))
            valid = (match >= 0) & (src_y >= 0) & (src_y < src_h) & (src_x >= 0) & (src_x < src_w)
            source = torch.where(valid, src_y * src_w + src_x, 0).view(batch, 1, -1)  # (B, 1, sH * sW)
            taken = flat.gather(2, source.expand(-1, channels, -1))  # (B, C, sH * sW)
            out = out + taken * valid.view(batch, 1, -1).to(taken.dtype)
    return (out / 9.0).view(batch, channels, out_h, out_w)


# Unfold settings of the three levels (kernel, stride, padding): 3s x 3s patches at stride s around each position.
LEVEL_UNFOLD = {1: (3, 1, 1), 2: (6, 2, 2), 4: (12, 4, 4)}


def unfold_level(values: torch.Tensor, scale: int) -> torch.Tensor:
    """(B, C, s * Hr, s * Wr) -> (B, C * 9 s^2, Hr * Wr): the original's unfold of one value level."""
    kernel, stride, padding = LEVEL_UNFOLD[scale]
    return F.unfold(values, kernel, padding=padding, stride=stride)


def fold_level(patches: torch.Tensor, grid: tuple[int, int], scale: int) -> torch.Tensor:
    """(B, C * 9 s^2, H * W) -> (B, C, s * H, s * W): overlapping patches summed back, divided by 9 (the original)."""
    kernel, stride, padding = LEVEL_UNFOLD[scale]
    size = (scale * grid[0], scale * grid[1])
    return F.fold(patches, size, kernel, padding=padding, stride=stride) / 9.0
