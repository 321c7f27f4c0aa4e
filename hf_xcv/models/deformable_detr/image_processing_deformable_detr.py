"""The image processor of Deformable DETR: DETR's (same resizing, padding, annotations and augmentations), with
sigmoid scores and the top-k (query, class) pairs in post-processing."""

from __future__ import annotations

from ..detr.image_processing_detr import XcvDetrImageProcessor


class XcvDeformableDetrImageProcessor(XcvDetrImageProcessor):
    """:class:`XcvDetrImageProcessor` with ``class_activation="sigmoid"``: ``post_process_object_detection``
    keeps the ``top_k`` (100) best (query, class) pairs of the sigmoid scores, as the original's PostProcess.
    Saved as ``XcvDeformableDetrImageProcessor`` (not transformers' ``DeformableDetrImageProcessor`` name)."""

    class_activation = "sigmoid"
