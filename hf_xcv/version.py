"""The version of hf_xcv (what model cards record)."""

__version__ = "0.1.0"
