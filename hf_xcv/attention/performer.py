"""``performer``: the Performer's FAVOR+ attention (Choromanski et al. 2020), positive orthogonal random features.

Kernel attention (see ``_kernels``) with features whose dot products estimate the softmax kernel
exp(q . k * scaling) without bias; the causal form takes prefix sums, chunk by chunk.
"""

from __future__ import annotations

import math

import torch

from ..utils.errors import UsageError
from ..utils.generators import as_generator
from ._kernels import KernelAttention
from .registry import register_attention


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
class PerformerAttention(KernelAttention):
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
            raise UsageError(f"nb_features must be a positive integer, got {nb_features!r}")
        if not isinstance(feature_redraw_interval, int) or feature_redraw_interval < 0:
            raise UsageError(
                f"feature_redraw_interval must be a non-negative integer (0 = never), got {feature_redraw_interval!r}"
            )
        if seed is not None and not isinstance(seed, int):
            raise UsageError(f"seed must be an integer or None, got {seed!r}")
        self.nb_features = nb_features
        self.feature_redraw_interval = feature_redraw_interval
        self.seed = seed
        self.redraws = 0  # feature draws after construction; the seed of draw r is seed + r
        self.calls_since_redraw = 0
        projection = orthogonal_gaussian_features(nb_features, head_dim, as_generator(seed, "torch", none="global"))
        self.register_buffer("projection", projection, persistent=True)  # (M, head_dim)

    @torch.no_grad()
    def redraw_features_(self) -> None:
        """Replace the random features by a fresh draw (seeded by ``seed + number of redraws`` when seeded)."""
        self.redraws += 1
        generator = as_generator(None if self.seed is None else self.seed + self.redraws, "torch", none="global")
        fresh = orthogonal_gaussian_features(self.nb_features, self.head_dim, generator)
        self.projection.copy_(fresh)

    def _scaled_projection(self, q: torch.Tensor, scaling: float) -> torch.Tensor:
        """W^T sqrt(scaling) (D, M) in q's dtype, after counting the call (and redrawing W when it is due)."""
        if self.training and self.feature_redraw_interval:
            if self.calls_since_redraw >= self.feature_redraw_interval:
                self.redraw_features_()
                self.calls_since_redraw = 0
            self.calls_since_redraw += 1
        return self.projection.to(device=q.device, dtype=q.dtype).T * scaling**0.5

    def feature_map(self, q: torch.Tensor, scaling: float) -> tuple[str, torch.Tensor | None]:
        return "favor", self._scaled_projection(q, scaling)

    def features(
        self, q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor | None, causal: bool, scaling: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(M), x' = x sqrt(scaling), each divided by a stabiliser.

        The stabilisers (and the 1 / sqrt(M)) are per-query or per-(batch, head) constants that cancel in
        the ratio, so they are subtracted in log space without gradient. For a query, dividing by its own
        maximum feature also cancels |q'|^2 / 2, so only the largest projection is subtracted.
        """
        projection = self._scaled_projection(q, scaling)  # (D, M): W^T sqrt(s)
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
