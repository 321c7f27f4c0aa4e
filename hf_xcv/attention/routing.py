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
clusters, O(L^1.5). Memory for training is O(L * head_dim): the clusters are attended by the fused Function of
``_fused_routed`` (a chunk of clusters at a time, probabilities recomputed in backward, nothing gathered kept)
and the commitment loss recomputes its unit vectors in backward; calls that return weights, use attention
dropout or are traced by torch.compile take the plain autograd path, which keeps the cluster scores.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ..utils.checks import check_float, check_int
from ._fused_routed import gathered_attention, unit_distance
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
    # None (default): the fused path on CPU tensors only (AttentionCore.use_fused); True: always; False: always the
    # plain autograd path (the reference of the fused one)
    fused: bool | None = None

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
        q_unit, k_unit = F.normalize(q.detach(), dim=-1), F.normalize(k.detach(), dim=-1)  # routing: no gradient
        means = self.means.to(q.dtype)
        q_idx = top_members(torch.einsum("bhld,hcd->bhcl", q_unit, means), query_valid, self._window(q_len))
        k_idx = top_members(torch.einsum("bhld,hcd->bhcl", k_unit, means), key_valid, self._window(kv_len))

        if self._use_fused(call, q):
            out = self._attend_fused(q, k, v, q_idx, k_idx, key_valid, call)
            return AttentionOutput(out, None, None, self._finish(q, k, q_unit, k_unit, query_valid, key_valid))
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

        return AttentionOutput(out, weights, None, self._finish(q, k, q_unit, k_unit, query_valid, key_valid))

    def _finish(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_unit: torch.Tensor,
        k_unit: torch.Tensor,
        query_valid: torch.Tensor | None,
        key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """The commitment loss of the queries and keys (B, H, L, D) (their detached unit vectors ``q_unit``,
        ``k_unit`` pick the nearest centroids), then, in training, the centroid update."""
        batch, q_len = q.shape[0], q.shape[2]
        point_valid = self._point_validity(batch, q_len, query_valid, key_valid, q.device)  # (B, Lq + Lk)
        nearest = self._nearest(q_unit), self._nearest(k_unit)  # (B, H, Lq), (B, H, Lk)
        means = self.means.to(q.dtype)
        distance = torch.cat([unit_distance(q, means, nearest[0]), unit_distance(k, means, nearest[1])], dim=2)
        aux_loss = self._commitment_loss(distance, point_valid)
        if self.training:
            self._update_means(torch.cat([q_unit, k_unit], dim=2), torch.cat(nearest, dim=2), point_valid)
        return aux_loss

    def _use_fused(self, call: AttentionCall, q: torch.Tensor) -> bool:
        """The fused attention (:func:`gathered_attention`: no gathered copies or cluster scores kept for
        backward) serves every call but those returning weights, with attention dropout, or traced by
        torch.compile, which keep the plain autograd path (as do ``fused = False`` and, by default, tensors off
        the CPU)."""
        return self.fused_serves(call, q)

    @staticmethod
    def _attend_fused(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q_idx: torch.Tensor,
        k_idx: torch.Tensor,
        key_valid: torch.Tensor | None,
        call: AttentionCall,
    ) -> torch.Tensor:
        """(B, H, Lq, D) output of the fused path: q (B, H, Lq, D), k, v (B, H, Lk, D), q_idx (B, H, C, wq),
        k_idx (B, H, C, wk), key_valid (B, Lk) or None."""
        batch, heads, q_len, head_dim = q.shape
        causal_offset = k.shape[2] - q_len if call.causal else None
        out_clusters, _, served = gathered_attention(
            q, k, v, q_idx, k_idx, key_ok=key_valid, causal_offset=causal_offset, scaling=call.scaling, bias=call.bias
        )  # (B, H, C, wq, D) with zeros where a cluster gave a query nothing to attend, (B, H, C, wq)
        flat_q = q_idx.flatten(2)  # (B, H, C * wq)
        counts = q.new_zeros(batch, heads, q_len).scatter_add_(2, flat_q, served.flatten(2).to(q.dtype)).clamp_(min=1)
        index = flat_q.unsqueeze(-1).expand(-1, -1, -1, head_dim)
        out = q.new_zeros(batch, heads, q_len, head_dim).scatter_add_(2, index, out_clusters.flatten(2, 3))
        return out.div_(counts.unsqueeze(-1))

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

    def _commitment_loss(self, distance: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """commitment * mean over the valid points of their distance (B, H, N) to the nearest centroid (the
        mean squared difference per dimension of the unit vectors, :func:`unit_distance`)."""
        heads = distance.shape[1]
        if valid is None:
            return self.commitment * distance.mean()
        weight = valid[:, None, :].to(distance.dtype)
        return self.commitment * (distance * weight).sum() / (weight.sum() * heads).clamp(min=1)

    @torch.no_grad()
    def _update_means(self, points: torch.Tensor, nearest: torch.Tensor, valid: torch.Tensor | None) -> None:
        """One EMA step of spherical k-means: centroids move towards the mean of their nearest points.

        points: (B, H, N, D) unit vectors; nearest: (B, H, N) their nearest centroids; valid: (B, N) or None.
        """
        batch, heads, count, head_dim = points.shape
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
