"""What the segment-recurrent entries (``xl``: Transformer-XL, Dai et al. 2019; ``compressive``: the Compressive
Transformer, Rae et al. 2020) share: memories, relative positions and their attention.

Both process a long stream one segment per call and carry a memory of earlier segments in ``state``
(a model carries one per layer as ``mems``). Queries come from the current segment; keys and values from
[memory; current segment] (Compressive: [compressed memory; memory; current segment]); the mask is causal
inside the segment and every memory slot is visible. Positions are *relative*: the score of query i and
key j is

    score(i, j) = scaling * ((q_i + u)^T k_j + (q_i + v)^T W_R R_{i-j})

with R the sinusoid embedding of the distance i - j (optionally clamped at ``clamp_len``), W_R a learned
projection (``r_net``), and u, v learned per-head biases (``r_w_bias``, ``r_r_bias``, the names of the
paper's code). The term for every distance is computed once per call and moved to its (i, j) place by the
relative shift (a zero column, a reshape, a slice: one copy, no gather indices).

**Memory of projected keys.** The paper caches the hidden states h of the last ``mem_len`` positions
(stop-gradient) and projects them again in the next segment: k_mem = W_k SG(h). A core receives keys and
values already projected by its layer, so it caches SG(W_k h) and SG(W_v h) instead. The forward values are
the same whenever the projection weights are the same in both calls (always at inference, and within one
training step); after an optimizer step the paper re-projects old states with the new weights, and W_k,
W_v get gradient through the memory positions, whereas here the cached keys and values are constants.
Relative positions are not part of the cached keys (they are added at score time), as in the paper.

Memory semantics: the memory after a call is the last ``mem_len`` positions of [memory; current keys], so
with segments processed in order every query at stream position p sees exactly the keys at positions
``start - mem_len <= j <= p``, ``start`` being the first position of its segment. A key-padding mask is
carried in the memory, so a padded key stays invisible in later segments too. Positions count padded
tokens like any other.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..utils.checks import check_int
from .registry import AttentionCore, Capabilities


class SegmentMemory(NamedTuple):
    """Transformer-XL's state: the detached keys and values of the last ``mem_len`` positions."""

    keys: torch.Tensor  # (B, H, M, D)
    values: torch.Tensor  # (B, H, M, D)
    keep: torch.Tensor | None = None  # (B, M) boolean, False for padded positions; None when nothing is padded


class CompressiveMemory(NamedTuple):
    """The Compressive Transformer's state: XL's memory plus the compressed memory of evicted positions."""

    keys: torch.Tensor  # (B, H, M, D)
    values: torch.Tensor  # (B, H, M, D)
    keep: torch.Tensor | None  # (B, M)
    compressed_keys: torch.Tensor  # (B, H, C, D)
    compressed_values: torch.Tensor  # (B, H, C, D)
    compressed_keep: torch.Tensor | None  # (B, C)


def sinusoid_embeddings(distances: torch.Tensor, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """(N,) distances -> (N, dim) embeddings [sin(d w_0), ..., sin(d w_k), cos(d w_0), ...], w_i = 10000^(-2i/dim)."""
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision loses large distances
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=distances.device, dtype=work) / dim))  # (ceil(dim/2),)
    angles = distances.to(work)[:, None] * inv_freq[None, :]  # (N, ceil(dim/2))
    return torch.cat([angles.sin(), angles.cos()], dim=-1)[:, :dim].to(dtype)  # (N, dim)


def relative_shift(scores: torch.Tensor) -> torch.Tensor:
    """Move per-distance scores to their key positions (Transformer-XL's ``_rel_shift``).

    ``scores[..., i, t]`` holds the term of query i for distance ``K - 1 - t`` (distances in descending
    order), the queries being aligned with the last ``Lq`` of ``K`` keys. The result's ``[..., i, j]`` is the
    term for the distance ``(K - Lq + i) - j`` of key j, for every ``j <= K - Lq + i``; entries above that
    (future keys) hold other rows' values and must be masked by the caller.
    """
    *lead, q_len, k_len = scores.shape
    padded = F.pad(scores, (1, 0))  # (..., Lq, K + 1): a zero column in front of every row
    padded = padded.view(*lead, k_len + 1, q_len)  # the same memory read as K + 1 rows of Lq
    return padded[..., 1:, :].view(*lead, q_len, k_len)  # dropping Lq entries shifts row i left by Lq - 1 - i


class RelativeSegmentAttention(AttentionCore):
    """What Transformer-XL and the Compressive Transformer share: u, v, W_R and the relative attention."""

    capabilities = Capabilities(
        padding_mask=True,
        causal=True,
        returns_weights=True,
        stateful=True,
        requires_causal=True,
        relative_positions=True,
        length_constraint="any length; keys are the queries' own stream (kv_len >= q_len)",
    )

    def __init__(self, num_heads: int, head_dim: int, mem_len: int, clamp_len: int | None):
        super().__init__(num_heads, head_dim)
        check_int("mem_len", mem_len, 0, owner=self.owner)
        if clamp_len is not None:
            check_int("clamp_len", clamp_len, 1, owner=self.owner)
        self.mem_len = mem_len
        self.clamp_len = clamp_len
        width = num_heads * head_dim
        # u and v of the paper, one per head; normal(0, 0.02) as in the authors' code.
        self.r_w_bias = nn.Parameter(torch.randn(num_heads, head_dim) * 0.02)  # (H, D) content bias u
        self.r_r_bias = nn.Parameter(torch.randn(num_heads, head_dim) * 0.02)  # (H, D) position bias v
        self.r_net = nn.Linear(width, width, bias=False)  # W_{k,R}: sinusoid (H*D) -> per-head position keys

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        # With u = v = 0 and W_R = 0 the score is q_i^T k_j: plain causal softmax attention over memory and
        # segment; a memory as long as the input makes every query see its whole prefix in any segmentation.
        return {"mem_len": length}

    def make_exact_(self) -> None:
        """Zero u, v and W_R: no positional term is left, scores are plain dot products."""
        with torch.no_grad():
            self.r_w_bias.zero_()
            self.r_r_bias.zero_()
            self.r_net.weight.zero_()

    def length_problems(
        self, q_len: int, kv_len: int, grid: tuple[int, int] | None = None, prefix_tokens: int = 0
    ) -> list[str]:
        problems = super().length_problems(q_len, kv_len, grid, prefix_tokens)
        if kv_len < q_len:
            problems.append(f"it attends within one stream, so keys ({kv_len}) cannot be fewer than queries ({q_len})")
        return problems

    def memory_problems(self, keys: torch.Tensor, keep: torch.Tensor | None, k: torch.Tensor, what: str) -> list[str]:
        """Why a memory tensor of the state does not fit keys ``k`` (B, H, Lk, D); empty when it does."""
        batch, heads, _, dim = k.shape
        if keys.dim() != 4 or (keys.shape[0], keys.shape[1], keys.shape[3]) != (batch, heads, dim):
            return [
                f"state {what} of shape {tuple(keys.shape)} do not fit batch {batch}, {heads} heads, head_dim {dim}"
            ]
        if keep is not None and tuple(keep.shape) != (batch, keys.shape[2]):
            return [f"state keep mask of shape {tuple(keep.shape)} does not fit {what} {tuple(keys.shape)}"]
        return []

    def position_keys(self, length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """(H, K, D) projected relative embeddings W_R R_d for the distances d = K-1, ..., 1, 0."""
        distances = torch.arange(length - 1, -1, -1, device=device)  # (K,) descending
        if self.clamp_len is not None:
            distances = distances.clamp(max=self.clamp_len)
        weight = self.r_net.weight
        embeddings = sinusoid_embeddings(distances, weight.shape[1], weight.dtype)  # (K, H*D)
        projected = self.r_net(embeddings).to(dtype)  # (K, H*D)
        return projected.view(length, self.num_heads, self.head_dim).transpose(0, 1)  # (H, K, D)

    def relative_attention(
        self,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        keep: torch.Tensor | None,
        scaling: float | None,
        dropout: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal attention with relative positions; the queries are the last ``Lq`` of the ``K`` keys.

        ``q``: (B, H, Lq, D); ``keys``/``values``: (B, H, K, D); ``keep``: (B, K) or None.
        Returns the values (B, H, Lq, D) and the probabilities (B, H, Lq, K).
        """
        q_len, k_len = q.shape[2], keys.shape[2]
        scaling = self.head_dim**-0.5 if scaling is None else scaling
        u = self.r_w_bias.to(q.dtype)[None, :, None, :]  # (1, H, 1, D)
        v = self.r_r_bias.to(q.dtype)[None, :, None, :]  # (1, H, 1, D)
        positions = self.position_keys(k_len, q.dtype, q.device)  # (H, K, D)
        # Position terms for every distance (descending), moved to their keys; then the content terms.
        shifted = relative_shift(torch.matmul((q + v) * scaling, positions.transpose(-1, -2)))  # (B, H, Lq, K)
        scores = torch.matmul((q + u) * scaling, keys.transpose(-1, -2))  # (B, H, Lq, K)
        # In place (matmul keeps its inputs, not its output, for backward): at most two (Lq, K) tensors at once.
        scores.add_(shifted)
        del shifted
        rows = torch.arange(k_len - q_len, k_len, device=q.device)[:, None]  # (Lq, 1) query positions
        visible = torch.arange(k_len, device=q.device)[None, :] <= rows  # (Lq, K) causal, memory all visible
        if keep is not None:
            visible = visible[None, None] & keep[:, None, None, :]  # (B, 1, Lq, K)
        scores.masked_fill_(~visible, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(q.dtype)
        del scores
        if keep is not None:
            probs = probs * visible.any(dim=-1, keepdim=True)  # a query with no visible key gives zeros
        probs = F.dropout(probs, p=dropout, training=dropout > 0)
        return torch.matmul(probs, values), probs


def join_keep(parts: list[tuple[torch.Tensor | None, int]], batch: int, device: torch.device) -> torch.Tensor | None:
    """Concatenate (B, n) keep masks given as (mask or None, n); None when no part has one."""
    if all(mask is None for mask, _ in parts):
        return None
    filled = [torch.ones(batch, n, dtype=torch.bool, device=device) if mask is None else mask for mask, n in parts]
    return torch.cat(filled, dim=1)


def last(tensor: torch.Tensor | None, count: int, dim: int) -> torch.Tensor | None:
    """The last ``count`` entries along ``dim`` (none for count 0, unlike a ``-0`` slice)."""
    if tensor is None:
        return None
    return tensor.narrow(dim, tensor.shape[dim] - count, count)
