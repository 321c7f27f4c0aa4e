"""Set Transformer attention (Lee et al. 2019): the ``isab`` core and :class:`PoolingByMultiheadAttention`.

ISAB_m(X) = MAB(X, MAB(I, X)): m learned inducing points I first attend to the N inputs, then the inputs
attend to that m-element summary, O(N * m) instead of O(N^2). As a registry core it works on the owning
layer's projected queries, keys and values (per head, (B, H, L, D)):

    A1 = softmax(I K^T * scaling)            (B, H, m, Lk)   inducing points attend to the inputs
    K_I, V_I = A1 K, A1 V                    (B, H, m, D)    the summary's keys and values
    A2 = softmax(Q K_I^T * scaling)          (B, H, Lq, m)   the inputs attend to the summary
    out = A2 V_I = (A2 A1) V

Since the projections are linear, A1 K = (A1 X) W_k: the summary H = A1 X is attention pooling of the
inputs, and its keys and values are the layer's own projections of H, as in ISAB's second MAB. What a core
cannot hold is left out: the residuals, LayerNorms and row-wise feed-forward inside each MAB (the model's
blocks around the layer supply their own), and separate projections for the two attentions. The effective
weights A2 A1 (rows sum to one) are returned on request.

Padding masks keys in the first attention only (the summary is built from real inputs); a batch row with
no real key gets zeros. It is permutation-equivariant, so it has no causal form. The inducing points are
per head, shaped (heads, m, head_dim).

:class:`PoolingByMultiheadAttention` is Set Transformer's PMA for model heads: learned seed vectors attend
over a (padded) set and return (B, num_seeds, hidden).
"""

from __future__ import annotations

import torch
from torch import nn

from ..utils.errors import UsageError
from ._masks import masked_softmax
from .layer import MultiHeadAttention
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention


@register_attention
class InducedSetAttention(AttentionCore):
    """ISAB attention through ``num_inducing`` learned inducing points per head.

    Args:
        num_inducing: number of inducing points m (the official Set Transformer uses 32).

    The inducing points are initialised Xavier-uniform per head, like the reference code.
    """

    weights_are_copies = True  # the maps are assembled apart from the values

    name = "isab"
    capabilities = Capabilities(
        padding_mask=True,
        causal=False,
        cross_attention=True,
        returns_weights=True,
        length_constraint="any length",
    )
    small_kwargs = {"num_inducing": 4}

    def __init__(self, num_heads: int, head_dim: int, num_inducing: int = 32):
        super().__init__(num_heads, head_dim)
        if not isinstance(num_inducing, int) or isinstance(num_inducing, bool) or num_inducing < 1:
            raise UsageError(f"num_inducing must be a positive integer, got {num_inducing!r}")
        self.num_inducing = num_inducing
        bound = (6 / (num_inducing + head_dim)) ** 0.5
        self.inducing = nn.Parameter(torch.empty(num_heads, num_inducing, head_dim).uniform_(-bound, bound))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """``grid`` and ``prefix_tokens`` change nothing; ``dropout`` acts on both probability matrices."""
        keep, scaling, dropout = call.key_keep, call.scaling, call.dropout  # keep: (B, Lk) or None
        inducing = self.inducing.to(q.dtype)  # (H, m, D)
        gather = masked_softmax(inducing @ k.transpose(-1, -2) * scaling, None if keep is None else keep[:, None, None])
        gather = nn.functional.dropout(gather, p=dropout, training=dropout > 0.0)  # (B, H, m, Lk)
        summary_k, summary_v = gather @ k, gather @ v  # (B, H, m, D) each
        # a row without real keys has an empty summary: its queries attend to nothing
        rows = None if keep is None else keep.any(-1)[:, None, None, None]  # (B, 1, 1, 1)
        spread = masked_softmax(q @ summary_k.transpose(-1, -2) * scaling, rows)  # (B, H, Lq, m)
        spread = nn.functional.dropout(spread, p=dropout, training=dropout > 0.0)
        weights = spread @ gather if call.output_weights else None  # (B, H, Lq, Lk), only when asked
        return AttentionOutput(spread @ summary_v, weights)


class PoolingByMultiheadAttention(nn.Module):
    """Set Transformer's PMA_k(X) = MAB(S, rFF(X)): ``num_seeds`` learned seeds attend over a set.

    MAB(S, Z) = LN(H + rFF(H)) with H = LN(S + MultiHead(S, Z, Z)); rFF is Linear + ReLU as in the
    reference code. Padding is a key mask (padded elements are never attended); a set with no real element
    pools to LN(S + 0) passed through the feed-forward, the same for every such row.

    Args:
        hidden_size: width of the set elements and of the pooled outputs.
        num_heads: attention heads; must divide ``hidden_size``.
        num_seeds: number of pooled outputs k (1 for a single summary vector).
        layer_norm: apply the MAB's two LayerNorms (the paper's MAB; the reference code's ``ln`` flag).
        dropout: dropout on the attention probabilities (training only).
        layer_norm_eps: epsilon of the LayerNorms.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_seeds: int = 1,
        layer_norm: bool = True,
        dropout: float = 0.0,
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        if num_seeds < 1:
            raise UsageError(f"num_seeds must be a positive integer, got {num_seeds}")
        self.seeds = nn.Parameter(torch.empty(num_seeds, hidden_size))
        nn.init.xavier_uniform_(self.seeds)
        self.input_ff = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.ReLU())
        self.attention = MultiHeadAttention(hidden_size, num_heads, dropout=dropout)
        self.attention_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps) if layer_norm else nn.Identity()
        self.output_ff = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.ReLU())
        self.output_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps) if layer_norm else nn.Identity()

    def forward(self, hidden_states: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Pool ``hidden_states`` (B, L, C), with ``mask`` (B, L) true/1 at real elements, to (B, num_seeds, C)."""
        batch, length, _ = hidden_states.shape
        keep = None
        if mask is not None:
            if mask.shape != (batch, length):
                raise ValueError(f"mask has shape {tuple(mask.shape)}, expected {(batch, length)} like the set")
            keep = mask.bool()[:, None, None, :]  # (B, 1, 1, L)
        seeds = self.seeds.to(hidden_states.dtype).expand(batch, -1, -1)  # (B, k, C)
        attended, _, _ = self.attention(seeds, key_value_states=self.input_ff(hidden_states), attention_mask=keep)
        pooled = self.attention_norm(seeds + attended)  # (B, k, C)
        return self.output_norm(pooled + self.output_ff(pooled))
