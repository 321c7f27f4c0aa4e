"""peft's default adapter targets for hf_xcv's model types, so that ``LoraConfig()`` without
``target_modules`` works as it does for transformers' own models.

peft keeps one table per adapter method (LoRA, IA3, AdaLoRA, ...) from ``model_type`` to module names.
hf_xcv's models use transformers' current names (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, ``fc1``,
``fc2``) in every family, so each table gets, for every hf_xcv type, the choice peft made for the analogous
architecture (Bart, whose modules carry the same names; its ``out_proj`` is hf_xcv's ``o_proj``). Only
hf_xcv's own ``xcv_*`` keys are added: nothing peft does for other models changes.

A model type without attention projections names the modules that take their part instead (its registry entry's
``adapter_module_names``: TTSR's residual blocks' ``conv1`` / ``conv2``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# The linear layers adapters can target, in every hf_xcv model (docs/training.md lists them per family).
ADAPTER_MODULE_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2")
_PEFT_REFERENCE = "bart"  # the transformers architecture whose module names hf_xcv's match
_RENAMED = {"out_proj": "o_proj"}


def adapter_targets(reference: list[str], renames: Mapping[str, str] | None = None) -> list[str]:
    """peft's choice for Bart (``reference``) in hf_xcv's names, then in a type's own (``renames``), without
    repeats; names with no hf_xcv counterpart are left out."""
    targets = [_RENAMED.get(module, module) for module in reference]
    targets = [module for module in targets if module in ADAPTER_MODULE_NAMES]
    renamed = [(renames or {}).get(module, module) for module in targets]
    return list(dict.fromkeys(renamed))


def register_peft_defaults(model_types: Mapping[str, Mapping[str, str]] | Iterable[str]) -> bool:
    """Add ``model_types`` (names, or a mapping of each to the renames of its adapter modules) to peft's tables of
    default target modules; False when peft is not installed."""
    try:
        from peft.utils import constants
    except ImportError:
        return False
    renames = dict(model_types) if isinstance(model_types, Mapping) else dict.fromkeys(model_types)
    for name in dir(constants):
        table = getattr(constants, name)
        if not (name.startswith("TRANSFORMERS_MODELS_TO_") and isinstance(table, dict)):
            continue
        reference = table.get(_PEFT_REFERENCE)
        if not isinstance(reference, list):
            continue
        for model_type, own in renames.items():
            targets = adapter_targets(reference, own)
            if targets:
                table.setdefault(model_type, targets)
    return True
