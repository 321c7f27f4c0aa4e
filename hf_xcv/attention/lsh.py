"""``lsh``: the locality-sensitive-hashing attention of the Reformer (Kitaev et al. 2020).

Each round of hashing draws a random rotation ``R`` (head_dim x num_buckets/2) and puts a vector ``x`` into
bucket ``argmax([xR, -xR])`` (angular LSH: vectors at a small angle tend to share a bucket). Tokens are
sorted by (bucket, position), the sorted sequence is cut into chunks of ``chunk_length``, and every query
attends to the keys of its own chunk and of the previous one (``chunks_before`` / ``chunks_after``,
wrapping around). With ``n_hashes`` rounds the sorted rounds are concatenated, so a chunk at the start of a
round looks back into the end of the previous round, as in the reference implementations; the per-round
outputs ``o_r`` are combined with the weights ``softmax_r(z_r)``, where ``z_r`` is the log-sum-exp of the
round's logits, which equals one softmax over the union of the rounds' keys (a key met in several rounds
counts several times, as in trax and transformers).

Shared query-key (``shared_qk=True``, the Reformer): the core receives ``q`` and ``k`` but **``k`` is
ignored**: the keys are the queries normalised to unit length (``q / sqrt(|q|^2 + head_dim * 1e-6)``,
transformers' ``_len_and_dim_norm``), so a query and its matching keys hash alike and land in the same
chunk. In a model the layer's ``k_proj`` is therefore unused. A token does not attend to itself (its own
dot product would dominate) unless it has no other key in any round: its logit is replaced by -1e5, the
value of trax and transformers. Logits are not scaled by ``head_dim**-0.5`` by default (the keys are unit
vectors), again as trax and transformers; ``scale_logits=True`` applies the layer's ``scaling``.

``shared_qk=False`` is this package's extension for layers with separate key projections: queries are
sorted by the hash of ``q`` and keys by the hash of ``k`` (same rotations), query chunk ``i`` attends to key
chunks ``i - chunks_before .. i + chunks_after``; the keys are used as given, logits scaled by ``scaling``,
and a token may attend to itself. With one round it is a content-dependent mask (:meth:`dense_mask`).

Causal masking compares original positions. Padded keys (and the internal padding to a multiple of
``chunk_length``) go to an extra last bucket, so their contents never change how real tokens are grouped.
Randomness: the rotations are drawn on every call from a generator seeded with ``seed`` (transformers'
``hash_seed``: the same seed draws the same rotations as transformers does on the CPU; default 0, so that a
saved model reproduces its outputs), or from torch's global generator when ``seed`` is None (fresh
rotations on every call, as the paper trains).

Cost: O(n_hashes * L * window * chunk_length) time, window = 1 + chunks_before + chunks_after. Memory for
training is O(n_hashes * L * head_dim): the chunks are attended by the fused Function of ``_fused_routed`` (a
few chunks at a time, probabilities recomputed in backward from the saved log-sum-exp, which the rounds also
mix by); hashing runs a slice of positions at a time. Calls that return weights, use attention dropout or are
traced by torch.compile take the plain autograd path, which keeps the chunk scores and sorted copies.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from ..utils.checks import check_bool, check_int
from ..utils.errors import UsageError
from ..utils.generators import as_generator
from ._fused_routed import gathered_attention
from ._masks import bias_per_head, masked_softmax
from ._tensors import pad_to_multiple
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention

# Logit that replaces a token's attention to itself under shared query-key (trax / transformers value).
SELF_LOGIT = -1e5
# Epsilon on the mean square in the key normalisation (transformers' `_len_norm`).
KEY_NORM_EPS = 1e-6


def normalize_keys(x: torch.Tensor) -> torch.Tensor:
    """Unit-length keys as transformers' Reformer builds them: x * rsqrt(mean(x^2) + eps) / sqrt(head_dim)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + KEY_NORM_EPS) / math.sqrt(x.shape[-1])


# Rotated projections (B * H * n_hashes * positions * num_buckets / 2) hashed at once: O(L) memory, not O(L^2).
HASH_ELEMENTS = 1 << 21


def hash_buckets(vectors: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """Angular-LSH buckets: argmax over [xR, -xR] per round (the first of equal maxima, as argmax picks).

    vectors: (B, H, L, D); rotations: (H, D, n_hashes, num_buckets / 2). Returns (B, H, n_hashes, L) long.
    Computed a slice of positions at a time, without the concatenation: argmax of [xR, -xR] is argmax(xR) when
    max(xR) >= max(-xR) = -min(xR), else num_buckets / 2 + argmin(xR).
    """
    batch, heads, length, _ = vectors.shape
    half = rotations.shape[-1]
    step = max(1, HASH_ELEMENTS // (batch * heads * rotations.shape[2] * half))
    vectors = vectors.detach()
    buckets = []
    for start in range(0, length, step):
        piece = vectors[:, :, start : start + step].to(rotations.dtype)
        rotated = torch.einsum("bhld,hdnr->bhnlr", piece, rotations)  # (B, H, n, l, half)
        high, high_at = rotated.max(dim=-1)
        low, low_at = rotated.min(dim=-1)
        buckets.append(torch.where(high >= -low, high_at, low_at + half))
    return buckets[0] if len(buckets) == 1 else torch.cat(buckets, dim=-1)


def sort_by_bucket(buckets: torch.Tensor) -> torch.Tensor:
    """Positions sorted by (bucket, position) within each round, rounds concatenated.

    buckets: (B, H, n_hashes, L). Returns (B, H, n_hashes * L) positions in [0, L).
    """
    length = buckets.shape[-1]
    positions = torch.arange(length, device=buckets.device)
    order = torch.argsort(buckets * length + positions, dim=-1)  # unique keys: a stable order
    return order.flatten(2)


def chunk_window(x: torch.Tensor, offsets: list[int]) -> torch.Tensor:
    """Concatenate, for every chunk i (dim 2), the chunks i + o for o in ``offsets`` (wrapping around).

    x: (B, H, C, c, ...) -> (B, H, C, len(offsets) * c, ...).
    """
    return torch.cat([x if o == 0 else torch.roll(x, shifts=-o, dims=2) for o in offsets], dim=3)


def gather_positions(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """x: (B, H, L, D) taken at ``order`` (B, H, N) -> (B, H, N, D)."""
    return x.gather(2, order.unsqueeze(-1).expand(*order.shape, x.shape[-1]))


class LSHRoutes(NamedTuple):
    """Where every query and key went: the sort orders and, per chunk, positions and the keep mask.

    ``q_order``/``k_order``: (B, H, n_hashes * L_pad) original positions in sorted order;
    ``q_pos``: (B, H, C, c) positions of each chunk's queries; ``k_pos``: (B, H, C, W) positions of the keys
    in its window; ``keep``: (B, H, C, c, W) which of them it may attend; ``is_self``: (B, H, C, c, W) where
    the key is the query's own token under shared query-key (None otherwise).
    """

    q_order: torch.Tensor
    k_order: torch.Tensor
    q_pos: torch.Tensor
    k_pos: torch.Tensor
    keep: torch.Tensor | None
    is_self: torch.Tensor | None


@register_attention
class LSHAttention(AttentionCore):
    """Reformer LSH attention on sorted, chunked buckets, with multi-round hashing.

    Args:
        chunk_length: tokens per chunk of the sorted sequence (paper and transformers: 64). Sequences not a
            multiple of it are padded internally; sequences no longer than it are attended in one chunk.
        num_buckets: buckets per round (even); None picks ``2 * ceil(L / chunk_length)`` on every call, the
            rule transformers follows ("as recommended in the paper", there rounded to a power of two).
        n_hashes: rounds of hashing (transformers and LRA: 1; the paper reports up to 8).
        chunks_before: earlier chunks each chunk attends to (1 in the paper).
        chunks_after: later chunks each chunk attends to (0 in the paper).
        shared_qk: keys are the normalised queries and ``k`` is ignored (the Reformer); False uses ``k``.
        scale_logits: multiply logits by ``scaling``; None means "not under shared_qk, yes otherwise".
        seed: seed of the rotations, drawn anew from it on every call; None uses torch's global generator.
    """

    weights_are_copies = True  # the maps are assembled apart from the values

    name = "lsh"
    capabilities = Capabilities(
        padding_mask=True,
        causal=True,
        returns_weights=True,
        attention_bias=True,
        length_constraint="self-attention only (as many keys as queries); any length (padded internally)",
    )
    small_kwargs = {"chunk_length": 4, "num_buckets": 4, "n_hashes": 2}
    content_routed = True
    # None (default): the fused path on CPU tensors only (AttentionCore.use_fused); True: always; False: always the
    # plain autograd path (the reference of the fused one)
    fused: bool | None = None

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        chunk_length: int = 64,
        num_buckets: int | None = None,
        n_hashes: int = 1,
        chunks_before: int = 1,
        chunks_after: int = 0,
        shared_qk: bool = True,
        scale_logits: bool | None = None,
        seed: int | None = 0,
    ):
        super().__init__(num_heads, head_dim)
        check_int("chunk_length", chunk_length, 1, owner=self.owner)
        if num_buckets is not None and (check_int("num_buckets", num_buckets, 2, owner=self.owner) % 2):
            raise UsageError(f"num_buckets must be an even integer >= 2 (or None), got {num_buckets}")
        check_int("n_hashes", n_hashes, 1, owner=self.owner)
        check_int("chunks_before", chunks_before, 0, owner=self.owner)
        check_int("chunks_after", chunks_after, 0, owner=self.owner)
        check_bool("shared_qk", shared_qk, owner=self.owner)
        if scale_logits is not None:
            check_bool("scale_logits", scale_logits, owner=self.owner)
        if seed is not None:
            check_int("seed", seed, 0, owner=self.owner)
        self.chunk_length = chunk_length
        self.num_buckets = num_buckets
        self.n_hashes = n_hashes
        self.chunks_before = chunks_before
        self.chunks_after = chunks_after
        self.shared_qk = bool(shared_qk)
        if self.shared_qk:  # keys are the queries: the owning layer builds no key projection
            self.projections = ("q", "v")
        self.scale_logits = (not self.shared_qk) if scale_logits is None else bool(scale_logits)
        self.seed = seed

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        """One round, two chunks of half the length: every query's window (own + previous chunk) holds every
        key. Plain softmax attention needs separate keys (``shared_qk=False``, which also scales logits)."""
        return {"chunk_length": max(1, math.ceil(length / 2)), "num_buckets": 2, "n_hashes": 1, "shared_qk": False}

    def length_problems(
        self, q_len: int, kv_len: int, grid: tuple[int, int] | None = None, prefix_tokens: int = 0
    ) -> list[str]:
        if q_len != kv_len:
            return [f"LSH attention sorts queries and keys of one sequence: got {q_len} queries and {kv_len} keys"]
        return []

    def _rotations(self, head_dim: int, num_buckets: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """(H, D, n_hashes, num_buckets / 2) Gaussian rotations, drawn like transformers' Reformer draws them."""
        shape = (self.num_heads, head_dim, self.n_hashes, num_buckets // 2)
        generator = as_generator(self.seed, "torch", device=device, none="global")
        return torch.randn(shape, generator=generator, device=device, dtype=dtype)

    def _chunk_length(self, length: int) -> int:
        return length if length <= self.chunk_length else self.chunk_length

    def _window_offsets(self, num_chunks: int) -> list[int]:
        """Chunk offsets of a window, without repeats when the window wraps around few chunks."""
        offsets = []
        for offset in range(-self.chunks_before, self.chunks_after + 1):
            if offset % num_chunks not in [o % num_chunks for o in offsets]:
                offsets.append(offset)
        return offsets

    def _route(
        self, q: torch.Tensor, k: torch.Tensor, valid: torch.Tensor, causal: bool, chunk: int, masks: bool = True
    ) -> LSHRoutes:
        """Hash, sort and chunk. q, k: (B, H, L_pad, D) with L_pad a multiple of ``chunk``; valid: (B, L_pad).

        ``masks=False`` leaves ``keep`` and ``is_self`` None (the fused path builds them chunk by chunk)."""
        batch, heads, length, head_dim = q.shape
        num_buckets = self.num_buckets or 2 * math.ceil(length / chunk)
        rotations = self._rotations(head_dim, num_buckets, torch.promote_types(q.dtype, torch.float32), q.device)
        pad_bucket = torch.tensor(num_buckets, device=q.device)  # an extra last bucket for padded tokens
        valid_rounds = valid[:, None, None, :]  # (B, 1, 1, L_pad)
        q_order = sort_by_bucket(torch.where(valid_rounds, hash_buckets(q, rotations), pad_bucket))
        k_order = q_order
        if not self.shared_qk:
            k_order = sort_by_bucket(torch.where(valid_rounds, hash_buckets(k, rotations), pad_bucket))
        num_chunks = q_order.shape[-1] // chunk
        offsets = self._window_offsets(num_chunks)
        q_pos = q_order.view(batch, heads, num_chunks, chunk)  # (B, H, C, c)
        k_pos = chunk_window(k_order.view(batch, heads, num_chunks, chunk), offsets)  # (B, H, C, W)
        if not masks:
            return LSHRoutes(q_order, k_order, q_pos, k_pos, None, None)
        keep = valid[:, None, :].expand(batch, heads, length).gather(2, k_pos.flatten(2)).view(k_pos.shape)
        keep = keep.unsqueeze(-2).expand(*q_pos.shape, k_pos.shape[-1])  # (B, H, C, c, W)
        if causal:
            keep = keep & (k_pos.unsqueeze(-2) <= q_pos.unsqueeze(-1))
        is_self = (k_pos.unsqueeze(-2) == q_pos.unsqueeze(-1)) if self.shared_qk else None
        return LSHRoutes(q_order, k_order, q_pos, k_pos, keep, is_self)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """Tokens are sequence positions: ``grid`` and ``prefix_tokens`` change nothing (dimension-agnostic)."""
        batch, heads, length, head_dim = q.shape
        chunk = self._chunk_length(length)
        q, _ = pad_to_multiple(q, chunk)  # (B, H, L_pad, D)
        v, _ = pad_to_multiple(v, chunk)
        k = q if self.shared_qk else pad_to_multiple(k, chunk)[0]
        padded = q.shape[2]
        valid = torch.arange(padded, device=q.device)[None, :] < length  # (1, L_pad)
        if call.key_keep is not None:
            valid = valid & F.pad(call.key_keep, (0, padded - length), value=False)
        fused = self._use_fused(call, q)
        routes = self._route(q, k, valid.expand(batch, padded), call.causal, chunk, masks=not fused)
        keys = normalize_keys(q) if self.shared_qk else k
        if fused:
            out = self._attend_fused(q, keys, v, routes, valid.expand(batch, padded), call)  # (B, H, L_pad, D)
            return AttentionOutput(out[:, :, :length])

        num_chunks, window = routes.k_pos.shape[2], routes.k_pos.shape[3]
        q_sorted = gather_positions(q, routes.q_order).view(batch, heads, num_chunks, chunk, head_dim)
        k_window = gather_positions(keys, routes.k_pos.flatten(2)).view(batch, heads, num_chunks, window, head_dim)
        v_window = gather_positions(v, routes.k_pos.flatten(2)).view(batch, heads, num_chunks, window, head_dim)
        scores = torch.matmul(q_sorted, k_window.transpose(-1, -2))  # (B, H, C, c, W)
        scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
        if self.scale_logits:
            scores = scores * call.scaling
        if call.bias is not None:  # the bias of each sorted query and the keys of its window
            pairs = bias_per_head(call.bias, routes.q_pos.unsqueeze(-1), routes.k_pos.unsqueeze(-2))  # (B, H, C, c, W)
            scores = scores + pairs.to(scores.dtype)
        if routes.is_self is not None:
            scores = scores.masked_fill(routes.is_self, SELF_LOGIT)
        probs = masked_softmax(scores, routes.keep)  # (B, H, C, c, W)
        # Log-normaliser of each query's round; rounds with nothing to attend get the lowest finite value.
        lowest = torch.finfo(scores.dtype).min
        log_norm = torch.logsumexp(scores.masked_fill(~routes.keep, lowest), dim=-1)
        log_norm = log_norm.masked_fill(~routes.keep.any(-1), lowest)  # (B, H, C, c)
        probs = F.dropout(probs, p=call.dropout) if call.dropout > 0.0 else probs
        out_sorted = torch.matmul(probs.to(v.dtype), v_window)  # (B, H, C, c, D)

        out, slot_weights = self._combine_rounds(routes.q_order, out_sorted, log_norm, padded)
        weights = None
        if call.output_weights:
            weights = self._dense_weights(routes, probs, slot_weights, padded)[:, :, :length, :length].to(q.dtype)
        return AttentionOutput(out[:, :, :length], weights)

    def _use_fused(self, call: AttentionCall, q: torch.Tensor) -> bool:
        """The fused attention (:func:`gathered_attention`: no sorted copies or chunk scores kept for backward)
        serves every call but those returning weights, with attention dropout, or traced by torch.compile,
        which keep the plain autograd path (as do ``fused = False`` and, by default, tensors off the CPU)."""
        return self.fused_serves(call, q)

    def _attend_fused(
        self,
        q: torch.Tensor,
        keys: torch.Tensor,
        v: torch.Tensor,
        routes: LSHRoutes,
        valid: torch.Tensor,
        call: AttentionCall,
    ) -> torch.Tensor:
        """(B, H, L_pad, D) output of the fused path; q, keys, v: (B, H, L_pad, D), valid: (B, L_pad)."""
        out_sorted, log_norm, _ = gathered_attention(
            q,
            keys,
            v,
            routes.q_pos,
            routes.k_pos,
            key_ok=valid,
            causal_offset=0 if call.causal else None,
            self_logit=SELF_LOGIT if self.shared_qk else None,
            scaling=call.scaling if self.scale_logits else None,
            bias=call.bias,
        )  # (B, H, C, c, D), (B, H, C, c)
        if self.n_hashes > 1:
            return self._combine_rounds(routes.q_order, out_sorted, log_norm, q.shape[2])[0]
        # One round: its weight softmax([z]) is exactly 1 (and has zero gradient), so undoing the sort is all.
        index = routes.q_order.unsqueeze(-1).expand(*routes.q_order.shape, v.shape[-1])  # (B, H, L_pad, D)
        return torch.zeros_like(out_sorted.flatten(2, 3)).scatter_(2, index, out_sorted.flatten(2, 3))

    def _combine_rounds(
        self, q_order: torch.Tensor, out_sorted: torch.Tensor, log_norm: torch.Tensor, padded: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Undo the sort and mix the rounds with softmax weights over their log-normalisers.

        q_order: (B, H, n * L_pad); out_sorted: (B, H, C, c, D); log_norm: (B, H, C, c). Returns the output
        (B, H, L_pad, D) and the round weight of every sorted slot (B, H, n * L_pad).
        """
        batch, heads, _, _, head_dim = out_sorted.shape
        # Sorted slot s of round r holds position q_order[s]: its place in the round-major layout.
        slots = q_order + torch.arange(self.n_hashes, device=q_order.device).repeat_interleave(padded) * padded
        out_sorted, log_norm = out_sorted.flatten(2, 3), log_norm.flatten(2)  # (B, H, n * L_pad, ...)
        out_rounds = torch.zeros_like(out_sorted).scatter(2, slots.unsqueeze(-1).expand_as(out_sorted), out_sorted)
        norm_rounds = torch.zeros_like(log_norm).scatter(2, slots, log_norm)
        round_weights = torch.softmax(norm_rounds.view(batch, heads, self.n_hashes, padded), dim=2)  # (B, H, n, L_pad)
        out_rounds = out_rounds.view(batch, heads, self.n_hashes, padded, head_dim)
        out = (out_rounds * round_weights.unsqueeze(-1).to(out_rounds.dtype)).sum(2)  # (B, H, L_pad, D)
        return out, round_weights.flatten(2).gather(2, slots)

    @staticmethod
    def _dense_weights(
        routes: LSHRoutes, probs: torch.Tensor, query_round_weight: torch.Tensor, padded: int
    ) -> torch.Tensor:
        """(B, H, L_pad, L_pad) attention weights: each round's probabilities times its round weight, summed.

        Materialised only when weights are asked for. ``query_round_weight``: (B, H, n * L_pad) in sorted order.
        """
        batch, heads, num_chunks, chunk, window = probs.shape
        contributions = probs * query_round_weight.view(batch, heads, num_chunks, chunk, 1).to(probs.dtype)
        flat = routes.q_pos.unsqueeze(-1) * padded + routes.k_pos.unsqueeze(-2)  # (B, H, C, c, W)
        dense = probs.new_zeros(batch, heads, padded * padded)
        dense.scatter_add_(2, flat.flatten(2), contributions.flatten(2))
        return dense.view(batch, heads, padded, padded)

    def dense_mask(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        causal: bool = False,
        grid: tuple[int, int] | None = None,
        prefix_tokens: int = 0,
    ) -> torch.Tensor | None:
        """(B, H, L, L) keep mask of one round of hashing with separate keys (no padding mask).

        None with ``shared_qk`` (the keys are not ``k``) or with several rounds (a weighted union, not a mask).
        """
        if self.shared_qk or self.n_hashes != 1:
            return None
        if self.seed is None:
            raise ValueError(f"attention_type={self.name!r}: dense_mask needs a fixed `seed` to redraw the rotations")
        batch, heads, length, _ = q.shape
        chunk = self._chunk_length(length)
        q, _ = pad_to_multiple(q, chunk)
        k, _ = pad_to_multiple(k, chunk)
        padded = q.shape[2]
        valid = (torch.arange(padded, device=q.device) < length).expand(batch, padded)
        routes = self._route(q, k, valid, causal, chunk)
        flat = routes.q_pos.unsqueeze(-1) * padded + routes.k_pos.unsqueeze(-2)  # (B, H, C, c, W)
        mask = torch.zeros(batch, heads, padded * padded, dtype=torch.bool, device=q.device)
        mask.scatter_(2, flat.flatten(2), routes.keep.flatten(2))
        return mask.view(batch, heads, padded, padded)[:, :, :length, :length]
