"""The validators of settings: configs' fields, attention entries' ``attention_kwargs``, processors' options; and
the two checks every model makes of its inputs (:func:`check_batch_not_empty` at the entry of each forward,
:func:`check_class_labels` in each classification loss).

Each raises a UsageError (a ValueError that the command line prints in one line) that names the setting and what it
allows, never coercing a wrong type, and returns the value it accepted (:func:`check_float` as a float,
:func:`check_pair` as a tuple). ``owner`` names what the setting belongs to when the name alone does not say it (an
attention entry's settings: ``"attention_type='lsh'"``); it starts the message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from .errors import UsageError


def _refuse(owner: str | None, message: str) -> UsageError:
    return UsageError(f"{owner}: {message}" if owner else message)


def is_integer(value: Any) -> bool:
    """An int (numpy's too, or a 0-d array or tensor holding one), not a bool."""
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0:
        value = value.item()
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_int(name: str, value: Any, minimum: int = 1, *, owner: str | None = None) -> int:
    """``value`` if it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _refuse(owner, f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_bool(name: str, value: Any, *, owner: str | None = None) -> bool:
    """``value`` if it is True or False."""
    if not isinstance(value, bool):
        raise _refuse(owner, f"{name} must be True or False, got {value!r}")
    return value


def check_float(name: str, value: Any, low: float, high: float | None = None, *, owner: str | None = None) -> float:
    """``value`` as a real number in [low, high) (or >= low without ``high``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value < low
        or (high is not None and value >= high)
    ):
        span = f"in [{low}, {high})" if high is not None else f">= {low}"
        raise _refuse(owner, f"{name} must be a number {span}, got {value!r}")
    return float(value)


def check_pair(name: str, value: Any, minimum: int, *, owner: str | None = None) -> tuple[int, int]:
    """``value`` as a (rows, columns) pair of integers >= ``minimum`` (lists come back from JSON configs)."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise _refuse(owner, f"{name} must be a (rows, columns) pair, got {value!r}")
    return (
        check_int(f"{name}[0]", value[0], minimum, owner=owner),
        check_int(f"{name}[1]", value[1], minimum, owner=owner),
    )


def check_size(name: str, value: Any) -> Any:
    """A positive int or a (height, width) pair of positive ints."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if isinstance(value, (list, tuple)) and len(items) != 2:
        raise UsageError(f"{name} must be an int or a (height, width) pair, got {value!r}")
    for item in items:
        check_int(name, item)
    return value


def check_probability(name: str, value: Any) -> float:
    """A probability in [0, 1) (a dropout rate)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise UsageError(f"{name} must be a probability in [0, 1), got {value!r}")
    return value


def check_positive_float(name: str, value: Any) -> float:
    """A finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
        raise UsageError(f"{name} must be a finite positive number, got {value!r}")
    return value


def check_non_negative(name: str, value: Any) -> float:
    """A number >= 0 (a loss weight or a matching cost)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise UsageError(f"{name} must be a number >= 0, got {value!r}")
    return value


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """``value`` if it is one of ``allowed``."""
    allowed = list(allowed)
    if value not in allowed:
        raise UsageError(f"{name}={value!r} is not allowed; allowed values: {allowed}")
    return value


def check_batch_not_empty(name: str, value: Any) -> None:
    """UsageError when ``value``, a model input whose first dimension is the batch, holds no example.

    It reads the shape alone, so it stays in compiled and exported graphs: a static batch decides it while tracing,
    and a free one folds it away (torch.export and dynamic compilation take a free dimension to be at least 2).
    """
    if isinstance(value, torch.Tensor) and value.ndim > 0 and value.shape[0] == 0:
        raise UsageError(f"the batch is empty: {name} has shape {tuple(value.shape)}; pass at least one example")


def check_class_labels(labels: torch.Tensor, num_labels: int, ignore_index: int = -100) -> None:
    """UsageError naming the offending values unless every class label lies in [0, num_labels) or is
    ``ignore_index`` (which cross-entropy skips).

    One device synchronisation, only when labels are given (the loss); left out while compiling or exporting, where
    a graph cannot branch on values (the eager call checks).
    """
    if labels.numel() == 0 or torch.compiler.is_compiling():
        return
    wrong = ((labels < 0) | (labels >= num_labels)) & (labels != ignore_index)
    if not bool(wrong.any()):
        return
    values = labels[wrong].unique().tolist()
    raise UsageError(
        f"labels {values} are out of range: class labels must lie in [0, num_labels={num_labels}) "
        f"({ignore_index} marks an example the loss ignores); set num_labels to the number of classes"
    )
