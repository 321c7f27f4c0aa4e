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

import math

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

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


# ----------------------------------------------------------------------------------------------------------
# fused non-causal kernel attention: nothing of length L x M is kept for the backward pass
# ----------------------------------------------------------------------------------------------------------

FUSED_CHUNK_ELEMENTS = 2**18  # elements of one (B, H, C, M) chunk of features, 1 MiB in float32 (speed/memory only)
# A call of at most WHOLE_LENGTH positions whose features fit in WHOLE_ELEMENTS (16 MiB in float32) is one chunk.
WHOLE_LENGTH, WHOLE_ELEMENTS = 1024, 2**22
# By default (fused = None) a call of at most PLAIN_LENGTH keys takes the plain path (see KernelAttention._fused_call).
PLAIN_LENGTH = 2048


def _chunks(length: int, row_elements: int):
    """Slices covering ``range(length)``: the whole of it for a short call (``WHOLE_LENGTH``, ``WHOLE_ELEMENTS``),
    where the chunks' overhead would cost more time than their memory saving is worth (at 1K tokens Performer
    took 6 % longer in 8 chunks), else chunks of about ``FUSED_CHUNK_ELEMENTS / row_elements`` positions."""
    if length <= WHOLE_LENGTH and length * row_elements <= WHOLE_ELEMENTS:
        return [slice(0, length)]
    size = max(16, FUSED_CHUNK_ELEMENTS // max(1, row_elements))
    return [slice(start, min(start + size, length)) for start in range(0, length, size)]


def _elu_features(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 (the Linear Transformer's feature map), elementwise, in x's memory layout."""
    return F.elu(x).add_(1)


def _elu_features_grad(phi: torch.Tensor, grad_phi: torch.Tensor) -> torch.Tensor:
    """d/dx of sum(grad_phi * phi(x)) from phi = elu(x) + 1 alone: 1 where x > 0 (phi > 1), exp(x) = phi
    elsewhere (so zero where phi is zero: the padded keys)."""
    return torch.where(phi > 1, grad_phi, grad_phi * phi)


class FeatureMap:
    """A feature map phi applied chunk by chunk, with its gradient, for :class:`FusedKernelAttention`.

    ``kind`` is ``"elu"`` (phi(x) = elu(x) + 1, the same for queries and keys; its inputs are the features
    themselves, computed and kept whole by the caller, since they are no larger than q and k and their
    gradient needs only them) or ``"favor"`` (the Performer's positive random features, recomputed from q and
    k; ``projection`` (D, M) = W^T sqrt(scaling)): queries
    ``exp(x P - max_m (x P))`` (a per-row constant that cancels in the ratio), keys
    ``exp(x P - |x|^2 scaling / 2 - key_max)`` with ``key_max`` the largest real exponent of the (batch, head)
    (a per-(batch, head) constant, also cancelling). Constants subtracted for stability carry no gradient.
    """

    def __init__(self, kind: str, projection: torch.Tensor | None = None, scaling: float = 1.0):
        self.kind, self.projection, self.scaling = kind, projection, scaling

    def width(self, x: torch.Tensor) -> int:
        """M, the number of features of an input like ``x`` (B, H, L, D)."""
        return x.shape[-1] if self.projection is None else self.projection.shape[-1]

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """phi(x) for queries x (B, H, C, D) -> (B, H, C, M) (``elu``: x are the features)."""
        if self.kind == "elu":
            return x
        exponent = x @ self.projection
        return torch.exp(exponent - exponent.amax(-1, keepdim=True))

    def queries_grad(self, x: torch.Tensor, phi: torch.Tensor, grad_phi: torch.Tensor) -> torch.Tensor:
        """The gradient reaching the queries x (B, H, C, D) from ``grad_phi`` (B, H, C, M)."""
        if self.kind == "elu":
            return _elu_features_grad(phi, grad_phi)
        return (grad_phi * phi) @ self.projection.T

    def key_exponent(self, x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        """FAVOR+ key exponents x P - |x|^2 scaling / 2 (B, H, C, M); -inf for padded keys (``keep`` (B, C))."""
        shift = x.square().sum(-1, keepdim=True) * (self.scaling / 2)  # (B, H, C, 1)
        if keep is not None:
            shift = shift.masked_fill(~keep[:, None, :, None], math.inf)
        return x @ self.projection - shift

    def keys(self, x: torch.Tensor, keep: torch.Tensor | None, key_max: torch.Tensor | None) -> torch.Tensor:
        """phi(x) for keys x (B, H, C, D) -> (B, H, C, M), zero for padded keys (``keep`` (B, C) or None; ``elu``:
        x are the features, already zero there)."""
        if self.kind == "elu":
            return x
        return torch.exp(self.key_exponent(x, keep) - key_max)

    def keys_grad(self, x: torch.Tensor, phi: torch.Tensor, grad_phi: torch.Tensor) -> torch.Tensor:
        """The gradient reaching the keys x (B, H, C, D) from ``grad_phi``; padded keys (phi = 0) get none."""
        if self.kind == "elu":
            return _elu_features_grad(phi, grad_phi)
        grad_exponent = grad_phi * phi  # (B, H, C, M)
        return grad_exponent @ self.projection.T - grad_exponent.sum(-1, keepdim=True) * x * self.scaling


def _running_key_state(
    k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor | None, features: FeatureMap
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """S = sum_j phi(k_j) v_j^T (B, H, M, Dv), z = sum_j phi(k_j) (B, H, M, 1), chunk by chunk, and the FAVOR+
    key stabiliser (B, H, 1, 1) they are taken with (None for ``elu``).

    FAVOR+ keys are divided by the largest real exponent of the (batch, head); over chunks that maximum is a
    running one, and the sums so far are rescaled by exp(old - new) when it grows (as a fused softmax kernel
    rescales its partial sums), so the result equals the one-pass form.
    """
    state = total = key_max = None
    for part in _chunks(k.shape[2], k.shape[0] * k.shape[1] * features.width(k)):
        keep_part = None if keep is None else keep[:, part]
        if features.kind == "elu":
            phi = features.keys(k[:, :, part], keep_part, None)
        else:
            exponent = features.key_exponent(k[:, :, part], keep_part)  # (B, H, C, M)
            chunk_max = exponent.amax(dim=(-2, -1), keepdim=True)  # (B, H, 1, 1), -inf if all padded
            new_max = chunk_max if key_max is None else torch.maximum(key_max, chunk_max)
            new_max = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))
            if state is not None:
                rescale = torch.exp(key_max - new_max)  # <= 1
                state, total = state * rescale, total * rescale
            key_max = new_max
            phi = torch.exp(exponent - key_max)
        part_state = phi.transpose(-1, -2) @ v[:, :, part]  # (B, H, M, Dv)
        part_total = phi.sum(dim=-2)[..., None]  # (B, H, M, 1)
        state = part_state if state is None else state + part_state
        total = part_total if total is None else total + part_total
    return state, total, key_max


class FusedKernelAttention(torch.autograd.Function):
    """Non-causal kernel attention ``out_i = phi(q_i) S / phi(q_i) z`` that keeps only q, k, v (or, for ``elu``,
    phi(q) and phi(k), as large) and the (M x Dv) state for backward, recomputing the rest there chunk by chunk.

    Autograd through :func:`kernel_attention` keeps phi(q) and phi(k) (L x M each, 4x the input for the
    Performer's 266 features) and their exponentials until backward. Here every pass runs over chunks of
    about ``FUSED_CHUNK_ELEMENTS`` feature values, so the only whole-length tensors are the inputs, the
    output and their gradients (PyTorch's fused softmax kernel keeps the output too). The output is laid out
    (B, Lq, H, Dv) and returned as a (B, H, Lq, Dv) view, so that merging the heads afterwards copies nothing.

    Backward, with n = phi(q) S, d = phi(q) z (a zero d is taken as 1, its row has nothing to attend):
    g_n = g / d, g_d = -sum(g * out) / d, g_phi(q) = g_n S^T + g_d z^T, g_S = sum_i phi(q_i)^T g_n,i,
    g_z = sum_i phi(q_i) g_d,i, g_phi(k_j) = v_j g_S^T + g_z^T, g_v_j = phi(k_j) g_S.
    """

    @staticmethod
    def forward(ctx, q, k, v, keep, kind, projection, scaling):
        features = FeatureMap(kind, projection, scaling)
        with torch.no_grad():
            if kind == "elu":  # kept instead of q and k: the same size, and backward needs nothing else
                q, k = _elu_features(q), _elu_features(k)
                k = k if keep is None else k.masked_fill_(~keep[:, None, :, None], 0.0)
            state, total, key_max = _running_key_state(k, v, keep, features)
            batch, heads, q_len, _ = q.shape
            out = q.new_empty(batch, q_len, heads, v.shape[-1]).transpose(1, 2)  # (B, H, Lq, Dv) view
            for part in _chunks(q_len, batch * heads * features.width(q)):
                phi_q = features.queries(q[:, :, part])
                out[:, :, part] = _ratio(phi_q @ state, phi_q @ total)
        ctx.save_for_backward(q, k, v, keep, projection, state, total, key_max)
        ctx.kind, ctx.scaling = kind, scaling
        return out

    @staticmethod
    @once_differentiable  # the backward is not itself differentiable: a double backward raises
    def backward(ctx, grad_out):
        q, k, v, keep, projection, state, total, key_max = ctx.saved_tensors
        features = FeatureMap(ctx.kind, projection, ctx.scaling)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        grad_state = torch.zeros_like(state)  # (B, H, M, Dv)
        grad_total = torch.zeros_like(total)  # (B, H, M, 1)
        for part in _chunks(q.shape[2], q.shape[0] * q.shape[1] * features.width(q)):
            q_part, g = q[:, :, part], grad_out[:, :, part]
            phi_q = features.queries(q_part)  # (B, H, C, M)
            normaliser = phi_q @ total  # (B, H, C, 1)
            real = normaliser > 0
            safe = torch.where(real, normaliser, torch.ones_like(normaliser))
            grad_num = g / safe  # (B, H, C, Dv)
            out = (phi_q @ state) / safe  # (B, H, C, Dv), recomputed: keeping it would hold L x Dv until here
            grad_den = torch.where(real, -(grad_num * out).sum(-1, keepdim=True), 0.0)  # (B, H, C, 1)
            grad_phi_q = grad_num @ state.transpose(-1, -2) + grad_den @ total.transpose(-1, -2)  # (B, H, C, M)
            grad_q[:, :, part] = features.queries_grad(q_part, phi_q, grad_phi_q)
            grad_state += phi_q.transpose(-1, -2) @ grad_num
            grad_total += phi_q.transpose(-1, -2) @ grad_den
        for part in _chunks(k.shape[2], k.shape[0] * k.shape[1] * features.width(k)):
            k_part = k[:, :, part]
            phi_k = features.keys(k_part, None if keep is None else keep[:, part], key_max)  # (B, H, C, M)
            v_part = v[:, :, part]
            grad_phi_k = v_part @ grad_state.transpose(-1, -2) + grad_total.transpose(-1, -2)  # (B, H, C, M)
            grad_k[:, :, part] = features.keys_grad(k_part, phi_k, grad_phi_k)
            grad_v[:, :, part] = phi_k @ grad_state
        return grad_q, grad_k, grad_v, None, None, None, None


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

    # None (default): the fused path on CPU tensors only (AttentionCore.use_fused); True: always; non-causal calls use
    # FusedKernelAttention; False: autograd through kernel_attention (tests)
    fused: bool | None = None

    def features(
        self, q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor | None, causal: bool, scaling: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(phi(q) (B, H, Lq, M), phi(k) (B, H, Lk, M)), both non-negative."""
        raise NotImplementedError

    def feature_map(self, q: torch.Tensor, scaling: float) -> tuple[str, torch.Tensor | None]:
        """The :class:`FeatureMap` of the fused path: its kind and projection (D, M) for queries like ``q``."""
        raise NotImplementedError

    def _fused_call(self, q: torch.Tensor, k: torch.Tensor) -> bool:
        """Whether a non-causal call takes :class:`FusedKernelAttention`: as :meth:`use_fused` says, except that by
        default (``fused = None``) a call of at most ``PLAIN_LENGTH`` keys keeps the plain path, where keeping the
        (L x M) features costs less time than recomputing them in backward (Performer at 1K took 1.05-1.06x the
        plain path's time fused, in three benchmark runs) and they are small (a few MiB)."""
        if self.fused is None and k.shape[2] <= PLAIN_LENGTH:
            return False
        return self.use_fused(q)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """``grid`` and ``prefix_tokens`` change nothing (every token is treated alike)."""
        keep = call.key_keep  # (B, Lk) or None
        # At least float32 throughout: features are exponentials and sums run over thousands of keys.
        out_dtype, dtype = v.dtype, torch.promote_types(q.dtype, torch.float32)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        if not call.causal and self._fused_call(q, k):
            kind, projection = self.feature_map(q, call.scaling)
            return AttentionOutput(
                FusedKernelAttention.apply(q, k, v, keep, kind, projection, call.scaling).to(out_dtype)
            )
        phi_q, phi_k = self.features(q, k, keep, call.causal, call.scaling)
        if keep is not None:
            phi_k = phi_k.masked_fill(~keep[:, None, :, None], 0.0)  # padded keys drop out of S and z
        if call.causal:
            out = causal_kernel_attention(phi_q, phi_k, v, self.chunk_size)
        else:
            out = kernel_attention(phi_q, phi_k, v)
        return AttentionOutput(out.to(out_dtype))
