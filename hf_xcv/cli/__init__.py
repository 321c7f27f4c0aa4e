"""The command-line programs of hf_xcv, installed with the package: ``hf-xcv-train <task>`` (also
``python -m hf_xcv.train``) and ``hf-xcv-convert <format>`` (``python -m hf_xcv.convert``). A checkout's
``training/`` and ``conversion/`` folders run the same programs."""
