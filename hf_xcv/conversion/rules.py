"""Regex rename rules for state-dict conversion: the whole checkpoint must be accounted for."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import torch

Rule = tuple[str, str]  # (source regex, replacement with \1 groups)


def rename_keys(
    state_dict: dict[str, torch.Tensor],
    rules: Sequence[Rule],
    drop: Iterable[str] = (),
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Apply the first matching rule to every key.

    Keys matching a ``drop`` regex are removed and returned; a key matching neither a rule nor a
    drop pattern raises ValueError listing every such key, so nothing is silently lost.
    """
    compiled = [(re.compile(pattern), replacement) for pattern, replacement in rules]
    drop_patterns = [re.compile(pattern) for pattern in drop]
    out: dict[str, torch.Tensor] = {}
    dropped: list[str] = []
    unknown: list[str] = []
    for key, tensor in state_dict.items():
        if any(p.fullmatch(key) for p in drop_patterns):
            dropped.append(key)
            continue
        for pattern, replacement in compiled:
            if pattern.fullmatch(key):
                new_key = pattern.sub(replacement, key)
                if new_key in out:
                    raise ValueError(f"two checkpoint keys map to {new_key!r}")
                out[new_key] = tensor
                break
        else:
            unknown.append(key)
    if unknown:
        shown = ", ".join(sorted(unknown)[:10])
        raise ValueError(f"{len(unknown)} checkpoint keys have no conversion rule (first: {shown})")
    return out, dropped


def check_exact_keys(expected: Iterable[str], state_dict: dict[str, torch.Tensor], source: str, model: str) -> None:
    """ValueError unless the converted ``state_dict`` holds exactly the ``expected`` keys (a model's, built on the
    meta device): nothing missing, nothing the model would not use; ``model`` names it in the message ("an IPT for
    ['sr_x2']")."""
    expected = set(expected)
    missing, extra = sorted(expected - set(state_dict)), sorted(set(state_dict) - expected)
    for what, keys in (("lacks", missing), ("has unexpected", extra)):
        if keys:
            raise ValueError(
                f"{source} {what} {len(keys)} weights of {model} after conversion (hf_xcv's names): "
                f"{keys[:8]}{' ...' if len(keys) > 8 else ''}"
            )
