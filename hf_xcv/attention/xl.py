"""``xl``: Transformer-XL attention (Dai et al. 2019): segment recurrence with relative positions.

Each call attends over [memory; current segment], causally inside the segment; the memory of projected keys
and values carried to the next call is the last ``mem_len`` positions. See ``_segments`` for the score, the
memory semantics and how they differ from the paper's re-projected hidden states.
"""

from __future__ import annotations

from typing import Any

import torch

from ._segments import RelativeSegmentAttention, SegmentMemory, join_keep, last
from .registry import AttentionCall, AttentionOutput, register_attention


@register_attention
class TransformerXLAttention(RelativeSegmentAttention):
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
    small_kwargs = {"mem_len": 8}

    def __init__(self, num_heads: int, head_dim: int, mem_len: int = 512, clamp_len: int | None = None):
        super().__init__(num_heads, head_dim, mem_len, clamp_len)

    def state_problems(self, state: Any, k: torch.Tensor) -> list[str]:
        if not isinstance(state, SegmentMemory):
            return [f"it takes a SegmentMemory as state, got {type(state).__name__}"]
        return self.memory_problems(state.keys, state.keep, k, "keys") + self.memory_problems(
            state.values, state.keep, k, "values"
        )

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        batch, heads, k_len, dim = k.shape
        state = call.state
        if state is None:
            empty = k.new_zeros(batch, heads, 0, dim)
            state = SegmentMemory(empty, empty, None)
        memory_len = state.keys.shape[2]
        keys = torch.cat([state.keys.to(k.dtype), k], dim=2)  # (B, H, M + Lk, D)
        values = torch.cat([state.values.to(v.dtype), v], dim=2)  # (B, H, M + Lk, D)
        keep = join_keep([(state.keep, memory_len), (call.key_keep, k_len)], batch, k.device)  # (B, M + Lk) or None
        out, probs = self.relative_attention(q, keys, values, keep, call.scaling, call.dropout)
        kept = min(self.mem_len, keys.shape[2])
        memory = SegmentMemory(
            last(keys, kept, 2).detach(), last(values, kept, 2).detach(), last(keep, kept, 1)
        )  # (B, H, min(mem_len, M + Lk), D)
        return AttentionOutput(out, probs if call.output_weights else None, memory)
