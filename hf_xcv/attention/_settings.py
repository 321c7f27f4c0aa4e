"""Checkers for the entries' settings (``attention_kwargs``): a wrong type or range is refused by name when
the entry is built, never coerced."""

from __future__ import annotations

from typing import Any


def check_int(entry: str, name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= ``minimum``; a ValueError naming the entry and the setting otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"attention_type={entry!r}: {name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_bool(entry: str, name: str, value: Any) -> bool:
    """``value`` if it is True or False; a ValueError naming the entry and the setting otherwise."""
    if not isinstance(value, bool):
        raise ValueError(f"attention_type={entry!r}: {name} must be True or False, got {value!r}")
    return value


def check_float(entry: str, name: str, value: Any, low: float, high: float | None = None) -> float:
    """``value`` as a real number in [low, high) (or >= low); a ValueError naming the setting otherwise."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value < low
        or (high is not None and value >= high)
    ):
        span = f"in [{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"attention_type={entry!r}: {name} must be a number {span}, got {value!r}")
    return float(value)


def check_pair(entry: str, name: str, value: Any, minimum: int) -> tuple[int, int]:
    """``value`` as a (rows, columns) pair of ints >= ``minimum`` (lists come back from JSON configs)."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"attention_type={entry!r}: {name} must be a (rows, columns) pair, got {value!r}")
    return check_int(entry, f"{name}[0]", value[0], minimum), check_int(entry, f"{name}[1]", value[1], minimum)
