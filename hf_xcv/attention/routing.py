"""``routing``: the Routing Transformer's clustered attention (Roy et al. 2020), online spherical k-means.

Queries and keys are normalised to unit length and compared with ``num_clusters`` shared centroids per head
(a persistent buffer, saved with the model). Routing is *balanced*, as in the reference implementations:
every centroid takes its ``window_size`` most similar queries and its ``window_size`` most similar keys
(default ``ceil(L / num_clusters)``), and the selected queries attend to the selected keys of the same
cluster (causally masked by position when ``causal``). A query picked by several clusters gets the average
of their outputs; a query picked by none gets zeros, as in the reference code (the paper mixes routing heads
with local heads, which covers those tokens); so does a query whose clusters hold no key it may see.

Training: in ``train()`` mode each call moves every centroid towards the mean of the normalised queries and
keys nearest to it, ``mu <- normalise(decay * mu + (1 - decay) * mean)`` (the paper's EMA, decay 0.999,
no gradient), *after* routing with the old centroids. Every call also returns the commitment loss
``commitment * mean ||x - mu(x)||^2 / head_dim`` over the normalised queries and keys ``x`` and their nearest
centroids ``mu(x)`` as ``AttentionOutput.aux_loss``, which pulls ``x`` towards its centroid. Under gradient
checkpointing the recomputed forward routes with the updated centroids and updates them once more.

Padding: padded keys are never preferred over real ones and are masked; in self-attention (as many queries
as keys) padded queries are chosen last as well. Queries and keys are routed separately, so
cross-attention works. Changing future queries/keys can move present tokens between clusters
(content routing); future values never leak.

Cost: O(num_clusters * window_size^2 * head_dim) = O(L^2 / num_clusters); the paper takes about sqrt(L)
clusters, O(L^1.5).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ..utils.checks import check_float, check_int
from ._masks import bias_per_head, masked_softmax
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention


def take(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x: (B, H, L, D) at index (B, H, C, w) -> (B, H, C, w, D)."""
    flat = index.flatten(2)
    return x.gather(2, flat.unsqueeze(-1).expand(*flat.shape, x.shape[-1])).view(*index.shape, x.shape[-1])


def top_members(similarity: torch.Tensor, valid: torch.Tensor | None, count: int) -> torch.Tensor:
    """Indices of the ``count`` tokens most similar to each centroid, invalid tokens last.

    similarity: (B, H, C, L); valid: (B, L) or None. Returns (B, H, C, count).
    """
    if valid is not None:
        similarity = similarity.masked_fill(~valid[:, None, None, :], -torch.inf)
    return similarity.topk(count, dim=-1).indices


@register_attention
class RoutingAttention(AttentionCore):
    """Balanced k-means routing attention with EMA-updated centroids and a commitment loss.

    Args:
        num_clusters: centroids per head (the paper uses about sqrt(L); 16 suits 1K-8K tokens).
        window_size: queries and keys each centroid takes; None means ``ceil(length / num_clusters)`` per call.
        ema_decay: decay of the centroid moving average (paper: 0.999), in [0, 1).
        commitment: weight of the commitment loss returned as ``aux_loss`` (reference code: 1e-4).
    """

    weights_are_copies = True  # the maps are assembled apart from the values

    name = "routing"
    capabilities = Capabilities(
        padding_mask=True,
        causal=True,
        cross_attention=True,
        returns_weights=True,
        attention_bias=True,
        length_constraint="any length",
    )
    small_kwargs = {"num_clusters": 4}
    content_routed = True

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        num_clusters: int = 16,
        window_size: int | None = None,
        ema_decay: float = 0.999,
        commitment: float = 1e-4,
    ):
        super().__init__(num_heads, head_dim)
        check_int("num_clusters", num_clusters, 1, owner=self.owner)
        if window_size is not None:
            check_int("window_size", window_size, 1, owner=self.owner)
        check_float("ema_decay", ema_decay, 0.0, 1.0, owner=self.owner)
        check_float("commitment", commitment, 0.0, owner=self.owner)
        self.num_clusters = num_clusters
        self.window_size = window_size
        self.ema_decay = ema_decay
        self.commitment = commitment
        # Unit-length centroids, one set per head; a buffer: updated by EMA, not by gradients.
        self.register_buffer("means", F.normalize(torch.randn(num_heads, num_clusters, head_dim), dim=-1))

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        """One cluster taking every query and key."""
        return {"num_clusters": 1, "window_size": None}

    def _window(self, length: int) -> int:
        return min(self.window_size or math.ceil(length / self.num_clusters), length)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """Tokens are sequence positions: ``grid`` and ``prefix_tokens`` change nothing. Causal queries align
        with the last keys (query i sits at position ``kv_len - q_len + i``)."""
        batch, heads, q_len, head_dim = q.shape
        kv_len = k.shape[2]
        key_valid = call.key_keep  # (B, Lk) or None
        query_valid = key_valid if q_len == kv_len else None
        q_unit, k_unit = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        means = self.means.to(q.dtype)
        q_idx = top_members(torch.einsum("bhld,hcd->bhcl", q_unit, means), query_valid, self._window(q_len))
        k_idx = top_members(torch.einsum("bhld,hcd->bhcl", k_unit, means), key_valid, self._window(kv_len))

        scores = torch.matmul(take(q, q_idx), take(k, k_idx).transpose(-1, -2)) * call.scaling  # (B, H, C, wq, wk)
        if call.bias is not None:  # the bias of each cluster's queries and keys
            scores = scores + bias_per_head(call.bias, q_idx.unsqueeze(-1), k_idx.unsqueeze(-2)).to(scores.dtype)
        keep = torch.ones_like(k_idx, dtype=torch.bool).unsqueeze(-2)  # (B, H, C, 1, wk)
        if key_valid is not None:
            keep = key_valid[:, None, :].expand(batch, heads, kv_len).gather(2, k_idx.flatten(2))
            keep = keep.view(k_idx.shape).unsqueeze(-2)
        if call.causal:
            keep = keep & (k_idx.unsqueeze(-2) <= q_idx.unsqueeze(-1) + (kv_len - q_len))
        keep = keep.expand(*scores.shape)
        probs = masked_softmax(scores, keep)
        probs = F.dropout(probs, p=call.dropout) if call.dropout > 0.0 else probs
        # Average over the clusters that picked a query and gave it something to attend.
        served = keep.any(-1).to(probs.dtype)  # (B, H, C, wq)
        out_clusters = torch.matmul(probs, take(v, k_idx)) * served.unsqueeze(-1)  # (B, H, C, wq, D)
        flat_q = q_idx.flatten(2)  # (B, H, C * wq)
        counts = served.new_zeros(batch, heads, q_len).scatter_add(2, flat_q, served.flatten(2)).clamp(min=1)
        out = q.new_zeros(batch, heads, q_len, head_dim).scatter_add(
            2, flat_q.unsqueeze(-1).expand(-1, -1, -1, head_dim), out_clusters.flatten(2, 3)
        )
        out = out / counts.unsqueeze(-1)

        weights = None
        if call.output_weights:
            share = probs * (served / counts.gather(2, flat_q).view(served.shape)).unsqueeze(-1)
            flat = q_idx.unsqueeze(-1) * kv_len + k_idx.unsqueeze(-2)  # (B, H, C, wq, wk)
            weights = probs.new_zeros(batch, heads, q_len * kv_len).scatter_add(2, flat.flatten(2), share.flatten(2))
            weights = weights.view(batch, heads, q_len, kv_len)

        points = torch.cat([q_unit, k_unit], dim=2)  # (B, H, Lq + Lk, D)
        point_valid = self._point_validity(batch, q_len, query_valid, key_valid, q.device)  # (B, Lq + Lk)
        aux_loss = self._commitment_loss(points, point_valid)
        if self.training:
            self._update_means(points.detach(), point_valid)
        return AttentionOutput(out, weights, None, aux_loss)

    @staticmethod
    def _point_validity(
        batch: int,
        q_len: int,
        query_valid: torch.Tensor | None,
        key_valid: torch.Tensor | None,
        device: torch.device,
    ) -> torch.Tensor | None:
        """(B, Lq + Lk) which queries and keys count for the commitment loss and the centroid update."""
        if key_valid is None:
            return None  # no padding: every query and key counts
        if query_valid is None:
            query_valid = torch.ones(batch, q_len, dtype=torch.bool, device=device)
        return torch.cat([query_valid, key_valid], dim=1)

    def _nearest(self, points: torch.Tensor) -> torch.Tensor:
        """(B, H, N) index of the centroid nearest (most similar) to each unit vector of points (B, H, N, D)."""
        return torch.einsum("bhnd,hcd->bhnc", points, self.means.to(points.dtype)).argmax(-1)

    def _commitment_loss(self, points: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """commitment * mean squared distance (per dimension) of the points to their nearest centroid."""
        batch, heads, count, head_dim = points.shape
        means = self.means.to(points.dtype).unsqueeze(0).expand(batch, -1, -1, -1)  # (B, H, C, D)
        nearest = self._nearest(points.detach())
        routed = means.gather(2, nearest.unsqueeze(-1).expand(-1, -1, -1, head_dim))  # (B, H, N, D)
        distance = (points - routed).pow(2).mean(-1)  # (B, H, N)
        if valid is None:
            return self.commitment * distance.mean()
        weight = valid[:, None, :].to(distance.dtype)
        return self.commitment * (distance * weight).sum() / (weight.sum() * heads).clamp(min=1)

    @torch.no_grad()
    def _update_means(self, points: torch.Tensor, valid: torch.Tensor | None) -> None:
        """One EMA step of spherical k-means: centroids move towards the mean of their nearest points."""
        batch, heads, count, head_dim = points.shape
        nearest = self._nearest(points)  # (B, H, N)
        weight = points.new_ones(batch, count) if valid is None else valid.to(points.dtype)
        weight = weight[:, None, :].expand(batch, heads, count)
        # Per head: sums and counts of the points nearest to each centroid, over batch and positions.
        index = nearest.transpose(0, 1).reshape(heads, batch * count)  # (H, B*N)
        flat_points = (points * weight.unsqueeze(-1)).transpose(0, 1).reshape(heads, batch * count, head_dim)
        sums = points.new_zeros(heads, self.num_clusters, head_dim)
        sums.scatter_add_(1, index.unsqueeze(-1).expand(-1, -1, head_dim), flat_points)
        counts = points.new_zeros(heads, self.num_clusters).scatter_add_(
            1, index, weight.transpose(0, 1).reshape(heads, batch * count)
        )
        means = self.means.to(points.dtype)
        batch_means = torch.where(counts.unsqueeze(-1) > 0, sums / counts.clamp(min=1).unsqueeze(-1), means)
        updated = F.normalize(self.ema_decay * means + (1 - self.ema_decay) * batch_means, dim=-1)
        self.means.copy_(updated.to(self.means.dtype))
