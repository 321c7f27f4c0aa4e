"""Moved to :mod:`hf_xcv.attention.operators.deformable`.

This old path still imports (with a FutureWarning), and will be removed."""

from ..utils.deprecation import moved_module

__getattr__ = moved_module(__name__, "hf_xcv.attention.operators.deformable")
