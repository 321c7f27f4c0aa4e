"""Command-line converters, one per source checkpoint format (``python -m conversion.<format>``).

The mappings themselves are pure functions in ``hf_xcv.conversion`` so that models can also convert
on load.
"""
