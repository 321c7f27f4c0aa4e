"""Export by running an import backwards: the names transformers' model gives its weights, mapped to hf_xcv's by the
very converter that loads transformers' checkpoints into hf_xcv.

An export mapping written by hand beside the import mapping drifts from it; this one cannot. :func:`invert_import`
builds transformers' model for the exported config (random weights), converts its state dict with the family's
import function, and follows every tensor to the hf_xcv key it lands on: the import is a renaming, so each of
transformers' weights (and each copy of a tied one) is found again by its storage. The weights then come from the
hf_xcv checkpoint, every one of them used, every shape checked; what the import drops (buffers transformers
rebuilds from the config, such as Swin's ``relative_position_index``) keeps transformers' own values.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
import transformers

ImportFunction = Callable[[dict[str, torch.Tensor]], tuple[dict[str, torch.Tensor], list[str]]]


def transformers_model(config_dict: dict[str, Any], model_kwargs: dict[str, Any] | None = None) -> torch.nn.Module:
    """transformers' own model for ``config_dict`` (its ``model_type`` and first ``architectures`` entry), built
    with ``model_kwargs`` (e.g. a bare ViT without its pooler), with transformers' random initialisation."""
    config_dict = dict(config_dict)
    config = transformers.AutoConfig.for_model(config_dict.pop("model_type"), **config_dict)
    model_class = getattr(transformers, config.architectures[0])
    return model_class(config, **(model_kwargs or {}))


def invert_import(
    target_config: dict[str, Any],
    state_dict: dict[str, torch.Tensor],
    import_state_dict: ImportFunction,
    model_kwargs: dict[str, Any] | None = None,
    unused: tuple[str, ...] = (),
    aliases: Callable[[str], str | None] | None = None,
) -> dict[str, torch.Tensor]:
    """transformers' state dict (its in-memory names) holding hf_xcv's ``state_dict`` for transformers' model of
    ``target_config``; ``import_state_dict`` is the family's transformers -> hf_xcv key conversion. ValueError
    naming the weights when hf_xcv's and transformers' models do not hold the same ones. ``unused``: regexes of
    (hf_xcv-named) weights transformers' model holds but its forward never reads (they keep transformers' init),
    such as the final norm of transformers' ``SwinBackbone``. ``aliases``: for a key of transformers' that holds a
    copy of another weight without sharing its storage (an untied alias), the key it copies (else None); both get
    the same hf_xcv weight."""
    theirs = transformers_model(target_config, model_kwargs).state_dict()
    if aliases is not None:  # an alias is the tensor it copies, as a tied one would be
        theirs = {key: theirs.get(aliases(key) or key, tensor) for key, tensor in theirs.items()}
    imported, _ = import_state_dict(dict(theirs))
    by_storage: dict[tuple[int, tuple[int, ...]], list[str]] = {}
    for key, tensor in theirs.items():
        by_storage.setdefault(_identity(tensor), []).append(key)
    out = dict(theirs)  # what the import drops keeps transformers' value
    problems: list[str] = []
    for ours_key, tensor in imported.items():
        their_keys = by_storage.get(_identity(tensor))
        if their_keys is None:  # the import made a new tensor: not a renaming
            raise ValueError(f"the import of transformers' weights does not rename {ours_key!r}: cannot invert it")
        if ours_key not in state_dict:
            if not any(re.fullmatch(pattern, ours_key) for pattern in unused):
                problems.append(f"missing {ours_key}")
            continue
        value = state_dict[ours_key]
        if value.shape != tensor.shape:
            problems.append(f"{ours_key} has shape {tuple(value.shape)}, transformers' {tuple(tensor.shape)}")
        for key in their_keys:
            out[key] = value
    unused = sorted(set(state_dict) - set(imported))
    if unused:
        problems.append(f"{len(unused)} weights transformers' model has no place for: {unused[:6]}")
    if problems:
        raise ValueError(
            f"the checkpoint does not fit transformers' {target_config['architectures'][0]}: " + "; ".join(problems[:8])
        )
    return out


def _identity(tensor: torch.Tensor) -> tuple[int, tuple[int, ...]]:
    """Storage address and shape: tied copies share both; a tensor and a view of part of it do not."""
    return tensor.data_ptr(), tuple(tensor.shape)
