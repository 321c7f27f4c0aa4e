"""The attention registry: one name -> one attention core, all with the same call signature.

An attention *core* turns projected queries, keys and values into attended values; the owning
layer keeps its own Q/K/V/O projections. Every core is called as

    out = core(q, k, v, attention_mask=None, causal=False, grid=None, state=None)

with ``q``: (batch, heads, q_len, head_dim), ``k``/``v``: (batch, heads, kv_len, head_dim), the layout of
``torch.nn.functional.scaled_dot_product_attention``. ``attention_mask`` is a boolean *keep* mask
broadcastable to (batch, heads, q_len, kv_len) (True = may attend). ``grid`` is the (height, width) of
the token layout for cores that need a 2-D arrangement, ``state`` whatever a stateful core carried
from the previous call. Keyword-only extras: ``dropout``, ``scaling``, ``output_weights``, ``module``
(the owning layer) and ``prefix_tokens`` (how many leading tokens are special, such as ViT's [CLS]:
global-token entries make them global, grid entries keep them out of the grid, so that
``length == prefix_tokens + height * width``). It returns an :class:`AttentionOutput` (values in the
layout of ``q``, optional weights, optional new state, optional auxiliary loss).

Each core declares what it can serve in :class:`Capabilities`, and what lengths it takes in
:meth:`AttentionCore.length_problems`; :func:`attention_problems` turns every mismatch into one
``ValueError`` listing all the reasons. Each core also says how it relates to plain softmax attention:
:meth:`AttentionCore.exact_kwargs` gives the settings under which it *is* plain softmax attention, and
pattern-based cores return their boolean pattern from :meth:`AttentionCore.dense_mask`, so that
``core(q, k, v) == dense_attention(q, k, v, core.dense_mask(q, k))``.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn


@dataclass(frozen=True)
class Capabilities:
    """What an attention core can serve.

    Attributes:
        padding_mask: accepts a boolean keep mask over keys (and queries).
        causal: supports autoregressive (lower-triangular) attention.
        cross_attention: queries and keys may come from different sequences of different lengths.
        returns_weights: can return the (batch, heads, q_len, kv_len) attention probabilities.
        needs_grid: requires the (height, width) layout of the tokens.
        stateful: carries memory from one call to the next.
        requires_causal: only defined for causal attention (e.g. segment recurrence).
        attention_dropout: has attention probabilities that dropout can act on (kernel attentions do not).
        relative_positions: encodes token positions itself; a model then adds no absolute positions.
        length_constraint: what lengths it takes, in words (for docs; enforced by ``length_problems``).
    """

    padding_mask: bool = False
    causal: bool = False
    cross_attention: bool = False
    returns_weights: bool = False
    needs_grid: bool = False
    stateful: bool = False
    requires_causal: bool = False
    attention_dropout: bool = True
    relative_positions: bool = False
    length_constraint: str = ""


# Human-readable names of the capabilities, used in error messages.
_CAPABILITY_WORDS = {
    "padding_mask": "a padding mask",
    "causal": "causal (autoregressive) masking",
    "cross_attention": "cross-attention (keys from another sequence)",
    "returns_weights": "returning attention weights (output_attentions=True)",
    "stateful": "memory carried from a previous call (state=...)",
    "attention_dropout": "dropout on attention probabilities (it has none; set the attention dropout to 0)",
}


class AttentionOutput(NamedTuple):
    """What a core returns: values shaped like ``q``, optional weights, new state, auxiliary loss.

    ``aux_loss`` is a scalar a model adds to its training loss (e.g. a k-means commitment or a memory
    reconstruction loss); None for cores without one.
    """

    values: torch.Tensor  # (B, H, Lq, D)
    weights: torch.Tensor | None = None  # (B, H, Lq, Lk)
    state: Any = None
    aux_loss: torch.Tensor | None = None


class AttentionCore(nn.Module):
    """Base class of every registry entry. Subclasses set ``name`` and ``capabilities``.

    Constructor arguments after ``num_heads`` and ``head_dim`` are the entry's ``attention_kwargs``;
    they must be keyword arguments with defaults so the registry can validate them.
    """

    name: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities] = Capabilities()
    # Settings that give a non-trivial pattern on inputs of a few dozen tokens (tiny test models, demos).
    small_kwargs: ClassVar[dict[str, Any]] = {}
    # True when which keys a query sees depends on query/key *contents* (hashing, clustering, sorting):
    # changing future queries/keys may then regroup the present, but future values never leak.
    content_routed: ClassVar[bool] = False
    # Which of the owning layer's input projections the core reads. A core that synthesizes its attention
    # without keys (Synthesizer) drops "k"; the layer then builds no such projection (it would get no
    # gradient) and passes zeros of the right shape in its place.
    projections: ClassVar[tuple[str, ...]] = ("q", "k", "v")

    def __init__(self, num_heads: int, head_dim: int):
        super().__init__()
        if num_heads <= 0 or head_dim <= 0:
            raise ValueError(f"num_heads and head_dim must be positive, got {num_heads} and {head_dim}")
        self.num_heads = num_heads
        self.head_dim = head_dim

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
        """``dropout`` applies to the attention probabilities, ``scaling`` defaults to head_dim**-0.5,
        ``output_weights`` asks for the probabilities, ``module`` is the owning layer (for its config),
        ``prefix_tokens`` counts the leading special tokens ([CLS])."""
        raise NotImplementedError

    def length_problems(
        self, q_len: int, kv_len: int, grid: tuple[int, int] | None = None, prefix_tokens: int = 0
    ) -> list[str]:
        """Reasons (in words) why this instance cannot take these lengths; empty when it can."""
        if grid is not None and self.capabilities.needs_grid and q_len != prefix_tokens + grid[0] * grid[1]:
            return [f"its {q_len} tokens are not {prefix_tokens} prefix token(s) plus a {grid[0]}x{grid[1]} grid"]
        return []

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any] | None:
        """``attention_kwargs`` under which this entry equals plain softmax attention over ``length`` tokens
        (after :meth:`make_exact_`); None for entries that have no such setting (approximations)."""
        return None

    def make_exact_(self) -> None:
        """Set learned parts to the values that make an instance built with :meth:`exact_kwargs` exact
        (e.g. identity length projections). Most entries need nothing."""

    def dense_mask(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        causal: bool = False,
        grid: tuple[int, int] | None = None,
        prefix_tokens: int = 0,
    ) -> torch.Tensor | None:
        """The boolean keep mask, broadcastable to (B, H, Lq, Lk), under which plain softmax attention equals
        this core's output for these inputs (same seed / buffers); None when the core is not pattern-based."""
        return None


_REGISTRY: dict[str, type[AttentionCore]] = {}


def register_attention(cls: type[AttentionCore]) -> type[AttentionCore]:
    """Class decorator adding an :class:`AttentionCore` subclass to the registry under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no `name`")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"attention type {cls.name!r} is already registered by {_REGISTRY[cls.name].__name__}")
    _REGISTRY[cls.name] = cls
    return cls


def available_attention_types() -> list[str]:
    """Names of every registered attention core, sorted."""
    return sorted(_REGISTRY)


def get_attention_class(name: str) -> type[AttentionCore]:
    """The core class registered under ``name``; ValueError naming the allowed values otherwise."""
    if name not in _REGISTRY:
        raise ValueError(f"attention_type={name!r} is not registered; allowed values: {available_attention_types()}")
    return _REGISTRY[name]


def attention_kwarg_defaults(name: str) -> dict[str, Any]:
    """The ``attention_kwargs`` an entry accepts, with their defaults."""
    signature = inspect.signature(get_attention_class(name).__init__)
    skipped = {"self", "num_heads", "head_dim"}
    return {
        key: param.default
        for key, param in signature.parameters.items()
        if key not in skipped and param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD)
    }


def validate_attention_kwargs(name: str, attention_kwargs: dict[str, Any] | None) -> None:
    """Reject ``attention_kwargs`` keys the entry does not take (nothing is silently dropped)."""
    allowed = attention_kwarg_defaults(name)
    unknown = sorted(set(attention_kwargs or {}) - set(allowed))
    if unknown:
        raise ValueError(
            f"attention_kwargs has keys {unknown} that attention_type={name!r} does not accept; "
            f"accepted keys: {sorted(allowed) or 'none'}"
        )


@functools.cache  # called by every attention layer on every call: the answer never changes
def capability_problems(
    name: str,
    *,
    padding_mask: bool = False,
    causal: bool = False,
    cross_attention: bool = False,
    returns_weights: bool = False,
    grid_available: bool = False,
    stateful: bool = False,
    attention_dropout: bool = False,
) -> tuple[str, ...]:
    """Every request the entry ``name`` cannot serve, in words (empty when it can serve them all)."""
    caps = get_attention_class(name).capabilities
    wanted = {
        "padding_mask": padding_mask,
        "causal": causal,
        "cross_attention": cross_attention,
        "returns_weights": returns_weights,
        "stateful": stateful,
        "attention_dropout": attention_dropout,
    }
    reasons = [
        f"it does not support {_CAPABILITY_WORDS[key]}"
        for key, want in wanted.items()
        if want and not getattr(caps, key)
    ]
    if caps.needs_grid and not grid_available:
        reasons.append("it needs a 2-D token grid, which this model does not provide")
    if caps.requires_causal and not causal:
        reasons.append("it is only defined for causal (autoregressive) attention")
    return tuple(reasons)


def raise_problems(name: str, reasons: list[str] | tuple[str, ...]) -> None:
    """One ValueError naming the entry and every reason; nothing when there are none."""
    if reasons:
        raise ValueError(f"attention_type={name!r} cannot be used here: " + "; ".join(reasons))


def check_capabilities(name: str, **requests: bool) -> None:
    """Raise one ValueError listing every request the entry ``name`` cannot serve (see
    :func:`capability_problems` for the requests)."""
    raise_problems(name, capability_problems(name, **requests))


def build_attention(name: str, num_heads: int, head_dim: int, **attention_kwargs: Any) -> AttentionCore:
    """Build the core registered as ``name``, after validating ``attention_kwargs``."""
    validate_attention_kwargs(name, attention_kwargs)
    return get_attention_class(name)(num_heads=num_heads, head_dim=head_dim, **attention_kwargs)


def capability_table() -> list[dict[str, Any]]:
    """One row per registered entry: its name and every capability flag (for docs and tests)."""
    rows = []
    for name in available_attention_types():
        caps = _REGISTRY[name].capabilities
        rows.append({"name": name, **{f.name: getattr(caps, f.name) for f in fields(caps)}})
    return rows
