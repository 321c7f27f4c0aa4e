"""``sinkhorn``: Sparse Sinkhorn attention (Tay et al. 2020), block sorting by a learned soft permutation.

The sequence is cut into blocks of ``block_size`` tokens (padded internally). A sorting network (per head,
the paper's two-layer ReLU MLP ``R = relu(W2 relu(W1 x + b1) + b2)``) turns each block's summary ``x`` (the
mean of its keys; the paper sums, the mean keeps the scale independent of the block size and of padding)
into one row of sorting logits ``R`` (n_blocks x n_blocks, the first n_blocks of ``max_blocks`` outputs).
Sinkhorn balancing (``sinkhorn_iters`` alternating row and column normalisations of ``exp(R / temperature)``
in log space, with Gumbel noise added in training) makes ``R`` a soft permutation ``P``. The keys and values
of slot ``i`` are ``sum_j P[i, j] * block_j``: each query block attends, in one softmax, to its sorted slot
and to its own block (the joint softmax of the reference PyTorch code; LRA sums two separate softmaxes).

Causal variant (the paper's causal Sinkhorn balancing, made strictly causal here): slot ``i`` may only
receive earlier blocks ``j < i`` (the own block is attended locally, causally masked); row ``i`` of ``R`` is
computed from the mean of the keys of blocks ``0 .. i-1`` (a cumulative summary); and each column is
normalised over the rows up to ``i`` only (a cumulative log-sum-exp), so no slot depends on a later block.
The first block has no earlier block and attends locally only. Outputs at position ``t`` therefore depend on
nothing after ``t``, queries and keys included.

Padding: padded keys and values are zeroed before pooling and sorting, and a sorted position counts as a key
only if some block it is mixed from has a real token there. Randomness: the Gumbel noise (training only)
comes from a generator seeded with ``seed`` (the same noise on every call) or, when None, from torch's
global generator. The sorting network's weights are parameters.

Cost: O(L * 2 * block_size * head_dim) for the attention plus O(n_blocks^2 * (head_dim + sinkhorn_iters)).
Memory for training is O(L * head_dim): a fused Function (``_fused_routed.sorted_block_attention``) rebuilds the
sorted slots a chunk of blocks at a time, in backward too, and keeps only q, k, v, the permutation and the row
log-sum-exp (the permutation's gradient is exact); calls that return weights, use attention dropout or are
traced by torch.compile take the plain autograd path, which keeps the sorted copies and the scores.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..utils.checks import check_float, check_int
from ..utils.errors import UsageError
from ..utils.generators import as_generator
from ._fused_routed import sorted_block_attention
from ._masks import masked_softmax
from ._tensors import pad_to_multiple
from .registry import AttentionCall, AttentionCore, AttentionOutput, Capabilities, register_attention


def sinkhorn(log_p: torch.Tensor, allowed: torch.Tensor, iterations: int, causal: bool) -> torch.Tensor:
    """Sinkhorn balancing in log space of (..., n, n) logits over the ``allowed`` (n, n) entries.

    Rows are normalised over their allowed columns; columns over all rows, or (``causal``) over the rows up to
    the current one, so that row i never depends on a later row. Returns P = exp(log_p) with zeros where not
    allowed (and for rows with no allowed entry).
    """
    # A finite floor instead of -inf keeps gradients finite on rows and columns with nothing allowed.
    floor = torch.finfo(log_p.dtype).min / 8
    log_p = log_p.masked_fill(~allowed, floor)
    for _ in range(iterations):
        log_p = (log_p - torch.logsumexp(log_p, dim=-1, keepdim=True)).masked_fill(~allowed, floor)
        column_norm = torch.logcumsumexp(log_p, dim=-2) if causal else torch.logsumexp(log_p, dim=-2, keepdim=True)
        log_p = (log_p - column_norm).masked_fill(~allowed, floor)
    return log_p.exp() * allowed


def gumbel_noise(shape: torch.Size, generator: torch.Generator | None, dtype, device) -> torch.Tensor:
    """Standard Gumbel samples -log(-log(U)) with U uniform in (0, 1)."""
    tiny = torch.finfo(dtype).tiny
    uniform = torch.rand(shape, generator=generator, dtype=dtype, device=device)
    return -torch.log((-torch.log(uniform.clamp(min=tiny))).clamp(min=tiny))


@register_attention
class SinkhornAttention(AttentionCore):
    """Sparse Sinkhorn attention: own block plus a Sinkhorn-sorted block, one softmax.

    Args:
        block_size: tokens per block (reference code: 64); shorter sequences form one block.
        max_blocks: outputs of the sorting network, the most blocks (so length <= block_size * max_blocks).
        temperature: Sinkhorn temperature (paper: 0.75).
        sinkhorn_iters: row/column normalisation rounds (paper and reference code: 5-8).
        seed: seed of the Gumbel noise drawn in training (None: torch's global generator).
    """

    weights_are_copies = True  # the maps are assembled apart from the values

    name = "sinkhorn"
    capabilities = Capabilities(
        padding_mask=True,
        causal=True,
        returns_weights=True,
        length_constraint="self-attention only; at most block_size * max_blocks tokens (padded internally)",
    )
    small_kwargs = {"block_size": 4, "max_blocks": 16}
    content_routed = True
    # None (default): the fused path on CPU tensors only (AttentionCore.use_fused); True: always; False: always the
    # plain autograd path (the reference of the fused one)
    fused: bool | None = None

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        block_size: int = 64,
        max_blocks: int = 128,
        temperature: float = 0.75,
        sinkhorn_iters: int = 8,
        seed: int | None = None,
    ):
        super().__init__(num_heads, head_dim)
        check_int("block_size", block_size, 1, owner=self.owner)
        check_int("max_blocks", max_blocks, 1, owner=self.owner)
        if check_float("temperature", temperature, 0.0, owner=self.owner) == 0.0:
            raise UsageError(f"attention_type={self.name!r}: temperature must be > 0, got {temperature}")
        check_int("sinkhorn_iters", sinkhorn_iters, 0, owner=self.owner)
        if seed is not None and not isinstance(seed, int):
            raise UsageError(f"seed must be an integer or None, got {seed!r}")
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.temperature = temperature
        self.sinkhorn_iters = sinkhorn_iters
        self.seed = seed
        # The sorting network, one two-layer MLP per head, initialised like nn.Linear.
        self.sort_w1 = nn.Parameter(torch.empty(num_heads, head_dim, head_dim))
        self.sort_b1 = nn.Parameter(torch.empty(num_heads, head_dim))
        self.sort_w2 = nn.Parameter(torch.empty(num_heads, head_dim, max_blocks))
        self.sort_b2 = nn.Parameter(torch.empty(num_heads, max_blocks))
        bound = 1 / math.sqrt(head_dim)
        for param in (self.sort_w1, self.sort_b1, self.sort_w2, self.sort_b2):
            nn.init.uniform_(param, -bound, bound)

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        """One block: the sorted slot is the block itself, and duplicated keys leave one softmax unchanged."""
        return {"block_size": max(1, length)}

    def length_problems(
        self, q_len: int, kv_len: int, grid: tuple[int, int] | None = None, prefix_tokens: int = 0
    ) -> list[str]:
        problems = []
        if q_len != kv_len:
            problems.append(f"Sinkhorn attention sorts the blocks of one sequence: got {q_len} queries, {kv_len} keys")
        if self._block(kv_len) * self.max_blocks < kv_len:
            problems.append(
                f"{kv_len} tokens need {math.ceil(kv_len / self.block_size)} blocks of block_size={self.block_size}, "
                f"more than max_blocks={self.max_blocks}"
            )
        return problems

    def _block(self, length: int) -> int:
        return length if length <= self.block_size else self.block_size

    def sort_logits(self, keys: torch.Tensor, valid: torch.Tensor, causal: bool) -> torch.Tensor:
        """(B, H, n, n) sorting logits R from blocked keys (B, H, n, b, D) and validity (B, 1, n, b).

        Row i summarises block i (or, when ``causal``, blocks 0..i-1); column j scores block j for slot i.
        """
        sums, counts = keys.sum(3), valid.sum(-1, keepdim=True).to(keys.dtype)  # (B, H, n, D), (B, 1, n, 1)
        if causal:  # exclusive cumulative sums: blocks before i
            sums = F.pad(sums.cumsum(2), (0, 0, 1, 0))[:, :, :-1]
            counts = F.pad(counts.cumsum(2), (0, 0, 1, 0))[:, :, :-1]
        summary = sums / counts.clamp(min=1)
        w1, b1, w2, b2 = (p.to(keys.dtype) for p in (self.sort_w1, self.sort_b1, self.sort_w2, self.sort_b2))
        hidden = F.relu(torch.einsum("bhnd,hde->bhne", summary, w1) + b1[:, None, :])
        num_blocks = keys.shape[2]
        return F.relu(torch.einsum("bhne,hem->bhnm", hidden, w2[..., :num_blocks]) + b2[:, None, :num_blocks])

    def permutation(self, keys: torch.Tensor, valid: torch.Tensor, causal: bool) -> torch.Tensor:
        """(B, H, n, n) soft permutation P (float32 or wider): P[i, j] = weight of block j in slot i."""
        logits = self.sort_logits(keys, valid, causal)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        if self.training:
            generator = as_generator(self.seed, "torch", device=logits.device, none="global")
            logits = logits + gumbel_noise(logits.shape, generator, logits.dtype, logits.device)
        num_blocks = logits.shape[-1]
        allowed = torch.ones(num_blocks, num_blocks, dtype=torch.bool, device=logits.device)
        if causal:
            allowed = allowed.tril(-1)  # slot i takes only earlier blocks
        return sinkhorn(logits / self.temperature, allowed, self.sinkhorn_iters, causal)

    def _use_fused(self, call: AttentionCall, q: torch.Tensor) -> bool:
        """The fused attention (:func:`sorted_block_attention`: no sorted copies or scores kept for backward)
        serves every call but those returning weights, with attention dropout, or traced by torch.compile,
        which keep the plain autograd path below (as do ``fused = False`` and, by default, tensors off the CPU)."""
        return self.fused_serves(call, q)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """Tokens are sequence positions: ``grid`` and ``prefix_tokens`` change nothing."""
        batch, heads, length, head_dim = q.shape
        block = self._block(length)
        padding, causal = call.key_keep, call.causal  # (B, L) or None
        q, _ = pad_to_multiple(q, block)  # (B, H, L_pad, D)
        padded = q.shape[2]
        num_blocks = padded // block
        valid = torch.arange(padded, device=q.device)[None, :] < length  # (1, L_pad)
        if padding is not None:
            valid = valid & F.pad(padding, (0, padded - length), value=False)
        valid = valid.expand(batch, padded).view(batch, 1, num_blocks, block)  # (B, 1, n, b)
        k_blocks = pad_to_multiple(k, block)[0].view(batch, heads, num_blocks, block, head_dim)
        v_blocks = pad_to_multiple(v, block)[0].view(batch, heads, num_blocks, block, head_dim)
        fused = self._use_fused(call, q)
        if not fused or padding is not None or padded != length:  # fused and nothing to zero: views of k and v
            zero_invalid = valid.unsqueeze(-1).to(k.dtype)
            k_blocks, v_blocks = k_blocks * zero_invalid, v_blocks * zero_invalid
        q_blocks = q.view(batch, heads, num_blocks, block, head_dim)

        perm = self.permutation(k_blocks, valid, causal)  # (B, H, n, n)
        if fused:
            sorted_valid = torch.einsum("bhij,bjt->bhit", perm.detach(), valid[:, 0].to(perm.dtype)) > 0
            local_keep = valid.unsqueeze(-2)  # (B, 1, n, 1, b)
            if causal:
                local_keep = local_keep & torch.ones(block, block, dtype=torch.bool, device=q.device).tril()
            out = sorted_block_attention(q_blocks, k_blocks, v_blocks, perm, sorted_valid, local_keep, call.scaling)
            return AttentionOutput(out.view(batch, heads, padded, head_dim)[:, :, :length], None)
        sorted_k = torch.einsum("bhij,bhjtd->bhitd", perm.to(k.dtype), k_blocks)  # (B, H, n, b, D)
        sorted_v = torch.einsum("bhij,bhjtd->bhitd", perm.to(v.dtype), v_blocks)
        sorted_valid = torch.einsum("bhij,bjt->bhit", perm, valid[:, 0].to(perm.dtype)) > 0  # (B, H, n, b)

        keys = torch.cat([sorted_k, k_blocks], dim=3)  # (B, H, n, 2b, D)
        values = torch.cat([sorted_v, v_blocks], dim=3)
        local_keep = valid.unsqueeze(-2).expand(batch, heads, num_blocks, block, block)  # (B, H, n, b, b)
        if causal:
            local_keep = local_keep & torch.ones(block, block, dtype=torch.bool, device=q.device).tril()
        keep = torch.cat([sorted_valid.unsqueeze(-2).expand_as(local_keep), local_keep], dim=-1)  # (B, H, n, b, 2b)
        scores = torch.matmul(q_blocks, keys.transpose(-1, -2)) * call.scaling
        probs = masked_softmax(scores, keep)
        probs = F.dropout(probs, p=call.dropout) if call.dropout > 0.0 else probs
        out = torch.matmul(probs, values).view(batch, heads, padded, head_dim)[:, :, :length]

        weights = None
        if call.output_weights:
            weights = self._dense_weights(probs, perm, valid)[:, :, :length, :length]
        return AttentionOutput(out, weights)

    @staticmethod
    def _dense_weights(probs: torch.Tensor, perm: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """(B, H, L_pad, L_pad) weights W with out = W v: a sorted key at offset t of slot i is the mix
        sum_j P[i, j] v_j[t], so its probability spreads over the real tokens (j, t) with weights P[i, j]."""
        batch, heads, num_blocks, block, _ = probs.shape
        sorted_part, local_part = probs[..., :block], probs[..., block:]
        # (B, H, n, b, n, b): query (i, s) -> key (j, t)
        dense = torch.einsum("bhist,bhij->bhisjt", sorted_part, perm.to(probs.dtype))
        dense = dense * valid[:, :, None, None].to(probs.dtype)
        eye = torch.eye(num_blocks, dtype=probs.dtype, device=probs.device)
        dense = dense + torch.einsum("bhist,ij->bhisjt", local_part, eye)
        return dense.reshape(batch, heads, num_blocks * block, num_blocks * block)
