"""``linear``: the Linear Transformer's attention (Katharopoulos et al. 2020), phi(x) = elu(x) + 1.

Kernel attention (see ``_kernels``): ``out_i = phi(q_i) S / phi(q_i) z`` with ``S = sum_j phi(k_j) v_j^T`` and
``z = sum_j phi(k_j)``, O(L * D^2) instead of O(L^2 * D); the causal form takes prefix sums, chunk by chunk.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._kernels import KernelAttention
from .registry import register_attention


@register_attention
class LinearAttention(KernelAttention):
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

    def feature_map(self, q: torch.Tensor, scaling: float) -> tuple[str, torch.Tensor | None]:
        return "elu", None
