"""The attention registry: ``full`` plus the efficient "X-former" attentions, one call signature for all.

Each public module registers the entries it is named after; the private ones (``_masks``, ``_blocks``,
``_patterns``, ``_positions``, ``_kernels``, ``_segments``, ``_tensors``) hold what several
entries share. :mod:`.layer` is the attention layer around a core (its Q/K/V/O projections). The attention
operators that are no q/k/v core (multi-scale deformable attention, TTSR's texture transfer) live apart, in
:mod:`.operators`.
"""

# Importing an entry's module registers it.
from . import (  # noqa: F401
    axial,
    bigbird,
    compressive,
    etc,
    full,
    isab,
    linear,
    linformer,
    local,
    longformer,
    lsh,
    memory_compressed,
    performer,
    routing,
    shifted_window,
    sinkhorn,
    sparse_transformer,
    synthesizer,
    xl,
)
from ._masks import causal_keep_mask, dense_attention
from .full import FullAttention
from .isab import PoolingByMultiheadAttention
from .layer import MultiHeadAttention
from .registry import (
    LENGTH_TIED_KWARGS,
    AttentionCall,
    AttentionCore,
    AttentionOutput,
    Capabilities,
    attention_kwarg_defaults,
    attention_kwargs_at_length,
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
    "LENGTH_TIED_KWARGS",
    "AttentionCall",
    "AttentionCore",
    "AttentionOutput",
    "Capabilities",
    "FullAttention",
    "MultiHeadAttention",
    "PoolingByMultiheadAttention",
    "attention_kwarg_defaults",
    "attention_kwargs_at_length",
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
