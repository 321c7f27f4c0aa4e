"""Old import paths of modules that moved: the old module warns once and forwards every name to the new one."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def moved_module(old: str, new: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old``, which moved to ``new``: a FutureWarning now (the old module is being
    imported), and every name looked up on ``old`` read from ``new``."""
    message = f"{old} moved to {new}; import from there (the old path will be removed)"
    warnings.warn(message, FutureWarning, stacklevel=3)

    def __getattr__(name: str) -> Any:
        return getattr(importlib.import_module(new), name)

    return __getattr__
