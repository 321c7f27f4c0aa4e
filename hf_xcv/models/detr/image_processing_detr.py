"""DETR's image processor: the DETR-style detectors' (:mod:`hf_xcv.processing.detection`) with DETR's scores."""

from __future__ import annotations

from ...processing.detection import DetectionImageProcessor


class XcvDetrImageProcessor(DetectionImageProcessor):
    """:class:`hf_xcv.processing.detection.DetectionImageProcessor` with ``class_activation="softmax"``:
    ``post_process_object_detection`` scores each query by a softmax over the classes and "no object" (the last
    logit), one detection per query, as the original's PostProcess.

    Saved as ``"image_processor_type": "XcvDetrImageProcessor"``: transformers resolves that field by class name,
    so one of its own names would change what its ``detr`` repos load after ``import hf_xcv``.
    """

    class_activation = "softmax"


DetrImageProcessor = XcvDetrImageProcessor  # the short name; the class saves "XcvDetrImageProcessor"
