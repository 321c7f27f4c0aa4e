"""hf_xcv's model families, one package each. A family declares its own registry entry when it is imported
(:func:`hf_xcv.registry.register_model_type`); :mod:`hf_xcv.auto` imports the families named here, in this order.
Families never import one another: what two share lives in the shared modules below them (``hf_xcv.layers``,
``hf_xcv.processing``, ``hf_xcv.losses``, ``hf_xcv.configuration_detection``, ``hf_xcv.modeling_detection``, ...).
"""

FAMILIES = ("vit", "swin", "detr", "deformable_detr", "ttsr", "ipt", "transformer", "xformer")
