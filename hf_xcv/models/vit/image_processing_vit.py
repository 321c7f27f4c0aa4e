"""ViT image processor: resize, optional center crop, rescale, normalize (transformers' ViT defaults). Pure
PIL/numpy, no torchvision."""

from __future__ import annotations

from ...processing.classification import ClassificationImageProcessor


class XcvViTImageProcessor(ClassificationImageProcessor):
    """Takes the constructor arguments of transformers' ``ViTImageProcessor``, with its defaults (224x224 bilinear
    resize, mean and std 0.5); the pipeline and the inputs it accepts are
    :class:`hf_xcv.processing.classification.ClassificationImageProcessor`'s.

    Saved as ``"image_processor_type": "XcvViTImageProcessor"``: transformers resolves that field by class
    name, so a name it has itself would make its own ViT repos load this class after ``import hf_xcv``.
    Folders saved under the old name (``ViTImageProcessor``) load with this class's ``from_pretrained``, and
    through ``AutoImageProcessor`` as transformers' ViT processor (the same arguments and pixels).
    """


ViTImageProcessor = XcvViTImageProcessor  # the name of earlier versions (its class saves the new type name)
