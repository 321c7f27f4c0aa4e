"""Segment-recurrent attention: Transformer-XL (Dai et al. 2019) and the Compressive Transformer (Rae et al. 2020).

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

from .full import dense_attention
from .registry import AttentionCore, AttentionOutput, Capabilities, register_attention
from .utils import check_int, key_padding_mask


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


class _RelativeSegmentAttention(AttentionCore):
    """What Transformer-XL and the Compressive Transformer share: u, v, W_R and the relative attention."""

    def __init__(self, num_heads: int, head_dim: int, mem_len: int, clamp_len: int | None):
        super().__init__(num_heads, head_dim)
        check_int(self.name, "mem_len", mem_len, 0)
        if clamp_len is not None:
            check_int(self.name, "clamp_len", clamp_len, 1)
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

    def _check_call(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attention_mask: torch.Tensor | None,
        causal: bool,
    ) -> torch.Tensor | None:
        """Refuse what the core cannot serve; return the (B, Lk) key keep mask or None."""
        reasons = [] if causal else ["it is only defined for causal (autoregressive) attention"]
        reasons += self.length_problems(q.shape[2], k.shape[2])
        if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
            reasons.append(f"q, k, v shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)} do not fit together")
        if reasons:
            raise ValueError(f"attention_type={self.name!r} cannot be used here: " + "; ".join(reasons))
        return key_padding_mask(attention_mask, q.shape[0], k.shape[2], self.name)

    def _check_memory(self, keys: torch.Tensor, keep: torch.Tensor | None, k: torch.Tensor, what: str) -> None:
        batch, heads, _, dim = k.shape
        if keys.dim() != 4 or (keys.shape[0], keys.shape[1], keys.shape[3]) != (batch, heads, dim):
            raise ValueError(
                f"state {what} of shape {tuple(keys.shape)} do not fit batch {batch}, {heads} heads, head_dim {dim}"
            )
        if keep is not None and keep.shape != (batch, keys.shape[2]):
            raise ValueError(f"state keep mask of shape {tuple(keep.shape)} does not fit {what} {tuple(keys.shape)}")

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


def _join_keep(parts: list[tuple[torch.Tensor | None, int]], batch: int, device: torch.device) -> torch.Tensor | None:
    """Concatenate (B, n) keep masks given as (mask or None, n); None when no part has one."""
    if all(mask is None for mask, _ in parts):
        return None
    filled = [torch.ones(batch, n, dtype=torch.bool, device=device) if mask is None else mask for mask, n in parts]
    return torch.cat(filled, dim=1)


def _last(tensor: torch.Tensor | None, count: int, dim: int) -> torch.Tensor | None:
    """The last ``count`` entries along ``dim`` (none for count 0, unlike a ``-0`` slice)."""
    if tensor is None:
        return None
    return tensor.narrow(dim, tensor.shape[dim] - count, count)


@register_attention
class TransformerXLAttention(_RelativeSegmentAttention):
    """Transformer-XL attention: segment recurrence with a memory of ``mem_len`` positions, relative positions.

    Args:
        mem_len: positions of memory carried to the next call (the paper's enwik8 base model: 512; its
            WikiText-103 base model: 150). 0 keeps no memory.
        clamp_len: distances beyond this are treated as this distance (the paper clamps at evaluation, e.g.
            820 on enwik8); None for no clamping.

    ``state`` is a :class:`SegmentMemory` (or None for the first segment); the output's ``state`` is the new
    memory, detached. ``weights`` cover [memory; keys]: (B, H, Lq, M + Lk).
    """

    name = "xl"
    capabilities = Capabilities(
        padding_mask=True,
        causal=True,
        returns_weights=True,
        stateful=True,
        requires_causal=True,
        relative_positions=True,
        length_constraint="any length; keys are the queries' own stream (kv_len >= q_len)",
    )
    small_kwargs = {"mem_len": 8}

    def __init__(self, num_heads: int, head_dim: int, mem_len: int = 512, clamp_len: int | None = None):
        super().__init__(num_heads, head_dim, mem_len, clamp_len)

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
        keep = self._check_call(q, k, v, attention_mask, causal)  # (B, Lk) or None
        batch, heads, k_len, dim = k.shape
        if state is None:
            empty = k.new_zeros(batch, heads, 0, dim)
            state = SegmentMemory(empty, empty, None)
        if not isinstance(state, SegmentMemory):
            raise ValueError(f"attention_type='xl' takes a SegmentMemory as state, got {type(state).__name__}")
        self._check_memory(state.keys, state.keep, k, "keys")
        self._check_memory(state.values, state.keep, k, "values")
        memory_len = state.keys.shape[2]
        keys = torch.cat([state.keys.to(k.dtype), k], dim=2)  # (B, H, M + Lk, D)
        values = torch.cat([state.values.to(v.dtype), v], dim=2)  # (B, H, M + Lk, D)
        keep = _join_keep([(state.keep, memory_len), (keep, k_len)], batch, k.device)  # (B, M + Lk) or None
        out, probs = self.relative_attention(q, keys, values, keep, scaling, dropout)
        kept = min(self.mem_len, keys.shape[2])
        memory = SegmentMemory(
            _last(keys, kept, 2).detach(), _last(values, kept, 2).detach(), _last(keep, kept, 1)
        )  # (B, H, min(mem_len, M + Lk), D)
        return AttentionOutput(out, probs if output_weights else None, memory)


class MemoryCompressor(nn.Module):
    """f_c of the Compressive Transformer: every ``rate`` consecutive memories -> one compressed memory.

    ``mode="conv"`` is a learned per-head 1-D convolution with kernel = stride = ``rate`` (separate weights
    for keys and values, a bias for values), initialised to mean pooling; ``"mean"`` and ``"max"`` are
    parameter-free pooling. Padded positions do not contribute (zeroed for conv, skipped for pooling); a
    compressed slot is kept when any of its sources is.
    """

    MODES = ("conv", "mean", "max")

    def __init__(self, num_heads: int, head_dim: int, rate: int, mode: str):
        super().__init__()
        self.rate = rate
        self.mode = mode
        if mode == "conv":
            pooling = torch.eye(head_dim).expand(num_heads, rate, head_dim, head_dim) / rate  # (H, c, D_in, D_out)
            # No key bias: it would add the same q.b to every compressed score of a query, which softmax cancels.
            self.key_weight = nn.Parameter(pooling.clone())
            self.value_weight = nn.Parameter(pooling.clone())
            self.value_bias = nn.Parameter(torch.zeros(num_heads, head_dim))  # (H, D)

    @property
    def learned(self) -> bool:
        return self.mode == "conv"

    def _pool(self, x: torch.Tensor, keep: torch.Tensor | None, weight=None, bias=None) -> torch.Tensor:
        """(B, H, n*c, D) -> (B, H, n, D); ``keep``: (B, n, c) or None."""
        batch, heads, length, dim = x.shape
        groups = x.view(batch, heads, length // self.rate, self.rate, dim)  # (B, H, n, c, D)
        mask = None if keep is None else keep[:, None, :, :, None]  # (B, 1, n, c, 1)
        if self.mode == "conv":
            if mask is not None:
                groups = groups * mask
            out = torch.einsum("bhncd,hcde->bhne", groups, weight.to(x.dtype))  # (B, H, n, D)
            return out if bias is None else out + bias.to(x.dtype)[None, :, None, :]
        if self.mode == "mean":
            if mask is None:
                return groups.mean(dim=3)
            return (groups * mask).sum(dim=3) / mask.sum(dim=3).clamp(min=1)
        if mask is not None:
            groups = groups.masked_fill(~mask, float("-inf"))
            return groups.amax(dim=3).masked_fill(~mask.any(dim=3), 0.0)
        return groups.amax(dim=3)

    def forward(
        self, keys: torch.Tensor, values: torch.Tensor, keep: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(B, H, n*c, D) keys and values, (B, n*c) keep -> (B, H, n, D) each and (B, n) keep."""
        batch, _, length, _ = keys.shape
        groups = None if keep is None else keep.view(batch, length // self.rate, self.rate)  # (B, n, c)
        if self.learned:
            new_keys = self._pool(keys, groups, self.key_weight)
            new_values = self._pool(values, groups, self.value_weight, self.value_bias)
        else:
            new_keys, new_values = self._pool(keys, groups), self._pool(values, groups)
        return new_keys, new_values, None if groups is None else groups.any(dim=-1)


@register_attention
class CompressiveAttention(_RelativeSegmentAttention):
    """Compressive Transformer attention: Transformer-XL's memory plus a compressed memory of evicted positions.

    Args:
        mem_len: positions of (uncompressed) memory (paper: 512 on PG-19).
        cmem_len: compressed memory slots, oldest dropped first (paper: 512 on PG-19). 0 makes this ``xl``.
        compression_rate: c, evicted positions per compressed slot (paper: 2 on PG-19, 3 on enwik8, 4 on
            WikiText-103).
        compression: f_c: ``"conv"`` (learned per-head strided convolution, the paper's best with the
            attention-reconstruction loss), ``"mean"`` or ``"max"`` pooling.
        clamp_len: as for ``xl``.

    Each call attends over [compressed memory; memory; keys] (relative positions count every slot as one
    position). Then the positions pushed out of the memory (the oldest of [memory; keys] beyond ``mem_len``)
    are compressed in groups of c and appended to the compressed memory. Only whole groups of the newest
    evicted positions are compressed, at most ``cmem_len`` of them: an oldest remainder of fewer than c
    positions is dropped (segments of a multiple of c tokens lose nothing), and so are groups that would be
    pushed out of the compressed memory in the same call.
    When something was compressed with ``"conv"``, ``aux_loss`` is the paper's attention-reconstruction loss:
    the mean squared difference between content attention of the current queries over the evicted keys and
    values and over their compression, with queries, keys and values detached, so it trains only the
    compressor (which the main path never differentiates: the state is detached). Pooling has nothing to
    train and returns no aux_loss.
    """

    name = "compressive"
    capabilities = Capabilities(
        padding_mask=True,
        causal=True,
        returns_weights=True,
        stateful=True,
        requires_causal=True,
        relative_positions=True,
        length_constraint="any length; keys are the queries' own stream (kv_len >= q_len)",
    )
    # A 7-token call already evicts and compresses (mem_len 4): the compressor gets gradient in one pass.
    small_kwargs = {"mem_len": 4, "cmem_len": 4, "compression_rate": 2}

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        mem_len: int = 512,
        cmem_len: int = 512,
        compression_rate: int = 2,
        compression: str = "conv",
        clamp_len: int | None = None,
    ):
        super().__init__(num_heads, head_dim, mem_len, clamp_len)
        check_int(self.name, "cmem_len", cmem_len, 0)
        check_int(self.name, "compression_rate", compression_rate, 1)
        if compression not in MemoryCompressor.MODES:
            raise ValueError(f"compression must be one of {MemoryCompressor.MODES}, got {compression!r}")
        self.cmem_len = cmem_len
        self.compressor = MemoryCompressor(num_heads, head_dim, compression_rate, compression)

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {"mem_len": length, "cmem_len": 0}  # no compression: xl's exact setting

    def _initial_state(self, k: torch.Tensor) -> CompressiveMemory:
        batch, heads, _, dim = k.shape
        empty = k.new_zeros(batch, heads, 0, dim)
        return CompressiveMemory(empty, empty, None, empty, empty, None)

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
        keep = self._check_call(q, k, v, attention_mask, causal)  # (B, Lk) or None
        state = self._initial_state(k) if state is None else state
        if not isinstance(state, CompressiveMemory):
            raise ValueError(
                f"attention_type='compressive' takes a CompressiveMemory as state, got {type(state).__name__}"
            )
        for name, tensor, mask in (
            ("keys", state.keys, state.keep),
            ("values", state.values, state.keep),
            ("compressed keys", state.compressed_keys, state.compressed_keep),
            ("compressed values", state.compressed_values, state.compressed_keep),
        ):
            self._check_memory(tensor, mask, k, name)
        batch, compressed_len, memory_len = k.shape[0], state.compressed_keys.shape[2], state.keys.shape[2]
        # The uncompressed stream [memory; keys], then everything attended: [compressed; memory; keys].
        recent_keys = torch.cat([state.keys.to(k.dtype), k], dim=2)  # (B, H, M + Lk, D)
        recent_values = torch.cat([state.values.to(v.dtype), v], dim=2)  # (B, H, M + Lk, D)
        recent_keep = _join_keep([(state.keep, memory_len), (keep, k.shape[2])], batch, k.device)  # (B, M + Lk)
        keys = torch.cat([state.compressed_keys.to(k.dtype), recent_keys], dim=2)  # (B, H, C + M + Lk, D)
        values = torch.cat([state.compressed_values.to(v.dtype), recent_values], dim=2)
        all_keep = _join_keep(
            [(state.compressed_keep, compressed_len), (recent_keep, recent_keys.shape[2])], batch, k.device
        )  # (B, C + M + Lk) or None
        out, probs = self.relative_attention(q, keys, values, all_keep, scaling, dropout)
        new_state, aux_loss = self._update(state, q, recent_keys, recent_values, recent_keep, scaling)
        return AttentionOutput(out, probs if output_weights else None, new_state, aux_loss)

    def _update(
        self,
        state: CompressiveMemory,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        keep: torch.Tensor | None,
        scaling: float | None,
    ) -> tuple[CompressiveMemory, torch.Tensor | None]:
        """Keep the last ``mem_len`` of [memory; keys]; compress the evicted ones into the compressed memory."""
        total = keys.shape[2]
        kept = min(self.mem_len, total)
        evicted = total - kept
        rate = self.compressor.rate
        compressed = (state.compressed_keys, state.compressed_values, state.compressed_keep)
        aux_loss = None
        if self.cmem_len > 0 and evicted >= rate:
            # Whole groups of the newest evicted positions, no more than the compressed memory holds: an oldest
            # remainder (< rate positions) and groups that would be pushed straight out again are dropped.
            start = evicted - min(evicted // rate, self.cmem_len) * rate
            old_keys = keys[:, :, start:evicted].detach()  # (B, H, n*c, D)
            old_values = values[:, :, start:evicted].detach()
            old_keep = None if keep is None else keep[:, start:evicted]  # (B, n*c)
            new_keys, new_values, new_keep = self.compressor(old_keys, old_values, old_keep)  # (B, H, n, D)
            if self.compressor.learned:
                aux_loss = self.reconstruction_loss(
                    q.detach(), (old_keys, old_values, old_keep), (new_keys, new_values, new_keep), scaling
                )
            batch, n_old, n_new = keys.shape[0], compressed[0].shape[2], new_keys.shape[2]
            joined_keep = _join_keep([(compressed[2], n_old), (new_keep, n_new)], batch, keys.device)
            compressed = (
                torch.cat([compressed[0].to(keys.dtype), new_keys.detach()], dim=2),
                torch.cat([compressed[1].to(values.dtype), new_values.detach()], dim=2),
                joined_keep,
            )
        slots = min(self.cmem_len, compressed[0].shape[2])
        new_state = CompressiveMemory(
            _last(keys, kept, 2).detach(),
            _last(values, kept, 2).detach(),
            _last(keep, kept, 1),
            _last(compressed[0], slots, 2),
            _last(compressed[1], slots, 2),
            _last(compressed[2], slots, 1),
        )
        return new_state, aux_loss

    @staticmethod
    def reconstruction_loss(
        q: torch.Tensor,
        old: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
        new: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
        scaling: float | None,
    ) -> torch.Tensor:
        """Mean squared difference of attn(q, old memories) and attn(q, compressed memories).

        Content-only attention (no positions, no causal mask), as in the paper. ``q``: (B, H, Lq, D) and the
        old keys/values should be detached so that only the compressor that made ``new`` gets gradient.
        """
        old_keep = None if old[2] is None else old[2][:, None, None, :]  # (B, 1, 1, n*c)
        new_keep = None if new[2] is None else new[2][:, None, None, :]  # (B, 1, 1, n)
        target, _ = dense_attention(q, old[0], old[1], old_keep, scaling)  # (B, H, Lq, D)
        attempt, _ = dense_attention(q, new[0], new[1], new_keep, scaling)  # (B, H, Lq, D)
        return (attempt - target).square().mean()


__all__ = [
    "CompressiveAttention",
    "CompressiveMemory",
    "MemoryCompressor",
    "SegmentMemory",
    "TransformerXLAttention",
    "relative_shift",
    "sinusoid_embeddings",
]
