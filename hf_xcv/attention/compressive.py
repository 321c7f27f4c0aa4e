"""``compressive``: the Compressive Transformer's attention (Rae et al. 2020).

Transformer-XL's memory (``xl``) plus a compressed memory of the positions evicted from it: each call attends
over [compressed memory; memory; current segment] with relative positions (see ``_segments``), then
compresses what falls out of the memory.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..utils.checks import check_int
from ..utils.errors import UsageError
from ._masks import dense_attention
from ._segments import CompressiveMemory, RelativeSegmentAttention, join_keep, last
from .registry import AttentionCall, AttentionOutput, register_attention


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
class CompressiveAttention(RelativeSegmentAttention):
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
        check_int("cmem_len", cmem_len, 0, owner=self.owner)
        check_int("compression_rate", compression_rate, 1, owner=self.owner)
        if compression not in MemoryCompressor.MODES:
            raise UsageError(f"compression must be one of {MemoryCompressor.MODES}, got {compression!r}")
        self.cmem_len = cmem_len
        self.compressor = MemoryCompressor(num_heads, head_dim, compression_rate, compression)

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {"mem_len": length, "cmem_len": 0}  # no compression: xl's exact setting

    def _initial_state(self, k: torch.Tensor) -> CompressiveMemory:
        batch, heads, _, dim = k.shape
        empty = k.new_zeros(batch, heads, 0, dim)
        return CompressiveMemory(empty, empty, None, empty, empty, None)

    def state_problems(self, state: Any, k: torch.Tensor) -> list[str]:
        if not isinstance(state, CompressiveMemory):
            return [f"it takes a CompressiveMemory as state, got {type(state).__name__}"]
        problems = []
        for name, tensor, mask in (
            ("keys", state.keys, state.keep),
            ("values", state.values, state.keep),
            ("compressed keys", state.compressed_keys, state.compressed_keep),
            ("compressed values", state.compressed_values, state.compressed_keep),
        ):
            problems += self.memory_problems(tensor, mask, k, name)
        return problems

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        state = self._initial_state(k) if call.state is None else call.state
        batch, compressed_len, memory_len = k.shape[0], state.compressed_keys.shape[2], state.keys.shape[2]
        # The uncompressed stream [memory; keys], then everything attended: [compressed; memory; keys].
        recent_keys = torch.cat([state.keys.to(k.dtype), k], dim=2)  # (B, H, M + Lk, D)
        recent_values = torch.cat([state.values.to(v.dtype), v], dim=2)  # (B, H, M + Lk, D)
        recent_keep = join_keep([(state.keep, memory_len), (call.key_keep, k.shape[2])], batch, k.device)
        keys = torch.cat([state.compressed_keys.to(k.dtype), recent_keys], dim=2)  # (B, H, C + M + Lk, D)
        values = torch.cat([state.compressed_values.to(v.dtype), recent_values], dim=2)
        all_keep = join_keep(
            [(state.compressed_keep, compressed_len), (recent_keep, recent_keys.shape[2])], batch, k.device
        )  # (B, C + M + Lk) or None
        out, probs = self.relative_attention(q, keys, values, all_keep, call.scaling, call.dropout)
        new_state, aux_loss = self._update(state, q, recent_keys, recent_values, recent_keep, call.scaling)
        return AttentionOutput(out, probs if call.output_weights else None, new_state, aux_loss)

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
            joined_keep = join_keep([(compressed[2], n_old), (new_keep, n_new)], batch, keys.device)
            compressed = (
                torch.cat([compressed[0].to(keys.dtype), new_keys.detach()], dim=2),
                torch.cat([compressed[1].to(values.dtype), new_values.detach()], dim=2),
                joined_keep,
            )
        slots = min(self.cmem_len, compressed[0].shape[2])
        new_state = CompressiveMemory(
            last(keys, kept, 2).detach(),
            last(values, kept, 2).detach(),
            last(keep, kept, 1),
            last(compressed[0], slots, 2),
            last(compressed[1], slots, 2),
            last(compressed[2], slots, 1),
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
