"""The attention registry: ``full`` plus the efficient "X-former" attentions, one call signature for all."""

# Importing an entry's module registers it.
from . import (  # noqa: F401
    axial,
    bigbird,
    etc,
    full,
    isab,
    kernel,
    linformer,
    local,
    longformer,
    lsh,
    memory_compressed,
    recurrent,
    routing,
    sinkhorn,
    sparse,
    synthesizer,
)
from .full import FullAttention, causal_keep_mask, dense_attention
from .isab import PoolingByMultiheadAttention
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
    "PoolingByMultiheadAttention",
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
