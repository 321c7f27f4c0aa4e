"""The one way hf_xcv turns a seed into a random generator.

What a random operation takes as ``generator`` (a degradation, an augmentation, an attention entry's random
features) is a :data:`RandomSource`: a ``torch.Generator``, a ``numpy.random.Generator``, a non-negative int seed
or None. :func:`as_generator` resolves it once; pass the result on from item to item, and each gets its own draw,
reproducibly.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from .checks import is_integer

RandomSource = torch.Generator | np.random.Generator | int | None


def as_generator(
    source: RandomSource,
    kind: Literal["any", "torch", "numpy"] = "any",
    *,
    device: torch.device | str = "cpu",
    none: Literal["fresh", "global"] = "fresh",
) -> torch.Generator | np.random.Generator | None:
    """The generator ``source`` stands for.

    A generator passes through where its kind is wanted (``kind="any"`` keeps either; a torch generator asked for as
    ``"numpy"`` seeds a numpy one with one draw of its own). An int seed makes a new generator:
    ``torch.Generator(device).manual_seed(seed)``, or ``numpy.random.default_rng(seed)`` for ``kind="numpy"``.
    None means fresh, unrepeatable randomness: a generator seeded by the operating system (``none="fresh"``), or,
    with ``none="global"``, None itself, so that the caller draws from torch's global generator (which
    ``torch.manual_seed`` makes repeatable).

    Raises:
        ValueError: anything else (a float, a bool, a negative seed, a numpy generator where torch's is needed),
            naming what is accepted.
    """
    if isinstance(source, np.random.Generator) and kind != "torch":
        return source
    if isinstance(source, torch.Generator):
        return numpy_generator(source) if kind == "numpy" else source
    if source is None:
        if none == "global":
            return None
        if kind == "numpy":
            return np.random.default_rng()
        return torch.Generator(device=device).manual_seed(int(np.random.SeedSequence().entropy) % 2**63)
    if not is_integer(source) or source < 0:
        accepted = "a torch.Generator" if kind == "torch" else "a torch.Generator, a numpy.random.Generator"
        raise ValueError(f"generator={source!r} must be {accepted}, a non-negative int seed or None")
    if kind == "numpy":
        return np.random.default_rng(int(source))
    return torch.Generator(device=device).manual_seed(int(source))


def numpy_generator(source: RandomSource) -> np.random.Generator:
    """A numpy generator drawn from ``source`` resolved as torch's (a seed or a torch generator seeds it with one
    63-bit draw of its own; a numpy generator passes): numpy code that follows a torch seed."""
    generator = as_generator(source)
    if isinstance(generator, np.random.Generator):
        return generator
    return np.random.default_rng(int(torch.randint(0, 2**63 - 1, (), generator=generator)))
