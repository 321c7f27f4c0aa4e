"""Shared helpers for the attention-entry tests: float64 inputs, the dense oracle, standard calls."""

from __future__ import annotations

import torch

from hf_xcv.attention import build_attention, dense_attention, get_attention_class

TOL64 = 1e-10  # float64 agreement demanded of exact settings and dense-mask equivalences


def qkv(batch=2, heads=2, q_len=16, kv_len=None, dim=8, dtype=torch.float64, seed=0):
    """Random (B, H, L, D) queries, keys and values from a private generator."""
    kv_len = q_len if kv_len is None else kv_len
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, heads, n, dim, generator=g, dtype=dtype) for n in (q_len, kv_len, kv_len))


def padding_keep(batch: int, kv_len: int, lengths: list[int]) -> torch.Tensor:
    """(B, 1, 1, Lk) keep mask: row b keeps its first lengths[b] keys."""
    positions = torch.arange(kv_len)
    return (positions[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def build(name: str, heads: int = 2, dim: int = 8, dtype=torch.float64, seed: int = 0, **kwargs):
    """An entry built under a fixed torch seed, in float64 and eval mode."""
    torch.manual_seed(seed)
    return build_attention(name, heads, dim, **kwargs).to(dtype).eval()


def small(name: str, **overrides) -> dict:
    return {**get_attention_class(name).small_kwargs, **overrides}


def reference(q, k, v, keep=None, bias=None):
    """Plain softmax attention with a boolean keep mask and an additive bias (fully masked rows give zeros)."""
    return dense_attention(q, k, v, keep, bias=bias)[0]


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()
