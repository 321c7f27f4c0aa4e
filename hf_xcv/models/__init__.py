"""hf_xcv's model families, one package each. A family declares its own registry entry when it is imported
(:func:`hf_xcv.registry.register_model_type`); :mod:`hf_xcv.auto` imports every package of this folder, in the order
of their names, so a new family's folder is all it takes. Families never import one another: what two share lives in
the shared modules below them (``hf_xcv.layers``, ``hf_xcv.processing``, ``hf_xcv.losses``,
``hf_xcv.configuration_detection``, ``hf_xcv.modeling_detection``, ...).
"""

import pkgutil

FAMILIES = tuple(sorted(module.name for module in pkgutil.iter_modules(__path__) if module.ispkg))
