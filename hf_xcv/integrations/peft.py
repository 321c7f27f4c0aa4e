"""peft's default adapter targets for hf_xcv's model types, so that ``LoraConfig()`` without
``target_modules`` works as it does for transformers' own models.

peft keeps one table per adapter method (LoRA, IA3, AdaLoRA, ...) from ``model_type`` to module names.
hf_xcv's models use transformers' current names (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, ``fc1``,
``fc2``) in every family, so each table gets, for every hf_xcv type, the choice peft made for the analogous
architecture (Bart, whose modules carry the same names; its ``out_proj`` is hf_xcv's ``o_proj``). Only
hf_xcv's own ``xcv_*`` keys are added: nothing peft does for other models changes.
"""

from __future__ import annotations

# The linear layers adapters can target, in every hf_xcv model (the README lists them per family).
ADAPTER_MODULE_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2")
_PEFT_REFERENCE = "bart"  # the transformers architecture whose module names hf_xcv's match
_RENAMED = {"out_proj": "o_proj"}


def register_peft_defaults(model_types: list[str]) -> bool:
    """Add ``model_types`` to peft's tables of default target modules; False when peft is not installed."""
    try:
        from peft.utils import constants
    except ImportError:
        return False
    for name in dir(constants):
        table = getattr(constants, name)
        if not (name.startswith("TRANSFORMERS_MODELS_TO_") and isinstance(table, dict)):
            continue
        reference = table.get(_PEFT_REFERENCE)
        if not isinstance(reference, list):
            continue
        targets = [_RENAMED.get(module, module) for module in reference]
        targets = [module for module in targets if module in ADAPTER_MODULE_NAMES]
        if targets:
            for model_type in model_types:
                table.setdefault(model_type, targets)
    return True
