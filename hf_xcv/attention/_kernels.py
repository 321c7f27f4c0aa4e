"""What the kernel attentions (``linear``, ``performer``) share: attention through feature maps.

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

import torch
import torch.nn.functional as F

from ..utils.errors import UsageError
from ._tensors import pad_to_multiple
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities

KERNEL_CAPABILITIES = Capabilities(
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


class KernelAttention(AttentionCore):
    """Shared forward of the kernel attentions; subclasses define ``features(q, k, keep, causal, scaling)``."""

    capabilities = KERNEL_CAPABILITIES
    refusals = {
        "attention_dropout": "it does not support dropout on attention probabilities: it has no attention "
        "probabilities for dropout={value} to act on (set the model's attention dropout to 0)",
    }

    def __init__(self, num_heads: int, head_dim: int, chunk_size: int = 128):
        super().__init__(num_heads, head_dim)
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise UsageError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        self.chunk_size = chunk_size

    def features(
        self, q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor | None, causal: bool, scaling: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(phi(q) (B, H, Lq, M), phi(k) (B, H, Lk, M)), both non-negative."""
        raise NotImplementedError

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """``grid`` and ``prefix_tokens`` change nothing (every token is treated alike)."""
        keep = call.key_keep  # (B, Lk) or None
        # At least float32 throughout: features are exponentials and sums run over thousands of keys.
        out_dtype, dtype = v.dtype, torch.promote_types(q.dtype, torch.float32)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        phi_q, phi_k = self.features(q, k, keep, call.causal, call.scaling)
        if keep is not None:
            phi_k = phi_k.masked_fill(~keep[:, None, :, None], 0.0)  # padded keys drop out of S and z
        if call.causal:
            out = causal_kernel_attention(phi_q, phi_k, v, self.chunk_size)
        else:
            out = kernel_attention(phi_q, phi_k, v)
        return AttentionOutput(out.to(out_dtype))
