"""``linformer``: low-rank attention by learned projections along the sequence (Wang et al. 2020).

    head = softmax(Q (E K)^T * scaling) (F V),   E, F: (k, seq_len) learned

Keys and values are mixed along the *length* into ``k`` slots before attention, so a query attends to k
projected keys: O(L * k * D) time and O(L * k) memory. ``seq_len`` is the longest input the projections
cover; shorter inputs use their first columns (E[:, :L]). Length mixing makes causal attention impossible
(a slot mixes every position), so only bidirectional attention is served.

Padding (the paper has none): padded keys and values are zeroed before projecting, so their contents do
not matter, and a slot whose projection row puts no weight on any real key (only possible when E has exact
zeros, e.g. the identity or a pooling pattern) is dropped from the softmax like a padded key. With E = F = I
this is exactly masked softmax attention; with a dense E every slot stays and the padded positions simply
contribute nothing to the slots.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..utils.errors import UsageError
from ._masks import masked_softmax
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention

SHARING_CHOICES = ("none", "headwise", "kv", "layerwise")


def _project(projection: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Mix ``x`` (B, H, L, D) along its length with ``projection`` (P, k, L), P = 1 or H: (B, H, k, D).

    An einsum, so that a projection shared by the heads is not copied once per head.
    """
    if projection.shape[0] == 1:
        return torch.einsum("kn,bhnd->bhkd", projection[0], x)
    return torch.einsum("hkn,bhnd->bhkd", projection, x)


def _fused_softmax(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, slot_keep: torch.Tensor | None, call: AttentionCall
) -> torch.Tensor:
    """softmax(q keys^T * scaling, over the kept slots) values through PyTorch's fused kernel, which keeps no
    (Lq x k) scores or probabilities for backward (the (8, 8K, 256) probabilities are 64 MiB in float32).

    q (B, H, Lq, D), keys and values (B, H, k, D), ``slot_keep`` (B, P, 1, k) or None -> (B, H, Lq, D). A row whose
    slots are all dropped (no real key) gives zeros, as ``masked_softmax`` does: the kernel sees every slot
    there (a finite result) and the row is zeroed after it, which also zeroes its gradient.
    """
    empty = None
    if slot_keep is not None:
        empty = ~slot_keep.any(-1, keepdim=True)  # (B, P, 1, 1): nothing to attend
        slot_keep = slot_keep | empty
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=slot_keep, scale=call.scaling)
    return out if empty is None else out.masked_fill(empty, 0.0)


@register_attention
class LinformerAttention(AttentionCore):
    """Linformer attention with learned length projections E (keys) and F (values).

    Args:
        seq_len: the longest key sequence (columns of E and F); longer inputs are refused.
        k: projected length (rows of E and F). The paper uses 64-256.
        sharing: which projections are tied (the paper's options):
            ``"none"``: one E and one F per head, shaped (heads, k, seq_len);
            ``"headwise"``: one E and one F shared by all heads of the layer (the default);
            ``"kv"``: one matrix for keys and values of all heads (E = F);
            ``"layerwise"``: the paper shares one E across all *layers*; a core sees only its own layer, so
            here it is the same as ``"kv"`` inside the layer. Sharing across layers would need the model to
            tie the ``key_projection`` parameters and declare the tie (``save_pretrained`` refuses
            undeclared shared tensors); no hf_xcv model does that.

    Projections are initialised N(0, 1 / seq_len), so a projected key is a random mixture of the keys of
    about unit gain. ``make_exact_`` sets E = F = I (needs k == seq_len).
    """

    name = "linformer"
    capabilities = Capabilities(
        padding_mask=True,
        causal=False,
        cross_attention=True,
        returns_weights=False,
        length_constraint="at most seq_len keys (the learned length projections have seq_len columns)",
    )
    small_kwargs = {"seq_len": 64, "k": 8}
    fused = True  # without dropout, slots attended by PyTorch's fused kernel; False: masked softmax by autograd

    def __init__(self, num_heads: int, head_dim: int, seq_len: int = 4096, k: int = 256, sharing: str = "headwise"):
        super().__init__(num_heads, head_dim)
        for key, value in (("seq_len", seq_len), ("k", k)):
            if not isinstance(value, int) or value < 1:
                raise UsageError(f"{key} must be a positive integer, got {value!r}")
        if sharing not in SHARING_CHOICES:
            raise UsageError(f"sharing must be one of {SHARING_CHOICES}, got {sharing!r}")
        self.seq_len, self.k, self.sharing = seq_len, k, sharing
        copies = num_heads if sharing == "none" else 1
        self.key_projection = nn.Parameter(torch.randn(copies, k, seq_len) * seq_len**-0.5)  # E: (P, k, seq_len)
        self.value_projection = None  # F is E when keys and values share
        if sharing in ("none", "headwise"):
            self.value_projection = nn.Parameter(torch.randn(copies, k, seq_len) * seq_len**-0.5)  # F

    def length_projections(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """E and F restricted to the first ``length`` positions, each (P, k, length) with P = heads or 1."""
        values = self.key_projection if self.value_projection is None else self.value_projection
        return self.key_projection[..., :length], values[..., :length]

    def length_problems(
        self, q_len: int, kv_len: int, grid: tuple[int, int] | None = None, prefix_tokens: int = 0
    ) -> list[str]:
        if kv_len > self.seq_len:
            return [f"its {kv_len} keys exceed seq_len={self.seq_len}, the columns of its length projections"]
        return []

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {"seq_len": length, "k": length}

    @torch.no_grad()
    def make_exact_(self) -> None:
        """E = F = I: every slot is one key, so the core is plain softmax attention."""
        if self.k != self.seq_len:
            raise ValueError(
                f"make_exact_ needs k == seq_len (identity projections), got k={self.k}, seq_len={self.seq_len}"
            )
        for projection in (self.key_projection, self.value_projection):
            if projection is not None:
                projection.copy_(torch.eye(self.k, dtype=projection.dtype).expand_as(projection))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """``grid`` and ``prefix_tokens`` change nothing; ``dropout`` acts on the (Lq x k) probabilities."""
        kv_len, keep = k.shape[2], call.key_keep  # (B, Lk) or None
        e, f = (p.to(k.dtype) for p in self.length_projections(kv_len))  # (P, k, Lk) each
        slot_keep = None
        if keep is not None:
            padded = ~keep[:, None, :, None]  # (B, 1, Lk, 1)
            k, v = k.masked_fill(padded, 0.0), v.masked_fill(padded, 0.0)  # padding adds nothing to any slot
            # a slot whose key projection row puts no weight on a real key is itself padding
            slot_keep = (e.abs() @ (~padded).to(e.dtype)).squeeze(-1) > 0  # (B, P, k)
            slot_keep = slot_keep[:, :, None, :]  # (B, P, 1, k)
        projected_k, projected_v = _project(e, k), _project(f, v)  # (B, H, k, D) each
        if self.fused and call.dropout == 0.0:  # probability dropout: the autograd path below
            return AttentionOutput(_fused_softmax(q, projected_k, projected_v, slot_keep, call))
        scores = q @ projected_k.transpose(-1, -2) * call.scaling  # (B, H, Lq, k)
        probs = masked_softmax(scores, slot_keep)
        probs = nn.functional.dropout(probs, p=call.dropout) if call.dropout > 0.0 else probs
        return AttentionOutput(probs @ projected_v)  # (B, H, Lq, D)
