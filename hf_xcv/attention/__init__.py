"""The attention registry: ``full`` plus the efficient "X-former" attentions, one call signature for all."""

from . import full  # noqa: F401  (registers "full")
from .full import FullAttention, causal_keep_mask, dense_attention
from .layer import MultiHeadAttention
from .registry import (
    AttentionCore,
    AttentionOutput,
    Capabilities,
    attention_kwarg_defaults,
    available_attention_types,
    build_attention,
    capability_problems,
    capability_table,
    check_capabilities,
    get_attention_class,
    register_attention,
    validate_attention_kwargs,
)

__all__ = [
    "AttentionCore",
    "AttentionOutput",
    "Capabilities",
    "FullAttention",
    "MultiHeadAttention",
    "attention_kwarg_defaults",
    "available_attention_types",
    "build_attention",
    "capability_problems",
    "capability_table",
    "causal_keep_mask",
    "check_capabilities",
    "dense_attention",
    "get_attention_class",
    "register_attention",
    "validate_attention_kwargs",
]
