"""peft with hf_xcv's models: default adapter targets for every model type, so that ``LoraConfig()`` without
``target_modules`` works as it does for transformers' own models, and the rule that keeps an adapted model's
non-adapter state where the base model had it, so that a saved adapter reloads to the model that was trained.

peft keeps one table per adapter method (LoRA, IA3, AdaLoRA, ...) from ``model_type`` to module names. hf_xcv's
attention layers use transformers' current names (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``; the MLP's ``fc1``,
``fc2``) in every family, so each table starts from the choice peft made for the analogous architecture (Bart, whose
modules carry the same names; its ``out_proj`` is hf_xcv's ``o_proj``). Two changes make it hf_xcv's own:

* a method that adapts the query and value projections there (LoRA, LoHa, LoKr, OFT, VeRA, ...) adapts every
  projection of the attention here: the attention is where these papers' models differ from their predecessors;
* multi-scale deformable attention (:mod:`hf_xcv.attention.operators.deformable`) has no keys: its query side is
  ``sampling_offsets`` and ``attention_weights``, its value and output projections ``value_proj`` and
  ``output_proj``. They are named wherever the query, value and output projections are: a model without
  deformable attention has none of them, and peft adapts the names a model has.

Only hf_xcv's own ``xcv_*`` keys are added: nothing peft does for other models changes. A model type without
attention projections names the modules that take their part instead (its registry entry's
``adapter_module_names``: TTSR's residual blocks' ``conv1`` / ``conv2``), and gets only those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from torch import nn

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
# The linear layers adapters can target, in every hf_xcv model (docs/training.md lists them per family).
ADAPTER_MODULE_NAMES = (*ATTENTION_PROJECTIONS, "fc1", "fc2")
# Multi-scale deformable attention's projections in the part of the standard ones (no keys: the query alone gives the
# sampling locations and their weights).
DEFORMABLE_PROJECTIONS = {
    "q_proj": ("sampling_offsets", "attention_weights"),
    "v_proj": ("value_proj",),
    "o_proj": ("output_proj",),
}
_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
_PEFT_REFERENCE = "bart"  # the transformers architecture whose module names hf_xcv's match
_RENAMED = {"out_proj": "o_proj"}


def adapter_targets(reference: list[str], renames: Mapping[str, str] | None = None) -> list[str]:
    """hf_xcv's targets for an adapter method whose choice for Bart is ``reference``: Bart's names in hf_xcv's,
    every attention projection where Bart's adapts the query and value ones, the deformable attention's beside the
    standard ones (or, for a type with ``renames``, the type's own modules in their part), without repeats; names
    with no hf_xcv counterpart are left out."""
    targets = [_RENAMED.get(module, module) for module in reference]
    targets = [module for module in targets if module in ADAPTER_MODULE_NAMES]
    if {"q_proj", "v_proj"} <= set(targets) <= set(ATTENTION_PROJECTIONS):
        targets = list(ATTENTION_PROJECTIONS)
    if renames:
        targets = [renames.get(module, module) for module in targets]
    else:
        targets = [name for module in targets for name in (module, *DEFORMABLE_PROJECTIONS.get(module, ()))]
    return list(dict.fromkeys(targets))


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


def hold_frozen_batch_norms(model: nn.Module) -> nn.Module:
    """Put every BatchNorm of ``model`` whose scale and shift are frozen in eval mode (returns ``model``): it then
    normalises with its running statistics and leaves them as they are, as a frozen layer should.

    In train mode BatchNorm updates its running statistics whether or not its parameters train. peft freezes every
    base parameter and saves only the adapter, so statistics updated while the adapter trains would be lost on
    reloading it (and a backbone frozen by ``freeze_backbone`` or ``frozen_backbone_stages`` would still drift).
    A model's ``train()`` calls this after ``nn.Module.train``; a BatchNorm that trains (its parameters trainable,
    or its trainable copy in peft's ``modules_to_save``, which the adapter saves with its statistics) is left alone.
    """
    for module in model.modules():
        if not (isinstance(module, _BATCH_NORMS) and module.affine and module.track_running_stats):
            continue
        parameters = list(module.parameters(recurse=False))  # none where a wrapper holds them flattened (FSDP1)
        if parameters and not any(parameter.requires_grad for parameter in parameters):
            module.eval()
    return model
