"""Kernel attentions: ``linear`` (Katharopoulos et al. 2020) and ``performer`` (Choromanski et al. 2020, FAVOR+).

Both replace the softmax similarity exp(q . k) by a dot product of feature maps, phi(q) . phi(k), so that

    out_i = sum_j (phi(q_i) . phi(k_j)) v_j / sum_j (phi(q_i) . phi(k_j))
          = phi(q_i) S / phi(q_i) z,      S = sum_j phi(k_j) v_j^T,  z = sum_j phi(k_j)

costs O(L * M * D) instead of O(L^2 * D) (M features). The causal form takes prefix sums of S and z; this
module computes them chunk by chunk (exact products inside a chunk, one running state per chunk before
it), so memory is O(L * (C + M * D / C)) for a chunk of C tokens, linear in L, and no (L x L) tensor is
ever formed.

Kernel attention has no probability matrix: attention-probability dropout has nothing to act on and is refused
with a ValueError in training (rather than silently skipped), ``output_attentions`` is refused
(``returns_weights=False``), and ``scaling`` is used by the Performer (it estimates exp(q . k * scaling)) but
not by the linear attention (whose feature map is applied to q and k as they are, as in the paper). Padding
zeroes the features of masked keys, which is exactly attention over the real keys; a query with no key to
attend gets zeros (0 / 0 is taken as 0).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .registry import (
    AttentionCore,
    AttentionOutput,
    Capabilities,
    capability_problems,
    raise_problems,
    register_attention,
)
from .utils import key_padding_mask, pad_to_multiple, seeded_generator

_KERNEL_CAPABILITIES = Capabilities(
    padding_mask=True,
    causal=True,
    cross_attention=True,
    returns_weights=False,
    attention_dropout=False,
    length_constraint="any length",
)


def _ratio(numerator: torch.Tensor, normaliser: torch.Tensor) -> torch.Tensor:
    """numerator (..., Dv) / normaliser (..., 1); a zero normaliser gives zeros.

    The features are non-negative, so a zero normaliser means every product phi(q) . phi(k) is zero and the
    numerator is exactly zero too: the row had nothing to attend.
    """
    return numerator / torch.where(normaliser > 0, normaliser, torch.ones_like(normaliser))


def kernel_attention(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Non-causal kernel attention: phi_q (B, H, Lq, M), phi_k (B, H, Lk, M), v (B, H, Lk, Dv) -> (B, H, Lq, Dv)."""
    state = phi_k.transpose(-1, -2) @ v  # (B, H, M, Dv): S = sum_j phi(k_j) v_j^T
    total = phi_k.sum(dim=-2)[..., None]  # (B, H, M, 1): z = sum_j phi(k_j)
    return _ratio(phi_q @ state, phi_q @ total)  # (B, H, Lq, Dv)


def causal_kernel_attention(
    phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, chunk_size: int = 128
) -> torch.Tensor:
    """Causal kernel attention with chunked prefix sums; queries align with the *last* keys.

    Args:
        phi_q: (B, H, Lq, M) non-negative query features.
        phi_k: (B, H, Lk, M) non-negative key features (zero for padded keys).
        v: (B, H, Lk, Dv) values.
        chunk_size: tokens per chunk C. Inside a chunk the (C x C) products are masked to the lower
            triangle; each chunk also sees the summed state of every chunk before it (an exclusive prefix
            sum, so nothing after a position enters its output, not even through rounding).

    Returns:
        (B, H, Lq, Dv).
    """
    q_len, kv_len = phi_q.shape[2], phi_k.shape[2]
    if q_len < kv_len:  # earlier positions without queries (decoding): zero features, dropped below
        phi_q = F.pad(phi_q, (0, 0, kv_len - q_len, 0))
    elif kv_len < q_len:  # the first queries precede every key: absent keys with zero features
        phi_k = F.pad(phi_k, (0, 0, q_len - kv_len, 0))
        v = F.pad(v, (0, 0, q_len - kv_len, 0))
    length = phi_q.shape[2]
    chunk = max(1, min(chunk_size, length))
    phi_q, _ = pad_to_multiple(phi_q, chunk)  # (B, H, n * C, M); the padded tail has zero features
    phi_k, _ = pad_to_multiple(phi_k, chunk)
    v, _ = pad_to_multiple(v, chunk)  # (B, H, n * C, Dv)
    n = phi_q.shape[2] // chunk
    q_c = phi_q.unflatten(2, (n, chunk))  # (B, H, n, C, M)
    k_c = phi_k.unflatten(2, (n, chunk))  # (B, H, n, C, M)
    v_c = v.unflatten(2, (n, chunk))  # (B, H, n, C, Dv)
    # Each chunk's own state, then the exclusive prefix sum over chunks: chunk c sees chunks 0 .. c-1 only.
    state = k_c.transpose(-1, -2) @ v_c  # (B, H, n, M, Dv)
    total = k_c.sum(dim=-2)  # (B, H, n, M)
    state_before = F.pad(state[:, :, :-1], (0, 0, 0, 0, 1, 0)).cumsum(dim=2)  # (B, H, n, M, Dv)
    total_before = F.pad(total[:, :, :-1], (0, 0, 1, 0)).cumsum(dim=2)[..., None]  # (B, H, n, M, 1)
    within = (q_c @ k_c.transpose(-1, -2)).tril()  # (B, H, n, C, C): key j <= query i inside the chunk
    numerator = q_c @ state_before + within @ v_c  # (B, H, n, C, Dv)
    normaliser = q_c @ total_before + within.sum(dim=-1, keepdim=True)  # (B, H, n, C, 1)
    out = _ratio(numerator, normaliser).flatten(2, 3)  # (B, H, n * C, Dv)
    return out[:, :, length - q_len : length]  # (B, H, Lq, Dv)


class _KernelAttention(AttentionCore):
    """Shared forward of the kernel attentions; subclasses define ``features(q, k, keep, causal, scaling)``."""

    capabilities = _KERNEL_CAPABILITIES

    def __init__(self, num_heads: int, head_dim: int, chunk_size: int = 128):
        super().__init__(num_heads, head_dim)
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        self.chunk_size = chunk_size

    def features(
        self, q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor | None, causal: bool, scaling: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(phi(q) (B, H, Lq, M), phi(k) (B, H, Lk, M)), both non-negative."""
        raise NotImplementedError

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
        """``grid`` and ``prefix_tokens`` change nothing (every token is treated alike); a non-zero ``dropout``
        is refused (there are no probabilities to drop)."""
        reasons = list(capability_problems(self.name, returns_weights=output_weights, stateful=state is not None))
        if dropout > 0:
            reasons.append(
                f"it has no attention probabilities for dropout={dropout} to act on (set the model's attention "
                "dropout to 0)"
            )
        raise_problems(self.name, reasons)
        batch, _, kv_len, _ = k.shape
        keep = key_padding_mask(attention_mask, batch, kv_len, self.name)  # (B, Lk) or None
        # At least float32 throughout: features are exponentials and sums run over thousands of keys.
        out_dtype, dtype = v.dtype, torch.promote_types(q.dtype, torch.float32)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        scaling = self.head_dim**-0.5 if scaling is None else scaling
        phi_q, phi_k = self.features(q, k, keep, causal, scaling)
        if keep is not None:
            phi_k = phi_k.masked_fill(~keep[:, None, :, None], 0.0)  # padded keys drop out of S and z
        if causal:
            out = causal_kernel_attention(phi_q, phi_k, v, self.chunk_size)
        else:
            out = kernel_attention(phi_q, phi_k, v)
        return AttentionOutput(out.to(out_dtype))


@register_attention
class LinearAttention(_KernelAttention):
    """Linear Transformer attention (Katharopoulos et al. 2020): phi(x) = elu(x) + 1.

    Causal attention is the paper's prefix-sum ("RNN") form, computed in chunks of ``chunk_size`` tokens so
    that memory grows linearly with the length. There is no setting that makes it softmax attention.

    Args:
        chunk_size: tokens per chunk of the causal prefix sums (speed/memory only; the result is the same).
    """

    name = "linear"
    small_kwargs = {"chunk_size": 4}

    def features(
        self, q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor | None, causal: bool, scaling: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return F.elu(q) + 1, F.elu(k) + 1


def orthogonal_gaussian_features(nb_features: int, dim: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """(nb_features, dim) random projection of FAVOR+: stacked blocks of orthonormal rows (QR of Gaussian
    matrices), each row rescaled to the norm of a Gaussian vector, so rows are marginally N(0, I) yet
    orthogonal within a block. Drawn on the CPU from ``generator`` (torch's global one when None)."""
    blocks = []
    for _ in range(math.ceil(nb_features / dim)):
        gaussian = torch.randn(dim, dim, generator=generator, device="cpu")
        orthonormal, triangular = torch.linalg.qr(gaussian)  # columns orthonormal
        # QR fixes the signs of R's diagonal by convention, which biases Q away from the uniform (Haar)
        # distribution; flipping each column to make diag(R) positive restores it, and with it the
        # unbiasedness of the estimator (without it the error stops falling as features are added).
        orthonormal = orthonormal * torch.sign(torch.diagonal(triangular))
        blocks.append(orthonormal.T)  # (dim, dim): orthonormal rows
    rows = torch.cat(blocks)[:nb_features]  # (M, dim)
    norms = torch.randn(nb_features, dim, generator=generator, device="cpu").norm(dim=1)  # chi(dim) samples
    return rows * norms[:, None]


@register_attention
class PerformerAttention(_KernelAttention):
    """Performer attention: FAVOR+ positive orthogonal random features (Choromanski et al. 2020).

    phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(M) with x' = x * sqrt(scaling), so that E[phi(q) . phi(k)] =
    exp(q . k * scaling), the softmax kernel. W (M, head_dim) is a persistent buffer (saved with the model),
    shared by the heads of the layer.

    Numerical stabilisers: each query's features are divided by their own maximum (a per-row constant, so
    the ratio is unchanged). In non-causal attention the keys' features are divided by their maximum over
    all real keys of the (batch, head); causal attention uses no key stabiliser at all, because a maximum
    over all keys would let future keys change earlier outputs (spec sheet section 2.14). Without it the
    exponent is still bounded above by |w|^2 / 2, so features cannot overflow; keys of very large norm can
    underflow to zero, in which case the query's output is zero.

    Args:
        nb_features: number of random features M; None picks round(head_dim * ln(head_dim)) (the paper's
            d log d; 266 for head_dim 64), at least head_dim.
        feature_redraw_interval: in training mode, draw new features every this many calls (0 = never).
            Evaluation never redraws.
        seed: seed of the feature draws (construction and redraws); None uses torch's global generator.
            Redraw r uses seed + r; the count is not saved, so a reloaded model starts it again.
        chunk_size: tokens per chunk of the causal prefix sums (speed/memory only).
    """

    name = "performer"
    small_kwargs = {"nb_features": 16, "chunk_size": 4}

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        nb_features: int | None = None,
        feature_redraw_interval: int = 1000,
        seed: int | None = None,
        chunk_size: int = 128,
    ):
        super().__init__(num_heads, head_dim, chunk_size)
        if nb_features is None:
            nb_features = max(head_dim, round(head_dim * math.log(head_dim))) if head_dim > 1 else 1
        if not isinstance(nb_features, int) or nb_features < 1:
            raise ValueError(f"nb_features must be a positive integer, got {nb_features!r}")
        if not isinstance(feature_redraw_interval, int) or feature_redraw_interval < 0:
            raise ValueError(
                f"feature_redraw_interval must be a non-negative integer (0 = never), got {feature_redraw_interval!r}"
            )
        if seed is not None and not isinstance(seed, int):
            raise ValueError(f"seed must be an integer or None, got {seed!r}")
        self.nb_features = nb_features
        self.feature_redraw_interval = feature_redraw_interval
        self.seed = seed
        self.redraws = 0  # feature draws after construction; the seed of draw r is seed + r
        self.calls_since_redraw = 0
        projection = orthogonal_gaussian_features(nb_features, head_dim, seeded_generator(seed))
        self.register_buffer("projection", projection, persistent=True)  # (M, head_dim)

    @torch.no_grad()
    def redraw_features_(self) -> None:
        """Replace the random features by a fresh draw (seeded by ``seed + number of redraws`` when seeded)."""
        self.redraws += 1
        generator = seeded_generator(None if self.seed is None else self.seed + self.redraws)
        fresh = orthogonal_gaussian_features(self.nb_features, self.head_dim, generator)
        self.projection.copy_(fresh)

    def features(
        self, q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor | None, causal: bool, scaling: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(M), x' = x sqrt(scaling), each divided by a stabiliser.

        The stabilisers (and the 1 / sqrt(M)) are per-query or per-(batch, head) constants that cancel in
        the ratio, so they are subtracted in log space without gradient. For a query, dividing by its own
        maximum feature also cancels |q'|^2 / 2, so only the largest projection is subtracted.
        """
        if self.training and self.feature_redraw_interval:
            if self.calls_since_redraw >= self.feature_redraw_interval:
                self.redraw_features_()
                self.calls_since_redraw = 0
            self.calls_since_redraw += 1
        projection = self.projection.to(device=q.device, dtype=q.dtype).T * scaling**0.5  # (D, M): W^T sqrt(s)
        q_exponent = q @ projection  # (B, H, Lq, M)
        phi_q = torch.exp(q_exponent - q_exponent.detach().amax(-1, keepdim=True))
        k_exponent = k @ projection  # (B, H, Lk, M)
        shift = k.square().sum(-1, keepdim=True) * (scaling / 2)  # (B, H, Lk, 1): |k'|^2 / 2
        if keep is not None:  # padded keys get exp(-inf) = 0 features (no overflow, no NaN gradient)
            shift = shift.masked_fill(~keep[:, None, :, None], math.inf)
        if not causal:  # the largest real exponent of the (batch, head); causal attention must not look ahead
            key_max = (k_exponent - shift).detach().amax(dim=(-2, -1), keepdim=True)  # (B, H, 1, 1)
            shift = shift + torch.where(torch.isfinite(key_max), key_max, torch.zeros_like(key_max))
        return phi_q, torch.exp(k_exponent - shift)
