"""Registrations with other libraries of the Hugging Face stack, done when they are installed (none is a
dependency)."""

from .peft import ADAPTER_MODULE_NAMES, adapter_targets, register_peft_defaults

__all__ = ["ADAPTER_MODULE_NAMES", "adapter_targets", "register_peft_defaults"]
