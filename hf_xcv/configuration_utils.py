"""Config base class and the validators only configs use (the general ones are :mod:`hf_xcv.utils.checks`).

Configs validate themselves on construction and again before saving; every failure is a
``ValueError`` that names the field and what it allows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from transformers import PretrainedConfig
from transformers.activations import ACT2FN

from .attention import (
    available_attention_types,
    build_attention,
    capability_problems,
    check_capabilities,
    validate_attention_kwargs,
)
from .registry import MODEL_TYPES
from .remote_code import RemoteCodeMixin, custom_pipelines
from .utils.checks import check_choice
from .utils.errors import UsageError

# Keyword arguments every config takes besides its dataclass fields.
_CONFIG_KWARGS = frozenset({"num_labels", "attn_implementation", "output_attentions"})


def check_known_fields(config_class: type, overrides: Mapping[str, Any]) -> None:
    """Reject keys that are not fields of ``config_class`` (a typo would otherwise be a silent no-op)."""
    known = {field.name for field in dataclasses.fields(config_class)} | _CONFIG_KWARGS
    known |= set(config_class.attribute_map)  # aliases (DETR's attention_type for encoder_attention_type)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise UsageError(f"{config_class.__name__} has no field {unknown}; its fields: {sorted(known)}")


def check_activation(name: str, value: Any) -> None:
    if value not in ACT2FN:
        raise UsageError(f"{name}={value!r} is not a known activation; allowed values: {sorted(ACT2FN)}")


def check_attention(
    attention_type: Any, attention_kwargs: Any, attention_dropout: float = 0.0, num_heads: int = 1, hidden_size: int = 8
) -> None:
    """``attention_type`` must be registered, ``attention_kwargs`` must be keys it accepts with values of the
    right type and range (the entry is built once on the meta device, with ``num_heads`` heads splitting
    ``hidden_size``, which runs its own checks of every setting), and a non-zero ``attention_dropout`` needs
    a core with attention probabilities."""
    check_choice("attention_type", attention_type, available_attention_types())
    if attention_kwargs is not None and not isinstance(attention_kwargs, dict):
        raise UsageError(f"attention_kwargs must be a dict, got {type(attention_kwargs).__name__}")
    validate_attention_kwargs(attention_type, attention_kwargs)
    with torch.device("meta"):
        heads = max(num_heads, 1)
        build_attention(attention_type, heads, max(hidden_size // heads, 1), **(attention_kwargs or {}))
    if attention_dropout:
        check_capabilities(attention_type, attention_dropout=attention_dropout)


def check_attention_serves(attention_type: str, requests: Mapping[str, Any], role: str) -> None:
    """One ValueError naming every request of a model (``requests``: keywords of
    :func:`hf_xcv.attention.capability_problems`) that ``attention_type`` cannot serve; ``role`` names the model
    in the message ("a ViT encoder")."""
    problems = capability_problems(attention_type, **requests)
    if problems:
        raise UsageError(f"attention_type={attention_type!r} cannot serve {role}: " + "; ".join(problems))


class XcvConfig(RemoteCodeMixin, PretrainedConfig):
    """Base of every hf_xcv config: runs :meth:`check` after construction and before saving, names the family's
    custom pipelines in ``custom_pipelines`` and saves the remote code of its type (:mod:`hf_xcv.remote_code`)."""

    def __post_init__(self, **kwargs: Any) -> None:
        kwargs.pop("auto_map", None)  # a saved folder's, not a setting: every save writes the registry's
        super().__post_init__(**kwargs)
        entry = MODEL_TYPES.get(self.model_type)
        if entry is not None and entry.pipelines:  # the registry's entries over loaded ones (older saves' included)
            self.custom_pipelines = {**(getattr(self, "custom_pipelines", None) or {}), **custom_pipelines(entry)}
        self.check()

    def check(self) -> None:
        """Raise ValueError naming the first invalid field. Subclasses extend this."""

    def validate(self) -> None:  # called by save_pretrained
        super().validate()
        self.check()
