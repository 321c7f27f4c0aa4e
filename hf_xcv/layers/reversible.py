"""Reversible residual layers and chunked feed-forward, the two memory savers of the Reformer (Kitaev et al. 2020).

A reversible layer (RevNet coupling, Gomez et al. 2017) works on two streams of the same shape::

    Y1 = X1 + F(X2)        F: attention sublayer (with its norm)
    Y2 = X2 + G(Y1)        G: feed-forward sublayer (with its norm)

and is inverted exactly by ``X2 = Y2 - G(Y1)``, ``X1 = Y1 - F(X2)``. ``ReversibleSequence`` therefore keeps only
the last layer's outputs for backward and rebuilds every earlier layer's inputs from them, so activation memory
does not grow with depth. Its price is one extra forward of every sublayer during backward.

Chunked feed-forward applies a position-wise module to slices of the sequence, so the wide hidden activation
(``intermediate_size`` per token) exists for one chunk at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.autograd.function import once_differentiable


def _check_chunk_size(chunk_size: int) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 0:
        raise ValueError(f"chunk_size must be an int >= 0 (0 = no chunking), got {chunk_size!r}")


def _check_dim(dim: int, ndim: int | None = None) -> None:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise ValueError(f"dim must be an int, got {dim!r}")
    if ndim is not None and not -ndim <= dim < ndim:
        raise ValueError(f"dim={dim} is out of range for hidden_states with {ndim} dimensions")


def chunked_feed_forward(
    module: Callable[[torch.Tensor], torch.Tensor], hidden_states: torch.Tensor, chunk_size: int, dim: int = 1
) -> torch.Tensor:
    """Apply a position-wise ``module`` to slices of ``chunk_size`` along ``dim`` and concatenate the results.

    The output equals ``module(hidden_states)`` because the module treats every position alone. ``chunk_size=0``
    (or one at least the length) runs the module once. The last chunk may be shorter. Under ``torch.no_grad`` (and
    in the forward of ``ReversibleSequence``) only one chunk's intermediate activations exist at a time; under
    ordinary autograd every chunk's activations are still saved for backward.
    """
    _check_chunk_size(chunk_size)
    if not isinstance(hidden_states, torch.Tensor):
        raise ValueError(f"hidden_states must be a torch.Tensor, got {type(hidden_states).__name__}")
    _check_dim(dim, hidden_states.ndim)
    if not callable(module):
        raise ValueError(f"module must be callable, got {type(module).__name__}")
    if chunk_size == 0 or hidden_states.shape[dim] <= chunk_size:
        return module(hidden_states)
    return torch.cat([module(chunk) for chunk in hidden_states.split(chunk_size, dim=dim)], dim=dim)


class ChunkedFeedForward(nn.Module):
    """``ff`` applied in sequence chunks of ``chunk_size`` along ``dim`` (see ``chunked_feed_forward``)."""

    def __init__(self, ff: nn.Module, chunk_size: int, dim: int = 1):
        super().__init__()
        if not isinstance(ff, nn.Module):
            raise ValueError(f"ff must be an nn.Module, got {type(ff).__name__}")
        _check_chunk_size(chunk_size)
        _check_dim(dim)
        self.ff = ff
        self.chunk_size = chunk_size
        self.dim = dim

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return chunked_feed_forward(self.ff, hidden_states, self.chunk_size, self.dim)

    def extra_repr(self) -> str:
        return f"chunk_size={self.chunk_size}, dim={self.dim}"


class ReversibleBlock(nn.Module):
    """One RevNet coupling: ``(x1, x2) -> (x1 + f(x2), x2 + g(x1 + f(x2)))``; keyword arguments go to ``f``."""

    def __init__(self, f: nn.Module, g: nn.Module):
        super().__init__()
        self.f = f
        self.g = g

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, **f_kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        y1 = x1 + self.f(x2, **f_kwargs)
        return y1, x2 + self.g(y1)

    def inverse(self, y1: torch.Tensor, y2: torch.Tensor, **f_kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The inputs ``(x1, x2)`` that gave ``(y1, y2)``; exact up to rounding when f and g are deterministic."""
        x2 = y2 - self.g(y1)
        return y1 - self.f(x2, **f_kwargs), x2


@dataclass
class _RngState:
    """The generator states in force just before one sublayer call, to replay its dropout in backward."""

    cpu: torch.Tensor | None = None
    cuda: dict[int, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def capture(cls, cuda_devices: Sequence[int], enabled: bool) -> _RngState:
        if not enabled:
            return cls()
        return cls(torch.get_rng_state(), {d: torch.cuda.get_rng_state(d) for d in cuda_devices})

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        """Run the block with these states; the caller's generators are untouched afterwards (fork_rng)."""
        if self.cpu is None:
            yield
            return
        with torch.random.fork_rng(devices=list(self.cuda), enabled=True):
            torch.set_rng_state(self.cpu)
            for device, state in self.cuda.items():
                torch.cuda.set_rng_state(state, device)
            yield


def _accumulate(grads: list[torch.Tensor | None], indices: Sequence[int], new: Sequence[torch.Tensor | None]) -> None:
    for index, grad in zip(indices, new):
        if grad is not None:
            grads[index] = grad if grads[index] is None else grads[index] + grad


def _add(grad: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
    return grad if extra is None else grad + extra


class _ReversibleFunction(torch.autograd.Function):
    """Forward of all blocks without a graph; backward rebuilds each block's inputs from its outputs.

    ``leaves`` (the f keyword tensors that need a gradient, then the parameters) are inputs of the Function so
    that their gradients flow through autograd like any other's (``torch.autograd.grad``, DDP hooks).
    ``plan`` holds everything else; ``plan["f_index"][i]`` / ``plan["g_index"][i]`` say which leaves block i's
    f / g can reach.
    """

    @staticmethod
    def forward(ctx, x1: torch.Tensor, x2: torch.Tensor, plan: dict[str, Any], *leaves: torch.Tensor):
        kwargs = plan["kwargs"]
        ctx.rng_states = []
        for block in plan["blocks"]:
            f_state = _RngState.capture(plan["cuda_devices"], plan["preserve_rng_state"])
            x1 = x1 + block.f(x2, **kwargs)
            g_state = _RngState.capture(plan["cuda_devices"], plan["preserve_rng_state"])
            x2 = x2 + block.g(x1)
            ctx.rng_states.append((f_state, g_state))
        ctx.plan = {key: value for key, value in plan.items() if key != "kwargs"}  # keyword tensors: saved below
        ctx.kwarg_names = [name for name, value in kwargs.items() if isinstance(value, torch.Tensor)]
        ctx.static_kwargs = {name: value for name, value in kwargs.items() if name not in ctx.kwarg_names}
        # The last outputs and the (depth-independent) keyword tensors are all that backward needs.
        ctx.save_for_backward(x1, x2, *(kwargs[name] for name in ctx.kwarg_names))
        return x1, x2

    @staticmethod
    @once_differentiable
    def backward(ctx, dy1: torch.Tensor, dy2: torch.Tensor):
        y1, y2, *kwarg_values = ctx.saved_tensors
        plan = ctx.plan
        kwargs = {**ctx.static_kwargs, **dict(zip(ctx.kwarg_names, kwarg_values))}
        leaves = [kwargs[name] for name in plan["grad_kwarg_names"]] + plan["params"]
        leaf_grads: list[torch.Tensor | None] = [None] * len(leaves)
        for i in reversed(range(len(plan["blocks"]))):
            with torch.autocast(**plan["autocast"]):  # the forward's autocast, for an identical recomputation
                y1, y2, dy1, dy2 = _backward_block(
                    plan["blocks"][i], (y1, y2, dy1, dy2), kwargs, ctx.rng_states[i], leaves, leaf_grads,
                    (plan["f_index"][i], plan["g_index"][i]),
                )  # fmt: skip
        return (dy1, dy2, None, *leaf_grads)


def _backward_block(
    block: ReversibleBlock,
    state: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    kwargs: dict[str, Any],
    rng: tuple[_RngState, _RngState],
    leaves: list[torch.Tensor],
    leaf_grads: list[torch.Tensor | None],
    index: tuple[list[int], list[int]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """From one block's outputs and their gradients to its inputs and theirs; adds the leaves' gradients."""
    y1, y2, dy1, dy2 = state
    (f_rng, g_rng), (f_index, g_index) = rng, index
    with torch.enable_grad():  # y2 = x2 + G(y1): dL/dy1 gains G's share, G's leaves get dy2
        y1 = y1.detach().requires_grad_(True)
        with g_rng.replay():
            g_out = block.g(y1)
        grads = torch.autograd.grad(g_out, [y1] + [leaves[j] for j in g_index], dy2, allow_unused=True)
    dy1 = _add(dy1, grads[0])
    _accumulate(leaf_grads, g_index, grads[1:])
    x2 = y2 - g_out.detach()
    del g_out, grads
    with torch.enable_grad():  # y1 = x1 + F(x2): dL/dx2 gains F's share, F's leaves get dy1
        x2 = x2.detach().requires_grad_(True)
        with f_rng.replay():
            f_out = block.f(x2, **kwargs)
        grads = torch.autograd.grad(f_out, [x2] + [leaves[j] for j in f_index], dy1, allow_unused=True)
    _accumulate(leaf_grads, f_index, grads[1:])
    x1 = y1.detach() - f_out.detach()
    return x1, x2.detach(), dy1, _add(dy2, grads[0])


class ReversibleSequence(nn.Module):
    """A stack of reversible layers whose backward recomputes activations instead of storing them.

    Args:
        blocks: one ``(f, g)`` pair of modules (or a ``ReversibleBlock``) per layer. ``f`` is the attention
            sublayer including its norm and is called as ``f(x, **f_kwargs)``; ``g`` is the feed-forward sublayer
            including its norm, called as ``g(x)``. Both map (B, L, C) -> (B, L, C).
        reversible: ``False`` computes the same function with ordinary autograd (every activation stored).
        preserve_rng_state: replay each sublayer's CPU (and CUDA) generator state when it is recomputed in
            backward, so dropout masks match the forward's (like ``torch.utils.checkpoint``). Turn it off only
            for sublayers without randomness.

    Entry and exit follow the Reformer: the input ``x`` enters both streams, ``(x, x)``, and the output is their
    mean ``(Y1 + Y2) / 2`` (transformers' Reformer instead concatenates the streams to 2C before its final norm;
    use ``forward_streams`` for that). Sublayers must not change state in forward (BatchNorm running statistics
    would be updated twice), and the reversible backward does not support double backward.
    """

    def __init__(
        self,
        blocks: Sequence[tuple[nn.Module, nn.Module] | ReversibleBlock],
        reversible: bool = True,
        preserve_rng_state: bool = True,
    ):
        super().__init__()
        self.blocks = nn.ModuleList(_as_block(block, i) for i, block in enumerate(blocks))
        self.reversible = reversible
        self.preserve_rng_state = preserve_rng_state

    def forward(self, hidden_states: torch.Tensor, **f_kwargs: Any) -> torch.Tensor:
        """(B, L, C) -> (B, L, C): the mean of the two output streams."""
        y1, y2 = self.forward_streams(hidden_states, hidden_states, **f_kwargs)
        return (y1 + y2) / 2

    def forward_streams(self, x1: torch.Tensor, x2: torch.Tensor, **f_kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Both streams through every layer; reversible backward when enabled and a graph is being recorded."""
        for name, value in (("x1", x1), ("x2", x2)):
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        if not (self.reversible and torch.is_grad_enabled() and len(self.blocks)):
            for block in self.blocks:
                x1, x2 = block(x1, x2, **f_kwargs)
            return x1, x2
        plan, leaves = self._plan(x1, f_kwargs)
        return _ReversibleFunction.apply(x1, x2, plan, *leaves)

    def _plan(self, x: torch.Tensor, f_kwargs: dict[str, Any]) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """What the autograd Function needs: blocks, leaves to differentiate and which block reaches which."""
        grad_kwarg_names = [k for k, v in f_kwargs.items() if isinstance(v, torch.Tensor) and v.requires_grad]
        params = list({id(p): p for p in self.parameters() if p.requires_grad}.values())  # tied weights once
        position = {id(p): len(grad_kwarg_names) + j for j, p in enumerate(params)}
        kwarg_index = list(range(len(grad_kwarg_names)))
        tensors = [x, *(v for v in f_kwargs.values() if isinstance(v, torch.Tensor))]
        device_type = x.device.type
        plan = {
            "blocks": list(self.blocks),
            "kwargs": dict(f_kwargs),
            "grad_kwarg_names": grad_kwarg_names,
            "params": params,
            "f_index": [kwarg_index + _positions(block.f, position) for block in self.blocks],
            "g_index": [_positions(block.g, position) for block in self.blocks],
            "preserve_rng_state": self.preserve_rng_state,
            "cuda_devices": sorted({t.device.index for t in tensors if t.device.type == "cuda"}),
            "autocast": {
                "device_type": device_type,
                "dtype": torch.get_autocast_dtype(device_type),
                "enabled": torch.is_autocast_enabled(device_type),
            },
        }
        return plan, [f_kwargs[name] for name in grad_kwarg_names] + params

    def extra_repr(self) -> str:
        return f"reversible={self.reversible}, preserve_rng_state={self.preserve_rng_state}"


def _positions(module: nn.Module, position: dict[int, int]) -> list[int]:
    return [position[id(p)] for p in module.parameters() if id(p) in position]


def _as_block(block: tuple[nn.Module, nn.Module] | ReversibleBlock, index: int) -> ReversibleBlock:
    if isinstance(block, ReversibleBlock):
        return block
    if not isinstance(block, (tuple, list)) or len(block) != 2:
        raise ValueError(f"blocks[{index}] must be an (f, g) pair of nn.Modules or a ReversibleBlock, got {block!r}")
    f, g = block
    for name, module in (("f", f), ("g", g)):
        if not isinstance(module, nn.Module):
            raise ValueError(f"blocks[{index}] {name} must be an nn.Module, got {type(module).__name__}")
    return ReversibleBlock(f, g)
