"""The image processor of Deformable DETR: the DETR-style detectors' (same resizing, padding, annotations and
augmentations as DETR's), with sigmoid scores and the top-k (query, class) pairs in post-processing."""

from __future__ import annotations

from ...processing.detection import DetectionImageProcessor


class XcvDeformableDetrImageProcessor(DetectionImageProcessor):
    """:class:`hf_xcv.processing.detection.DetectionImageProcessor` with ``class_activation="sigmoid"``:
    ``post_process_object_detection`` keeps the ``top_k`` (100) best (query, class) pairs of the sigmoid scores, as
    the original's PostProcess. Saved as ``XcvDeformableDetrImageProcessor`` (not transformers'
    ``DeformableDetrImageProcessor`` name)."""

    class_activation = "sigmoid"
