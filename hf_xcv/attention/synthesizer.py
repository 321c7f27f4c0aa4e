"""Synthesizer attention (Tay et al. 2020): attention weights synthesized without query-key dot products.

* ``synthesizer_dense``: each query token predicts its own row of logits over ``max_length`` positions with
  a two-layer MLP, B_i = W2 relu(W1 q_i + b1) + b2 (per head, on the head's query); the first Lk entries
  are the logits over the keys. Factorized: two MLPs predict a and b numbers (a * b >= max_length) whose
  outer product, flattened, gives the row (the paper's tile-and-repeat product).
* ``synthesizer_random``: one learned (or fixed) (heads, max_length, max_length) logit table R, the same for
  every input; factorized: R = R1 R2^T with R1, R2 (heads, max_length, rank).

Then Y = softmax(logits) V. Causal attention masks the future logits (queries align with the last keys:
query i of Lq sits at position Lk - Lq + i, and the random table uses that row); padding masks key
columns. ``mix_dot_product=True`` adds the usual q k^T * scaling to the logits (the paper's "+ Vanilla"
mixtures). The pure forms ignore the keys (and the random form the queries too), so those inputs get no
gradient, exactly as in the paper. Cost is O(L^2) like full attention (no dot products, but an (L x L)
softmax); the attention weights are available.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..utils.checks import check_int
from ..utils.errors import UsageError
from ._masks import causal_keep_mask, key_keep_rows, masked_softmax
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention

_SYNTHESIZER_CAPABILITIES = Capabilities(
    padding_mask=True,
    causal=True,
    cross_attention=True,
    returns_weights=True,
    length_constraint="at most max_length queries and keys (the synthesized logits cover max_length positions)",
)


def _uniform(*shape: int, fan_in: int) -> nn.Parameter:
    """A parameter initialised like ``nn.Linear``: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = fan_in**-0.5
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


class _Synthesizer(AttentionCore):
    """Shared forward: masks, softmax, dropout and weights around the subclass's ``logits``."""

    capabilities = _SYNTHESIZER_CAPABILITIES

    def __init__(self, num_heads: int, head_dim: int, max_length: int, mix_dot_product: bool):
        super().__init__(num_heads, head_dim)
        self.max_length = check_int("max_length", max_length, 1, owner=self.owner)
        if not isinstance(mix_dot_product, bool):
            raise UsageError(f"mix_dot_product must be True or False, got {mix_dot_product!r}")
        self.mix_dot_product = mix_dot_product
        if mix_dot_product:  # the dot products read queries and keys; the owning layer must project them
            self.projections = ("q", "k", "v")

    def logits(self, q: torch.Tensor, kv_len: int, causal: bool) -> torch.Tensor:
        """Synthesized logits broadcastable to (B, H, Lq, Lk)."""
        raise NotImplementedError

    def length_problems(
        self, q_len: int, kv_len: int, grid: tuple[int, int] | None = None, prefix_tokens: int = 0
    ) -> list[str]:
        return [
            f"its {length} {what} exceed max_length={self.max_length}"
            for length, what in ((q_len, "queries"), (kv_len, "keys"))
            if length > self.max_length
        ]

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """``grid`` and ``prefix_tokens`` change nothing; ``dropout`` acts on the probabilities."""
        batch, heads, q_len, _ = q.shape
        kv_len = k.shape[2]
        scores = self.logits(q, kv_len, call.causal)  # (B or 1, H, Lq, Lk)
        if self.mix_dot_product:
            scores = scores + q @ k.transpose(-1, -2) * call.scaling  # (B, H, Lq, Lk)
        mask = key_keep_rows(call.key_keep)  # (B, 1, 1, Lk)
        if call.causal:
            tri = causal_keep_mask(q_len, kv_len, q.device)  # (Lq, Lk)
            mask = tri if mask is None else mask & tri
        # a view over the batch, so that dropout draws its own mask for every batch row
        probs = masked_softmax(scores, mask).expand(batch, heads, q_len, kv_len)  # (B, H, Lq, Lk)
        probs = nn.functional.dropout(probs, p=call.dropout) if call.dropout > 0.0 else probs
        return AttentionOutput(probs @ v, probs if call.output_weights else None)  # values (B, H, Lq, D)


@register_attention
class DenseSynthesizerAttention(_Synthesizer):
    """Dense Synthesizer: a per-head two-layer MLP maps each query to its logits over the positions.

    Args:
        max_length: the most positions (queries or keys) it covers.
        hidden_dim: width of the MLP's hidden layer; None = head_dim.
        factorized: predict the row as the outer product of two short vectors (fewer parameters).
        factors: (a, b) sizes of the two vectors, a * b >= max_length; None picks a = ceil(sqrt(max_length)),
            b = ceil(max_length / a). Only with factorized=True.
        mix_dot_product: add q k^T * scaling to the synthesized logits.
    """

    name = "synthesizer_dense"
    small_kwargs = {"max_length": 64}
    projections = ("q", "v")  # the keys are never read (unless mix_dot_product)

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        max_length: int = 512,
        hidden_dim: int | None = None,
        factorized: bool = False,
        factors: tuple[int, int] | list[int] | None = None,
        mix_dot_product: bool = False,
    ):
        super().__init__(num_heads, head_dim, max_length, mix_dot_product)
        hidden = head_dim if hidden_dim is None else check_int("hidden_dim", hidden_dim, 1, owner=self.owner)
        if factors is not None and not factorized:
            raise UsageError(f"factors={factors!r} is set but factorized=False; set factorized=True or drop factors")
        self.factorized = factorized
        if factorized:
            if factors is None:
                a = math.isqrt(max_length - 1) + 1  # ceil(sqrt(max_length))
                factors = (a, -(-max_length // a))
            if not isinstance(factors, (tuple, list)) or len(factors) != 2:
                raise UsageError(f"factors must be two positive integers (a, b), got {factors!r}")
            a, b = (check_int("factors", f, 1, owner=self.owner) for f in factors)
            if a * b < max_length:
                raise UsageError(f"factors {a} x {b} = {a * b} do not cover max_length={max_length}")
            self.factors = (a, b)
            self.branches = nn.ModuleList([self._mlp(num_heads, head_dim, hidden, size) for size in (a, b)])
        else:
            self.factors = None
            self.branches = nn.ModuleList([self._mlp(num_heads, head_dim, hidden, max_length)])

    @staticmethod
    def _mlp(heads: int, dim: int, hidden: int, out: int) -> nn.ParameterDict:
        """Per-head weights of q -> relu(q W1 + b1) W2 + b2 with ``out`` outputs."""
        return nn.ParameterDict(
            {
                "w1": _uniform(heads, dim, hidden, fan_in=dim),
                "b1": _uniform(heads, 1, hidden, fan_in=dim),
                "w2": _uniform(heads, hidden, out, fan_in=hidden),
                "b2": _uniform(heads, 1, out, fan_in=hidden),
            }
        )

    @staticmethod
    def _run_mlp(mlp: nn.ParameterDict, q: torch.Tensor, outputs: int) -> torch.Tensor:
        """(B, H, Lq, D) -> (B, H, Lq, outputs), using only the first ``outputs`` output units."""
        w1, b1, w2, b2 = (mlp[key].to(q.dtype) for key in ("w1", "b1", "w2", "b2"))
        hidden = torch.relu(q @ w1 + b1)  # (B, H, Lq, hidden)
        return hidden @ w2[..., :outputs] + b2[..., :outputs]

    def logits(self, q: torch.Tensor, kv_len: int, causal: bool) -> torch.Tensor:
        if self.factors is None:
            return self._run_mlp(self.branches[0], q, kv_len)  # (B, H, Lq, Lk)
        a, b = self.factors
        first = self._run_mlp(self.branches[0], q, a)  # (B, H, Lq, a)
        second = self._run_mlp(self.branches[1], q, b)  # (B, H, Lq, b)
        return (first[..., :, None] * second[..., None, :]).flatten(-2)[..., :kv_len]  # position j = (j // b, j % b)


@register_attention
class RandomSynthesizerAttention(_Synthesizer):
    """Random Synthesizer: input-independent logits R (heads, max_length, max_length), learned or fixed.

    Args:
        max_length: the most positions (queries or keys) it covers.
        trainable: learn R (a parameter); False keeps the initial random draw (a persistent buffer).
        factorized: R = R1 R2^T with R1, R2 (heads, max_length, rank).
        rank: the factor width; None = 32 (LRA's setting). Only with factorized=True.
        mix_dot_product: add q k^T * scaling to the synthesized logits.

    R is drawn N(0, 1) (factorized: R1, R2 with entries N(0, 1/sqrt(rank)), so R's entries have variance 1).
    """

    name = "synthesizer_random"
    small_kwargs = {"max_length": 64}
    projections = ("v",)  # neither queries nor keys are read (unless mix_dot_product)

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        max_length: int = 512,
        trainable: bool = True,
        factorized: bool = False,
        rank: int | None = None,
        mix_dot_product: bool = False,
    ):
        super().__init__(num_heads, head_dim, max_length, mix_dot_product)
        if not isinstance(trainable, bool):
            raise UsageError(f"trainable must be True or False, got {trainable!r}")
        if rank is not None and not factorized:
            raise UsageError(f"rank={rank!r} is set but factorized=False; set factorized=True or drop rank")
        self.trainable, self.factorized = trainable, factorized
        self.rank = (32 if rank is None else check_int("rank", rank, 1, owner=self.owner)) if factorized else None
        if factorized:
            std = self.rank**-0.25
            tables = {"left": torch.randn(num_heads, max_length, self.rank) * std}
            tables["right"] = torch.randn(num_heads, max_length, self.rank) * std
        else:
            tables = {"table": torch.randn(num_heads, max_length, max_length)}
        for key, value in tables.items():
            if trainable:
                self.register_parameter(key, nn.Parameter(value))
            else:
                self.register_buffer(key, value, persistent=True)

    def logits(self, q: torch.Tensor, kv_len: int, causal: bool) -> torch.Tensor:
        q_len = q.shape[2]
        start = max(kv_len - q_len, 0) if causal else 0  # causal queries sit at the last positions
        rows = slice(start, start + q_len)
        if causal and q_len > kv_len:  # the first queries precede every key (fully masked anyway)
            rows = torch.arange(q_len, device=q.device).sub(q_len - kv_len).clamp(min=0)
        if self.factorized:
            left, right = self.left.to(q.dtype), self.right.to(q.dtype)
            return (left[:, rows] @ right[:, :kv_len].transpose(-1, -2))[None]  # (1, H, Lq, Lk)
        return self.table.to(q.dtype)[:, rows, :kv_len][None]  # (1, H, Lq, Lk)
