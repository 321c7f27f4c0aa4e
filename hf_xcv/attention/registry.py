"""The attention registry: one name -> one attention core, all with the same call signature.

An attention *core* turns projected queries, keys and values into attended values; the owning
layer keeps its own Q/K/V/O projections. Every core is called as

    out = core(q, k, v, attention_mask=None, causal=False, grid=None, state=None, attention_bias=None, *,
               cross_attention=False, dropout=0.0, scaling=None, output_weights=False, module=None,
               prefix_tokens=0)

with ``q``: (batch, heads, q_len, head_dim), ``k``/``v``: (batch, heads, kv_len, head_dim), the layout of
``torch.nn.functional.scaled_dot_product_attention``.

* ``attention_mask``: a boolean *keep* mask broadcastable to (batch, heads, q_len, kv_len) (True = may
  attend; fewer than 4 dimensions are leading dimensions of size 1, as in torch broadcasting). Most entries
  take only a key padding mask, (batch or 1, 1, 1, kv_len); those with the ``arbitrary_mask`` capability take
  any pattern.
* ``attention_bias``: an additive float bias broadcastable to (batch, heads, q_len, kv_len) (a 3-D bias is
  (heads, q_len, kv_len)), added to the logits before the softmax (Swin's relative position bias, ALiBi);
  masked keys stay masked whatever their bias, and a query with no key to attend gets zeros. Its values must
  be finite (a row of -inf gives NaN on some paths): padding belongs in the boolean mask, and a pattern that
  is no padding mask goes into the bias as a large negative value for entries without ``arbitrary_mask``
  (Swin's shifted-window regions: -100, as the original code adds).
* ``grid``: the (height, width) of the token layout, for cores that need a 2-D arrangement; ``state``:
  whatever a stateful core carried from the previous call.
* ``cross_attention``: the keys come from another sequence than the queries (the owning layer says so);
  ``dropout`` acts on the attention probabilities in training mode only (like ``nn.Dropout``); ``scaling`` defaults to
  head_dim**-0.5; ``output_weights`` asks for the (batch, heads, q_len, kv_len) probabilities; ``module``
  is the owning layer (its config picks the backend of ``full``); ``prefix_tokens`` counts the leading
  special tokens (ViT's [CLS]): global-token entries make them global, grid entries keep them out of the
  grid, so that ``length == prefix_tokens + height * width``.

It returns an :class:`AttentionOutput` (values in the layout of ``q``, optional weights, optional new
state, optional auxiliary loss).

The base class owns the call: :meth:`AttentionCore.forward` checks the request once against the entry's
declared :class:`Capabilities` and :meth:`AttentionCore.length_problems` (shapes and flags only, nothing
that reads tensor values, so it compiles and exports), raises one ``ValueError`` listing every reason, and
hands the entry its tensors and an :class:`AttentionCall` with the validated extras. An entry implements
only :meth:`AttentionCore.attend`.

Each core also says how it relates to plain softmax attention: :meth:`AttentionCore.exact_kwargs` gives the
settings under which it *is* plain softmax attention, and pattern-based cores return their boolean pattern
from :meth:`AttentionCore.dense_mask`, so that ``core(q, k, v) == dense_attention(q, k, v, core.dense_mask(q,
k))`` (with an ``attention_bias`` too, for entries that declare it).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from itertools import chain
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn
from transformers import initialization as init

from ..utils.errors import UsageError


@dataclass(frozen=True)
class Capabilities:
    """What an attention core can serve.

    Attributes:
        padding_mask: accepts a boolean keep mask over keys.
        arbitrary_mask: accepts any boolean keep mask broadcastable to (B, H, Lq, Lk), not only key padding.
        causal: supports autoregressive (lower-triangular) attention.
        cross_attention: queries and keys may come from different sequences of different lengths.
        returns_weights: can return the (batch, heads, q_len, kv_len) attention probabilities.
        attention_bias: adds an additive float bias to its logits (within its pattern, for sparse entries).
        needs_grid: requires the (height, width) layout of the tokens.
        stateful: carries memory from one call to the next.
        requires_causal: only defined for causal attention (e.g. segment recurrence).
        attention_dropout: has attention probabilities that dropout can act on (kernel attentions do not).
        relative_positions: encodes token positions itself; a model then adds no absolute positions.
        length_constraint: what lengths it takes, in words (for docs; enforced by ``length_problems``).
    """

    padding_mask: bool = False
    arbitrary_mask: bool = False
    causal: bool = False
    cross_attention: bool = False
    returns_weights: bool = False
    attention_bias: bool = False
    needs_grid: bool = False
    stateful: bool = False
    requires_causal: bool = False
    attention_dropout: bool = True
    relative_positions: bool = False
    length_constraint: str = ""


# The requests a caller can make, in words for error messages. An entry may explain its own refusal
# instead (``AttentionCore.refusals``); ``{value}`` there is the requested value (e.g. the dropout).
_REQUEST_WORDS = {
    "padding_mask": "a padding mask",
    "causal": "causal (autoregressive) masking",
    "cross_attention": "cross-attention (keys from another sequence)",
    "returns_weights": "returning attention weights (output_attentions=True)",
    "attention_bias": "an additive attention bias (attention_bias=...)",
    "arbitrary_mask": "a boolean mask other than key padding (put such a pattern into the bias)",
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


class AttentionCall(NamedTuple):
    """The validated extras of one core call, handed to :meth:`AttentionCore.attend`.

    Attributes:
        mask: the boolean keep mask as a 4-D tensor broadcastable to (B, H, Lq, Lk) (for entries without
            ``arbitrary_mask``, a key padding mask (B or 1, 1, 1, Lk)), or None.
        key_keep: the same mask as a (B, Lk) key padding mask, for entries without ``arbitrary_mask``.
        causal: autoregressive masking; queries align with the *last* keys (query i is key kv_len - q_len + i).
        cross_attention: the keys come from another sequence.
        grid: (height, width) of the tokens after the prefix, or None.
        prefix_tokens: leading special tokens ([CLS]).
        bias: the additive float bias as a 4-D tensor broadcastable to (B, H, Lq, Lk), or None.
        dropout: dropout probability on the attention probabilities (0.0 when the core is in eval mode).
        scaling: the factor on q.k (head_dim**-0.5 unless the caller chose another).
        output_weights: return the probabilities.
        state: what a stateful core carried from the previous call.
        module: the owning layer (or the core itself when called directly).
    """

    mask: torch.Tensor | None
    key_keep: torch.Tensor | None
    causal: bool
    cross_attention: bool
    grid: tuple[int, int] | None
    prefix_tokens: int
    bias: torch.Tensor | None
    dropout: float
    scaling: float
    output_weights: bool
    state: Any
    module: nn.Module


def _weights_on_graph(out: AttentionOutput, v: torch.Tensor) -> AttentionOutput:
    """``out`` with its values as they were computed but the gradient of ``weights @ v`` (the same function):
    the maps of an entry that computed them as copies join the graph, and the values do not change by a bit."""
    through_weights = torch.matmul(out.weights.to(v.dtype), v)  # (B, H, Lq, D)
    return out._replace(values=out.values.detach() + (through_weights - through_weights.detach()))


def _as_4d(x: torch.Tensor | None) -> torch.Tensor | None:
    """A mask or bias of fewer than 4 dimensions as a 4-D view, leading dimensions of size 1."""
    if x is None or x.dim() >= 4:
        return x
    return x.reshape((1,) * (4 - x.dim()) + tuple(x.shape))


def _fits(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether a 4-D ``shape`` broadcasts to ``target`` (every size 1 or the target's).

    Under torch.compile with dynamic sizes two equal sizes may be written as expressions the tracer cannot prove
    equal (Swin's windows per image: ceil(H / 2 / 2) and H // 4); there the check is left to the operation that
    broadcasts, which fails at run time on a real mismatch."""
    if len(shape) != len(target):
        return False
    if torch.compiler.is_compiling():
        return True
    return all(size in (1, want) for size, want in zip(shape, target))


class AttentionCore(nn.Module):
    """Base class of every registry entry. Subclasses set ``name`` and ``capabilities`` and implement
    :meth:`attend`; :meth:`forward` validates the call once and hands it over.

    Constructor arguments after ``num_heads`` and ``head_dim`` are the entry's ``attention_kwargs``;
    they must be keyword arguments with defaults so the registry can validate them.
    """

    name: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities] = Capabilities()
    # The entry's own words for a capability it lacks (keys as in _REQUEST_WORDS), when it can say why.
    refusals: ClassVar[dict[str, str]] = {}
    # Settings that give a non-trivial pattern on inputs of a few dozen tokens (tiny test models, demos).
    small_kwargs: ClassVar[dict[str, Any]] = {}
    # True when which keys a query sees depends on query/key *contents* (hashing, clustering, sorting):
    # changing future queries/keys may then regroup the present, but future values never leak.
    content_routed: ClassVar[bool] = False
    # Which of the owning layer's input projections the core reads. A core that synthesizes its attention
    # without keys (Synthesizer) drops "k"; the layer then builds no such projection (it would get no
    # gradient) and passes zeros of the right shape in its place.
    projections: ClassVar[tuple[str, ...]] = ("q", "k", "v")
    # True when the returned weights are assembled from blocks, clusters or rounds beside the values rather than
    # being what the values were computed from: with ``output_weights`` the base class then routes the values'
    # gradient through ``weights @ v`` (the same function), so that the maps are on the autograd graph
    # (``retain_grad``, attribution methods), as transformers' eager attention maps are, while the values stay
    # exactly as computed. Costs an (Lq x Lk) matmul, only when weights are asked for.
    weights_are_copies: ClassVar[bool] = False

    def use_fused(self, tensor: torch.Tensor) -> bool:
        """Whether a call on ``tensor`` takes the entry's fused path (entries that have one carry a ``fused``
        flag): True or False as set on the module; ``None`` (their default) on CPU tensors only. The fused paths
        loop over chunks of the sequence in Python, so on an accelerator their kernels are too small to fill it:
        on an H200 they took 2-80x the time of the plain path, which is that fast there and whose memory a GPU
        has room for (benchmarks/results/attention_cuda.md). Set ``fused = True`` to trade that time for the
        memory on a GPU."""
        flag = getattr(self, "fused", False)
        return tensor.device.type == "cpu" if flag is None else bool(flag)

    def fused_serves(self, call: AttentionCall, tensor: torch.Tensor) -> bool:
        """:meth:`use_fused` for a call a fused Function can serve: one that returns no weights, has no attention
        dropout and is not traced by torch.compile (those keep the plain autograd path)."""
        plain = call.output_weights or call.dropout > 0.0 or torch.compiler.is_compiling()
        return self.use_fused(tensor) and not plain

    def __init__(self, num_heads: int, head_dim: int):
        super().__init__()
        if num_heads <= 0 or head_dim <= 0:
            raise UsageError(f"num_heads and head_dim must be positive, got {num_heads} and {head_dim}")
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.attention_kwargs: dict[str, Any] = {}  # the settings it was built with (set by build_attention)

    @property
    def owner(self) -> str:
        """How a refused setting names the entry it belongs to (``attention_type='lsh'``)."""
        return f"attention_type={self.name!r}"

    def _own_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The core's parameters and buffers, except those of standard layers (Linear, LayerNorm, Embedding),
        which a model's ``_init_weights`` initialises like any other."""
        for prefix, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.LayerNorm, nn.Embedding)):
                continue
            for name, tensor in chain(module.named_parameters(recurse=False), module.named_buffers(recurse=False)):
                yield (f"{prefix}.{name}" if prefix else name), tensor

    @torch.no_grad()
    def initialize_unloaded_(self) -> None:
        """Give every tensor of the core that holds no loaded value (transformers flags loaded ones
        ``_is_hf_initialized``) the value a new core of the same settings starts with: random features, identity
        projections, centroids, seeds. A model calls it when it initialises weights, so a core that a checkpoint
        did not have (another ``attention_type`` than it was saved with) starts as if built fresh."""
        own = dict(self._own_tensors())
        if all(getattr(tensor, "_is_hf_initialized", False) for tensor in own.values()):
            return
        with torch.device("cpu"):  # outside the meta device transformers builds models on
            fresh = dict(type(self)(self.num_heads, self.head_dim, **self.attention_kwargs)._own_tensors())
        for name, tensor in own.items():
            init.copy_(tensor, fresh[name].to(tensor.dtype))

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        causal: bool = False,
        grid: tuple[int, int] | None = None,
        state: Any = None,
        attention_bias: torch.Tensor | None = None,
        *,
        cross_attention: bool = False,
        dropout: float = 0.0,
        scaling: float | None = None,
        output_weights: bool = False,
        module: nn.Module | None = None,
        prefix_tokens: int = 0,
    ) -> AttentionOutput:
        """Validate the request (one ValueError listing every reason) and run :meth:`attend`; the arguments
        are described in the module docstring."""
        dropout = float(dropout) if self.training else 0.0  # like nn.Dropout: training mode only
        problems = self.call_problems(
            q,
            k,
            v,
            attention_mask,
            attention_bias,
            causal=causal,
            cross_attention=cross_attention,
            grid=grid,
            state=state,
            dropout=dropout,
            output_weights=output_weights,
            prefix_tokens=prefix_tokens,
            module=module,
        )
        raise_problems(self.name, problems)
        attention_mask, attention_bias = _as_4d(attention_mask), _as_4d(attention_bias)
        key_keep = None
        if attention_mask is not None and not self.capabilities.arbitrary_mask:
            key_keep = attention_mask[:, 0, 0, :].expand(q.shape[0], k.shape[2])  # (B, Lk)
        call = AttentionCall(
            mask=attention_mask,
            key_keep=key_keep,
            causal=bool(causal),
            cross_attention=bool(cross_attention),
            grid=None if grid is None else (int(grid[0]), int(grid[1])),
            prefix_tokens=int(prefix_tokens),
            bias=attention_bias,
            dropout=dropout,
            scaling=q.shape[-1] ** -0.5 if scaling is None else scaling,
            output_weights=bool(output_weights),
            state=state,
            module=self if module is None else module,
        )
        out = self.attend(q, k, v, call)
        if output_weights and self.weights_are_copies and out.weights is not None:
            out = _weights_on_graph(out, v)
        return out

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> AttentionOutput:
        """The entry's attention on a validated call: q (B, H, Lq, D), k and v (B, H, Lk, D)."""
        raise NotImplementedError

    @classmethod
    def refusal(cls, request: str, value: Any = True) -> str:
        """Why this entry cannot serve ``request`` (a key of the capability words), in words."""
        words = cls.refusals.get(request)
        return words.format(value=value) if words else f"it does not support {_REQUEST_WORDS[request]}"

    def call_problems(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attention_bias: torch.Tensor | None,
        *,
        causal: bool,
        cross_attention: bool,
        grid: tuple[int, int] | None,
        state: Any,
        dropout: float,
        output_weights: bool,
        prefix_tokens: int,
        module: nn.Module | None = None,
    ) -> list[str]:
        """Every reason this call cannot be served, from shapes and flags only (empty when it can). Runs on
        every call: plain comparisons, and words only for what is wrong. An entry with checks of its own
        (``full``'s backends) extends it; lengths and states have their own hooks."""
        caps = self.capabilities
        problems = _tensor_problems(q, k, v)
        if problems:
            return problems
        batch, heads, q_len, _ = q.shape
        kv_len = k.shape[2]
        if causal and not caps.causal:
            problems.append(self.refusal("causal"))
        if cross_attention and not caps.cross_attention:
            problems.append(self.refusal("cross_attention"))
        if output_weights and not caps.returns_weights:
            problems.append(self.refusal("returns_weights"))
        if state is not None:
            problems += self.state_problems(state, k) if caps.stateful else [self.refusal("stateful")]
        if dropout > 0.0 and not caps.attention_dropout:
            problems.append(self.refusal("attention_dropout", dropout))
        if caps.requires_causal and not causal:
            problems.append("it is only defined for causal (autoregressive) attention")
        if caps.needs_grid and grid is None:
            problems.append(
                "it needs a 2-D token grid: it needs the (height, width) grid of the tokens, and grid=None was passed"
            )
        if prefix_tokens < 0:
            problems.append(f"prefix_tokens must be >= 0, got {prefix_tokens}")
        if attention_mask is not None:
            problems += self._mask_problems(attention_mask, batch, heads, q_len, kv_len)
        if attention_bias is not None:
            problems += self._bias_problems(attention_bias, batch, heads, q_len, kv_len)
        return problems + self.length_problems(q_len, kv_len, grid, prefix_tokens)

    def _mask_problems(self, mask: torch.Tensor, batch: int, heads: int, q_len: int, kv_len: int) -> list[str]:
        if mask.dtype != torch.bool:
            return [f"attention_mask must be a boolean keep mask (True = attend), got dtype {mask.dtype}"]
        if not self.capabilities.padding_mask:
            return [self.refusal("padding_mask")]
        given, shape = tuple(mask.shape), (1,) * (4 - mask.dim()) + tuple(mask.shape)
        if self.capabilities.arbitrary_mask:
            if not _fits(shape, (batch, heads, q_len, kv_len)):
                return [f"attention_mask of shape {given} does not broadcast to {(batch, heads, q_len, kv_len)}"]
            return []
        if len(shape) != 4 or shape[1] != 1 or shape[2] != 1:
            return [
                f"it takes only a key padding mask shaped (batch, 1, 1, kv_len); got a mask of shape {given} (a "
                "pattern that is no padding mask can go into attention_bias as a large negative value)"
            ]
        if shape[-1] != kv_len or shape[0] not in (1, batch):
            return [f"padding mask of shape {given} does not fit batch {batch} and {kv_len} keys"]
        return []

    def _bias_problems(self, bias: torch.Tensor, batch: int, heads: int, q_len: int, kv_len: int) -> list[str]:
        if not self.capabilities.attention_bias:
            return [self.refusal("attention_bias")]
        if not bias.is_floating_point():
            return [f"attention_bias must be a float tensor, got dtype {bias.dtype}"]
        if not _fits((1,) * (4 - bias.dim()) + tuple(bias.shape), (batch, heads, q_len, kv_len)):
            return [
                f"attention_bias of shape {tuple(bias.shape)} does not broadcast to (batch, heads, q_len, kv_len) "
                f"= {(batch, heads, q_len, kv_len)}"
            ]
        return []

    def state_problems(self, state: Any, k: torch.Tensor) -> list[str]:
        """Reasons (in words) why a stateful entry cannot continue from ``state`` with keys ``k``."""
        return []

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


def _tensor_problems(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[str]:
    """q, k, v must be (B, H, L, D) with one batch and head count, keys and values of one length."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return [f"q, k, v must be (batch, heads, length, head_dim), got {q.dim()}-D, {k.dim()}-D, {v.dim()}-D tensors"]
    (qb, qh, _, qd), (kb, kh, kl, kd), (vb, vh, vl, _) = q.shape, k.shape, v.shape
    if not (qb == kb == vb and qh == kh == vh and kl == vl and qd == kd):
        return [f"q, k, v shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)} do not fit together"]
    return []


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
        raise UsageError(f"attention_type={name!r} is not registered; allowed values: {available_attention_types()}")
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


# Settings tied to the sequence length; everything else is the entry's paper default (the ones the Long Range
# Arena-style benchmarks use, benchmarks/bench_attention.py and benchmarks/bench_lra.py). name -> (a note for
# tables, (length, the entry's other settings) -> the tied settings).
LENGTH_TIED_KWARGS: dict[str, tuple[str, Callable[[int, dict[str, Any]], dict[str, Any]]]] = {
    # E, F are (k, seq_len): they must cover the input
    "linformer": ("seq_len=L", lambda length, settings: {"seq_len": length}),
    # the paper's k ~ sqrt(L) clusters is what makes it O(L^1.5); a fixed count stays O(L^2 / k)
    "routing": ("num_clusters=sqrt(L)", lambda length, settings: {"num_clusters": math.isqrt(length)}),
    # the sorting network scores every block: L / block_size outputs (the default 128 blocks stop at 8K)
    "sinkhorn": (
        "max_blocks=L/block_size",
        lambda length, settings: {"max_blocks": -(-length // settings["block_size"])},
    ),
    # the synthesized (L, L) score matrices cover max_length positions
    "synthesizer_dense": ("max_length=L", lambda length, settings: {"max_length": length}),
    "synthesizer_random": ("max_length=L", lambda length, settings: {"max_length": length}),
}


def attention_kwargs_at_length(name: str, length: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The entry's ``attention_kwargs`` for sequences of ``length`` tokens: its defaults and ``overrides``, with the
    settings tied to the length (:data:`LENGTH_TIED_KWARGS`) worked out from them unless ``overrides`` sets them
    (Sinkhorn's block count follows an overridden ``block_size``)."""
    settings = {**attention_kwarg_defaults(name), **(overrides or {})}
    tied = LENGTH_TIED_KWARGS[name][1](length, settings) if name in LENGTH_TIED_KWARGS else {}
    return {**settings, **{k: v for k, v in tied.items() if k not in (overrides or {})}}


def validate_attention_kwargs(name: str, attention_kwargs: dict[str, Any] | None) -> None:
    """Reject ``attention_kwargs`` keys the entry does not take (nothing is silently dropped)."""
    allowed = attention_kwarg_defaults(name)
    unknown = sorted(set(attention_kwargs or {}) - set(allowed))
    if unknown:
        raise UsageError(
            f"attention_kwargs has keys {unknown} that attention_type={name!r} does not accept; "
            f"accepted keys: {sorted(allowed) or 'none'}"
        )


def capability_problems(
    name: str,
    *,
    padding_mask: bool = False,
    causal: bool = False,
    cross_attention: bool = False,
    returns_weights: bool = False,
    attention_bias: bool = False,
    arbitrary_mask: bool = False,
    grid_available: bool = False,
    stateful: bool = False,
    attention_dropout: float = 0.0,
) -> tuple[str, ...]:
    """Every request a model would make of the entry ``name`` that it cannot serve, in words (empty when it
    can serve them all): what a model checks once, at construction, before any call."""
    cls = get_attention_class(name)
    caps = cls.capabilities
    wanted = {
        "padding_mask": padding_mask,
        "causal": causal,
        "cross_attention": cross_attention,
        "returns_weights": returns_weights,
        "attention_bias": attention_bias,
        "arbitrary_mask": arbitrary_mask,
        "stateful": stateful,
        "attention_dropout": attention_dropout,
    }
    reasons = [cls.refusal(key, want) for key, want in wanted.items() if want and not getattr(caps, key)]
    if caps.needs_grid and not grid_available:
        reasons.append("it needs a 2-D token grid, which this model does not provide")
    if caps.requires_causal and not causal:
        reasons.append("it is only defined for causal (autoregressive) attention")
    return tuple(reasons)


def raise_problems(name: str, reasons: list[str] | tuple[str, ...]) -> None:
    """One ValueError naming the entry and every reason; nothing when there are none."""
    if reasons:
        raise UsageError(f"attention_type={name!r} cannot be used here: " + "; ".join(reasons))


def check_capabilities(name: str, **requests: Any) -> None:
    """Raise one ValueError listing every request the entry ``name`` cannot serve (see
    :func:`capability_problems` for the requests)."""
    raise_problems(name, capability_problems(name, **requests))


def build_attention(name: str, num_heads: int, head_dim: int, **attention_kwargs: Any) -> AttentionCore:
    """Build the core registered as ``name``, after validating ``attention_kwargs``."""
    validate_attention_kwargs(name, attention_kwargs)
    core = get_attention_class(name)(num_heads=num_heads, head_dim=head_dim, **attention_kwargs)
    core.attention_kwargs = dict(attention_kwargs)
    return core


def capability_table() -> list[dict[str, Any]]:
    """One row per registered entry: its name and every capability flag (for docs and tests)."""
    rows = []
    for name in available_attention_types():
        caps = _REGISTRY[name].capabilities
        rows.append({"name": name, **{f.name: getattr(caps, f.name) for f in fields(caps)}})
    return rows
