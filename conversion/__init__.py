"""Command-line converters of a checkout, one per source checkpoint format (``python -m conversion.<format>``): thin
entry points of ``hf_xcv.cli.convert_<format>`` (installed as ``hf-xcv-convert <format>``). The mappings themselves
are pure functions in ``hf_xcv.conversion``, so that models also convert on load."""
