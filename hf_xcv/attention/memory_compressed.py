"""``memory_compressed``: memory-compressed attention with local blocks (Liu et al. 2018, "Generating
Wikipedia by Summarizing Long Sequences").

Keys and values are compressed per head by a learned strided convolution with kernel = stride =
``compression`` (paper: 3): every ``compression`` consecutive tokens become one memory *slot*. The paper's
decoder (T-DMCA) alternates local-attention layers (blocks of 256 tokens) with memory-compressed layers; one
registry core serves every layer of a model, so this core fuses the two: each query attends, in one softmax,

* exactly to the tokens of its own local block of ``block_size`` tokens (causal: those not after it), and
* to the compressed slots of the other blocks (causal: of the blocks before its own).

Slots are formed inside each block (a block's last slot is zero-padded when ``compression`` does not divide
``block_size``), so no slot straddles two blocks: a causal query only sees slots of complete past blocks and
the compressed memory leaks nothing from the future, while its own block gives it the recent tokens (itself
included) uncompressed. ``block_size=0`` is the paper's pure memory-compressed layer: queries see only the
slots (made over the whole sequence); causal, a slot is visible once its last token is not after the query,
so the first ``compression - 1`` queries of a sequence have nothing to attend to and return zeros.

``compression=1`` with identity convolutions (:meth:`MemoryCompressedAttention.make_exact_`) is exact
softmax attention: every token is then seen exactly once, in its own block or as its own slot.

Padding: masked keys and values are zeroed before compression, and a slot is kept if any of its tokens is.
Prefix tokens ([CLS]) are not compressed: every query sees them and they attend to every token.
Cost O(L (block_size + L / compression)); the probabilities are over slots, so no token weights are returned.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..utils.checks import check_int
from ._blocks import attend_layout, local_1d_layout
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention


def compress(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, group: int) -> torch.Tensor:
    """Strided per-head convolution inside groups of ``group`` tokens.

    x (B, H, T, D) -> slots (B, H, ceil(T / group) * ceil(group / r), D) with ``weight`` (H, r, D, D) and
    ``bias`` (H, D): slot s of group n is sum_t x[n * group + s * r + t] @ weight[:, t] + bias (taps past the
    group or the sequence read zeros).
    """
    batch, heads, tokens, dim = x.shape
    ratio = weight.shape[1]
    groups, per_group = -(-tokens // group), -(-group // ratio)
    x = F.pad(x, (0, 0, 0, groups * group - tokens)).view(batch, heads, groups, group, dim)  # (B, H, n, g, D)
    x = F.pad(x, (0, 0, 0, per_group * ratio - group)).view(batch, heads, groups, per_group, ratio, dim)
    slots = torch.einsum("bhnsrd,hrde->bhnse", x, weight) + bias[:, None, None, :]  # (B, H, n, s, D)
    return slots.reshape(batch, heads, groups * per_group, dim)


def slot_tokens(tokens: int, group: int, ratio: int, device) -> torch.Tensor:
    """(S, r) token index of each tap of each slot (``tokens`` where the tap reads padding)."""
    groups, per_group = -(-tokens // group), -(-group // ratio)
    tap = torch.arange(per_group * ratio, device=device).view(per_group, ratio)  # (s, r) position in group
    index = torch.arange(groups, device=device)[:, None, None] * group + tap  # (n, s, r)
    index = torch.where((tap < group) & (index < tokens), index, tokens)
    return index.view(groups * per_group, ratio)


@register_attention
class MemoryCompressedAttention(AttentionCore):
    """Local block attention plus convolution-compressed memory of the rest (see the module docstring).

    Args:
        compression: kernel size and stride of the per-head key / value convolutions (paper: 3).
        block_size: tokens per local block (paper: 256); 0 for compressed memory only (the paper's MCA layer).

    The convolutions are parameters ``key_conv_weight`` / ``value_conv_weight`` (heads, compression,
    head_dim, head_dim) and ``key_conv_bias`` / ``value_conv_bias`` (heads, head_dim), initialised to mean
    pooling (weight I / compression on every tap, zero bias).
    """

    name = "memory_compressed"
    capabilities = Capabilities(
        padding_mask=True,
        causal=True,
        length_constraint="any length (padded to block and compression multiples internally); q_len <= kv_len, "
        "the queries being the last kv tokens",
    )
    refusals = {
        "returns_weights": "it cannot return attention weights: returning attention weights (output_attentions=True) "
        "needs probabilities over tokens, and its probabilities are over compressed memory slots",
    }
    small_kwargs = {"compression": 2, "block_size": 4}
    # None (default): the fused path on CPU tensors only (AttentionCore.use_fused); True: always; False: the blocked
    # tensors on autograd's graph (see ``attend_layout``), e.g. to compare with
    fused: bool | None = None

    def __init__(self, num_heads: int, head_dim: int, compression: int = 3, block_size: int = 256):
        super().__init__(num_heads, head_dim)
        self.compression = check_int("compression", compression, 1, owner=self.owner)
        self.block_size = check_int("block_size", block_size, 0, owner=self.owner)
        mean = torch.eye(head_dim).expand(num_heads, compression, head_dim, head_dim) / compression
        self.key_conv_weight = nn.Parameter(mean.clone())  # (H, r, D, D)
        self.value_conv_weight = nn.Parameter(mean.clone())  # (H, r, D, D)
        self.key_conv_bias = nn.Parameter(torch.zeros(num_heads, head_dim))  # (H, D)
        self.value_conv_bias = nn.Parameter(torch.zeros(num_heads, head_dim))  # (H, D)

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        # Any block size is exact at compression 1; a few blocks exercise both the local and the memory part.
        return {"compression": 1, "block_size": max(1, length // 3)}

    @torch.no_grad()
    def make_exact_(self) -> None:
        """Identity convolutions: with ``compression=1`` every slot is its token's own key and value."""
        if self.compression != 1:
            raise ValueError(f"attention_type={self.name!r} is exact only with compression=1, got {self.compression}")
        for weight, bias in (
            (self.key_conv_weight, self.key_conv_bias),
            (self.value_conv_weight, self.value_conv_bias),
        ):
            weight.copy_(torch.eye(self.head_dim).expand_as(weight))
            bias.zero_()

    def length_problems(self, q_len: int, kv_len: int, grid=None, prefix_tokens: int = 0) -> list[str]:
        if q_len > kv_len:
            return [f"it has more queries ({q_len}) than keys ({kv_len}); queries must be the last kv tokens"]
        return []

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        q_len, kv_len, prefix_tokens = q.shape[2], k.shape[2], call.prefix_tokens
        local = self.block_size > 0
        group = self.block_size if local else max(kv_len - prefix_tokens, 1)  # slots never straddle a group
        # Queries by block: with local blocks, each block also sees its own tokens; else one block, no keys.
        layout = local_1d_layout(q_len, kv_len, prefix_tokens, group, 0, call.causal, q.device)  # own block only
        if not local:
            layout.keys, layout.keep = layout.keys[:, :0], layout.keep[..., :0]
        query_tokens = torch.where(layout.queries < q_len, layout.queries + kv_len - q_len, -1)  # (N, Q), -1: empty
        slots = self.memory(k, v, call.key_keep, prefix_tokens, group, call.causal, query_tokens)
        values, _ = attend_layout(q, k, v, layout, call, extra_shared=slots, fused=self.use_fused(q))
        return AttentionOutput(values, None)

    def memory(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        key_keep: torch.Tensor | None,
        prefix_tokens: int,
        group: int,
        causal: bool,
        query_tokens: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Compressed keys and values (B, H, S, D) of the non-prefix tokens and which query block / query may
        see each slot: keep broadcastable to (B, 1, N, Q, S). ``query_tokens`` (N, Q): token index of the
        layout's queries, -1 for empty slots (every block holds at least one query)."""
        tokens = k.shape[2] - prefix_tokens
        k, v = k[:, :, prefix_tokens:], v[:, :, prefix_tokens:]  # (B, H, T, D)
        taps = slot_tokens(tokens, group, self.compression, k.device)  # (S, r) token of each tap
        slot_valid = (taps < tokens).any(dim=1)[None]  # (1, S)
        if key_keep is not None:
            token_keep = key_keep[:, prefix_tokens:]  # (B, T)
            # Zero masked tokens so that they never reach a slot, and keep slots with a kept token.
            dropped = ~token_keep[:, None, :, None]  # (B, 1, T, 1)
            k, v = k.masked_fill(dropped, 0.0), v.masked_fill(dropped, 0.0)
            slot_valid = F.pad(token_keep, (0, 1))[:, taps].any(dim=2)  # (B, S)
        slot_k = compress(k, self.key_conv_weight, self.key_conv_bias, group)  # (B, H, S, D)
        slot_v = compress(v, self.value_conv_weight, self.value_conv_bias, group)  # (B, H, S, D)
        keep = slot_valid[:, None, None, None, :]  # (B or 1, 1, 1, 1, S)
        query_pos = query_tokens - prefix_tokens  # (N, Q) position among the non-prefix tokens
        if self.block_size > 0:
            slot_block = torch.arange(taps.shape[0], device=k.device) // -(-group // self.compression)  # (S,)
            query_block = query_pos.amax(dim=1, keepdim=True) // group  # (N, 1): the block of its queries
            visible = slot_block < query_block if causal else slot_block != query_block  # (N, S)
            keep = keep & visible[None, None, :, None, :]
        elif causal:
            last = torch.where(taps < tokens, taps, -1).amax(dim=1)  # (S,) last real token of each slot
            keep = keep & (last <= query_pos[:, :, None])[None, None]  # (1, 1, N, Q, S)
        return slot_k, slot_v, keep
