"""The image processor of DETR-style detectors (DETR's, Deformable DETR's): COCO annotations in, DETR targets out;
resize, normalise, pad; post-processing. A family subclasses :class:`DetectionImageProcessor` under a saved name of
its own and sets how its logits become scores (``class_activation``).

Follows the original DETR (facebookresearch/detr, ``datasets/transforms.py`` and ``coco.py``) where transformers'
``DetrImageProcessor`` departs from it:

- target boxes are normalised ``(cx, cy, w, h)`` relative to the *unpadded* resized image, the frame the model
  predicts in (its position embeddings and attention ignore padding), not to the padded canvas of the batch;
- crowd annotations are kept and flagged with ``iscrowd=1`` (COCO evaluation treats them as ignore regions);
- shortest-edge resizing uses the original's rounding when the longest edge is capped (``resize_rounding``;
  a config saved by transformers loads with transformers' rounding, so its sizes and pixels stay transformers');
- annotations come as COCO's ``{"image_id", "annotations": [...]}`` or as the Hub's detection datasets lay them
  out, ``{"image_id", "objects": {"bbox", "category", ...}}``;
- the original training augmentations (flip, multi-scale resize, random size crop) are built in and move the boxes
  with the pixels;
- a bad box raises a ValueError naming the image and the annotation instead of disappearing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from transformers.image_processing_backends import PilBackend
from transformers.image_processing_utils import BatchFeature
from transformers.image_utils import (
    IMAGENET_DEFAULT_MEAN,
    IMAGENET_DEFAULT_STD,
    PILImageResampling,
    SizeDict,
    get_image_size_for_max_height_width,
)
from transformers.processing_utils import ImagesKwargs

from ..remote_code import RemoteCodeMixin
from ..utils.box_ops import box_cxcywh_to_xyxy
from ..utils.checks import is_integer
from ..utils.errors import UsageError
from ..utils.generators import as_generator
from .input_policy import check_resized_size, read_images, size_setting
from .input_policy import resize as resize_image

DEFAULT_AUGMENT_SCALES = [480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800]
CLASS_ACTIVATIONS = ("softmax", "sigmoid")
# How a shortest-edge resize whose longest edge is capped rounds: the original DETR derives the long side from the
# rounded short side, transformers from the unrounded one (a 100x1000 image at 800/1333: 133x1330 vs 133x1333).
RESIZE_ROUNDINGS = ("original", "transformers")
_SIDES = ("height", "width", "shortest_edge", "longest_edge", "max_height", "max_width")
# A saved config with one of these keys is hf_xcv's own (transformers' DETR processors have none of them).
_OWN_KEYS = ("class_activation", "do_augment", "augment_scales", "resize_rounding")
# The keys of a Hub detection dataset's ``objects`` and the COCO annotation keys they become.
_OBJECT_KEYS = {"bbox": "bbox", "category": "category_id", "categories": "category_id", "area": "area", "id": "id",
                "iscrowd": "iscrowd"}  # fmt: skip
_PER_BOX = ("boxes", "class_labels", "area", "iscrowd")  # one entry per annotation: filtered together
# Keys that saved configs (ours, transformers', old feature extractors) carry and that hold no setting.
_IGNORED_KEYS = ("image_processor_type", "feature_extractor_type", "processor_class", "auto_map")


class DetectionImageProcessorKwargs(ImagesKwargs, total=False):
    """The settings of :class:`DetectionImageProcessor` on top of transformers' image-processor kwargs."""

    do_convert_annotations: bool | None
    num_labels: int | None
    class_activation: str | None
    do_augment: bool | None
    augment_scales: list[int] | None
    augment_max_size: int | None
    augment_crop_scales: list[int] | None
    augment_crop_size: list[int] | None
    augment_flip_prob: float | None
    resize_rounding: str | None


# ----------------------------------------------------------------------------------------------------------------
# Sizes


def size_with_aspect_ratio(
    image_size: tuple[int, int], size: int, max_size: int | None = None, rounding: str = "original"
) -> tuple[int, int]:
    """Output (height, width) with the shorter side ``size``, the longer at most ``max_size``.

    ``rounding="original"`` is the original DETR's ``get_size_with_aspect_ratio``: when the cap binds, it rounds the
    shorter side first and derives the longer side from the rounded value. ``"transformers"`` derives it from the
    unrounded one, as transformers' DETR processors do (a 100x1000 image at 800/1333: 133x1330 vs 133x1333); the two
    differ by at most a pixel of the longer side, and only when the cap binds.
    """
    height, width = image_size
    exact = float(size)  # the shorter side before rounding
    if max_size is not None:
        short, long = float(min(height, width)), float(max(height, width))
        if long / short * size > max_size:
            exact = max_size * short / long
            size = int(round(exact))
    if (width <= height and width == size) or (height <= width and height == size):
        return height, width
    base = size if rounding == "original" else exact
    if width < height:
        return int(base * height / width), size
    return size, int(base * width / height)


def output_size(image_size: tuple[int, int], size: SizeDict, rounding: str = "original") -> tuple[int, int]:
    """The resized (height, width) for one of the size forms DETR accepts; UsageError for any other."""
    if size.shortest_edge:
        return size_with_aspect_ratio(image_size, size.shortest_edge, size.longest_edge, rounding)
    if size.max_height and size.max_width:
        return get_image_size_for_max_height_width(image_size, size.max_height, size.max_width)
    if size.height and size.width:
        return size.height, size.width
    raise UsageError(
        'size must be {"shortest_edge": int} (optionally with "longest_edge"), {"height": int, "width": int} or '
        f'{{"max_height": int, "max_width": int}}; got {dict(size)}'
    )


# ----------------------------------------------------------------------------------------------------------------
# COCO annotations -> targets (boxes kept as absolute xyxy pixels until the end)


def _annotation_list(annotations: Any, image_id: Any, key: str = "annotations") -> list[Mapping]:
    """A list of dicts, or a dict of equally long lists (``datasets``' layout of a sequence of dicts) -> list of
    dicts."""
    if isinstance(annotations, Mapping):
        lengths = {
            name: len(value) if isinstance(value, Sequence | np.ndarray) else None
            for name, value in annotations.items()
        }
        if None in lengths.values() or len(set(lengths.values())) > 1:
            raise UsageError(
                f"image_id {image_id}: '{key}' as a dict must hold lists of one length (one entry per object), got "
                f"lengths {lengths}"
            )
        count = next(iter(lengths.values()), 0)
        return [{name: value[i] for name, value in annotations.items()} for i in range(count)]
    if isinstance(annotations, Sequence) and not isinstance(annotations, str):
        for index, obj in enumerate(annotations):
            if not isinstance(obj, Mapping):
                raise UsageError(f"image_id {image_id}, {key} {index}: expected a dict, got {type(obj).__name__}")
        return list(annotations)
    raise UsageError(
        f"image_id {image_id}: '{key}' must be a list of dicts (or a dict of lists), got {type(annotations).__name__}"
    )


def objects_to_coco(objects: Any, image_id: Any, names: bool = False) -> list[dict[str, Any]]:
    """The ``objects`` of a Hub detection dataset row (``{"bbox": [[x, y, w, h], ...], "category": [...], "area",
    "id"}``, a dict of lists or a list of dicts) as COCO annotation dicts (``category`` -> ``category_id``).

    Categories must be ids (a ``ClassLabel``'s integers); a name is refused with what to do, unless ``names``
    (a loader that maps names to ids itself).
    """
    annotations = []
    for k, obj in enumerate(_annotation_list(objects, image_id, "objects")):
        coco = {_OBJECT_KEYS[key]: value for key, value in obj.items() if key in _OBJECT_KEYS}
        where = f"image_id {image_id}, object {k}"
        if "bbox" not in coco or "category_id" not in coco:
            raise UsageError(
                f"{where} needs a 'bbox' ([x, y, width, height] in pixels) and a 'category'; has {sorted(obj)}"
            )
        if isinstance(coco["category_id"], str) and not names:
            raise UsageError(
                f"{where} has category {coco['category_id']!r}, a name: the processor takes category ids; make the "
                "dataset's objects.category a ClassLabel (its integers index the names)"
            )
        annotations.append(coco)
    return annotations


def coco_annotations(annotation: Any, index: int = 0) -> tuple[int, list[Mapping]]:
    """(image_id, COCO annotation dicts) of one image's annotation, given as COCO's ``{"image_id", "annotations":
    [...]}`` or a Hub dataset row's ``{"image_id", "objects": {...}}``."""
    if not (
        isinstance(annotation, Mapping) and "image_id" in annotation and {"annotations", "objects"} & set(annotation)
    ):
        raise UsageError(
            f"annotation of image {index} must be a dict {{'image_id': int, 'annotations': [...]}} (COCO detection "
            f"format) or {{'image_id': int, 'objects': {{'bbox': [...], 'category': [...]}}}} (a Hub detection "
            f"dataset's row), got {annotation!r:.200}"
        )
    image_id = annotation["image_id"]
    if not is_integer(image_id):
        raise UsageError(f"annotation of image {index}: 'image_id' must be an integer, got {image_id!r}")
    image_id = int(image_id)
    if "annotations" in annotation:
        return image_id, _annotation_list(annotation["annotations"], image_id)
    return image_id, objects_to_coco(annotation["objects"], image_id)


def _clipped_box(obj: Mapping, where: str, image_size: tuple[int, int]) -> np.ndarray:
    """COCO ``[x, y, w, h]`` -> ``[x0, y0, x1, y1]`` clipped to the image; UsageError for a box that is not one."""
    height, width = image_size
    raw = obj.get("bbox")
    try:
        bbox = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        bbox = np.full(0, np.nan)
    if bbox.shape != (4,) or not np.isfinite(bbox).all():
        raise UsageError(f"{where}: 'bbox' must be 4 finite numbers [x, y, width, height] in pixels, got {raw!r}")
    if bbox[2] < 0 or bbox[3] < 0:
        raise UsageError(
            f"{where}: bbox {raw!r} has a negative width or height; COCO boxes are [x, y, width, height] "
            "(not [x0, y0, x1, y1])"
        )
    box = np.concatenate([bbox[:2], bbox[:2] + bbox[2:]])
    box[0::2] = box[0::2].clip(0, width)
    box[1::2] = box[1::2].clip(0, height)
    if box[2] <= box[0] or box[3] <= box[1]:
        raise UsageError(
            f"{where}: bbox {raw!r} is empty inside the {width}x{height} (width x height) image "
            "(zero width or height, or entirely outside it)"
        )
    return box


def _one_annotation(obj: Mapping, where: str, image_size: tuple[int, int]) -> tuple[np.ndarray, int, float, int]:
    """(clipped xyxy box, category id, area, iscrowd) of one annotation, each checked."""
    box = _clipped_box(obj, where, image_size)
    category = obj.get("category_id")
    if not is_integer(category) or category < 0:
        raise UsageError(f"{where}: 'category_id' must be an integer >= 0, got {category!r}")
    iscrowd = obj.get("iscrowd", 0)
    if not is_integer(iscrowd) or int(iscrowd) not in (0, 1):
        raise UsageError(f"{where}: 'iscrowd' must be 0 or 1, got {iscrowd!r}")
    # Without an area (custom data often has none), the box area is what COCO evaluation would compute.
    area = obj.get("area", (box[2] - box[0]) * (box[3] - box[1]))
    try:
        area = float(area)
    except (TypeError, ValueError):
        area = math.nan
    if not math.isfinite(area) or area < 0:
        raise UsageError(f"{where}: 'area' must be a finite number >= 0, got {obj.get('area')!r}")
    return box, int(category), area, int(iscrowd)


def _check_categories(labels: np.ndarray, num_labels: int | None, image_id: int) -> None:
    if num_labels is None:
        return
    bad = sorted({int(c) for c in labels if not 0 <= c < num_labels})
    if bad:
        raise UsageError(
            f"image_id {image_id}: category ids {bad} are outside [0, {num_labels}) (num_labels={num_labels}); "
            "category_id is used as the class index as is: COCO's ids 1..90 need num_labels=91, "
            "or map your ids to 0..num_labels-1"
        )


def coco_target(
    annotation: Any, image_size: tuple[int, int], index: int, num_labels: int | None = None
) -> dict[str, np.ndarray]:
    """One image's detection annotation -> DETR target with absolute, clipped ``xyxy`` boxes.

    Args:
        annotation: ``{"image_id": int, "annotations": [{"bbox", "category_id", "area", "iscrowd", "id"}, ...]}``
            (COCO), or a Hub detection dataset's ``{"image_id": int, "objects": {"bbox", "category", "area",
            "id"}}`` (see :func:`objects_to_coco`).
        image_size: (height, width) of the image the boxes are in.
        index: position of the image in the batch (for error messages).
        num_labels: if given, category ids must lie in ``[0, num_labels)``.
    """
    image_id, objects = coco_annotations(annotation, index)
    rows = []
    for k, obj in enumerate(objects):
        where = f"image_id {image_id}, annotation {k}" + (f" (id {obj['id']})" if "id" in obj else "")
        rows.append(_one_annotation(obj, where, image_size))
    boxes, labels, areas, crowd = zip(*rows) if rows else ((), (), (), ())
    target = {
        "boxes": np.asarray(boxes, dtype=np.float64).reshape(-1, 4),
        "class_labels": np.asarray(labels, dtype=np.int64),
        "area": np.asarray(areas, dtype=np.float64),
        "iscrowd": np.asarray(crowd, dtype=np.int64),
        "image_id": np.asarray([image_id], dtype=np.int64),
        "orig_size": np.asarray(image_size, dtype=np.int64),
    }
    _check_categories(target["class_labels"], num_labels, image_id)
    return target


# ----------------------------------------------------------------------------------------------------------------
# Geometric operations on (image, target) pairs; images are (C, H, W) numpy arrays


def resize_target(target: dict, old_size: tuple[int, int], new_size: tuple[int, int]) -> dict:
    """Scale boxes by the per-axis ratios and areas by their product (as the original and transformers do)."""
    ratio_h, ratio_w = new_size[0] / old_size[0], new_size[1] / old_size[1]
    target = dict(target)
    target["boxes"] = target["boxes"] * np.asarray([ratio_w, ratio_h, ratio_w, ratio_h])
    target["area"] = target["area"] * (ratio_w * ratio_h)
    return target


def hflip(image: np.ndarray, target: dict) -> tuple[np.ndarray, dict]:
    """Mirror left-right: x -> width - x, so a box's x0 and x1 swap roles."""
    width = image.shape[-1]
    target = dict(target)
    boxes = target["boxes"]
    target["boxes"] = np.stack([width - boxes[:, 2], boxes[:, 1], width - boxes[:, 0], boxes[:, 3]], axis=1)
    return np.ascontiguousarray(image[..., ::-1]), target


def crop(image: np.ndarray, target: dict, region: tuple[int, int, int, int]) -> tuple[np.ndarray, dict]:
    """Crop ``region = (top, left, height, width)``; boxes are shifted and clipped to it.

    Boxes left with zero area are removed with their labels, areas and crowd flags, as in the original. The area
    of a box cut by the crop shrinks by the fraction of the box that remains (the original replaces every area
    by the clipped box's area, which would turn a segment area into a box area even for uncut boxes).
    """
    top, left, height, width = region
    boxes = target["boxes"] - np.asarray([left, top, left, top])
    clipped = boxes.clip(0, np.asarray([width, height, width, height]))
    keep = (clipped[:, 2] > clipped[:, 0]) & (clipped[:, 3] > clipped[:, 1])
    before = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    after = (clipped[:, 2] - clipped[:, 0]) * (clipped[:, 3] - clipped[:, 1])
    target = dict(target)
    target["boxes"] = clipped
    target["area"] = target["area"] * np.divide(after, before, out=np.zeros_like(after), where=before > 0)
    for key in _PER_BOX:
        target[key] = target[key][keep]
    return np.ascontiguousarray(image[:, top : top + height, left : left + width]), target


def random_size_crop_region(
    image_size: tuple[int, int], min_size: int, max_size: int, rng: np.random.Generator
) -> tuple[int, int, int, int]:
    """The original's ``RandomSizeCrop``: crop sides drawn from [min_size, min(side, max_size)], placed uniformly.

    A side shorter than ``min_size`` is kept whole (the original would fail on such small images).
    """
    height, width = image_size
    crop_w = int(rng.integers(min(min_size, width, max_size), min(width, max_size), endpoint=True))
    crop_h = int(rng.integers(min(min_size, height, max_size), min(height, max_size), endpoint=True))
    top = int(rng.integers(0, height - crop_h, endpoint=True))
    left = int(rng.integers(0, width - crop_w, endpoint=True))
    return top, left, crop_h, crop_w


# ----------------------------------------------------------------------------------------------------------------
# Settings checks


def _check_positive_ints(name: str, values: Any, count: int | None = None) -> None:
    ok = isinstance(values, (list, tuple)) and len(values) > 0 and all(is_integer(v) and v > 0 for v in values)
    if not ok or (count is not None and len(values) != count):
        length = f"{count} " if count is not None else "a non-empty list of "
        raise UsageError(f"{name} must be {length}positive integers, got {values!r}")


def check_settings(settings: Mapping[str, Any]) -> None:
    """ValueError naming the setting for any value outside what it allows."""
    activation = settings.get("class_activation")
    if activation not in CLASS_ACTIVATIONS:
        raise UsageError(f"class_activation must be one of {CLASS_ACTIVATIONS}, got {activation!r}")
    num_labels = settings.get("num_labels")
    if num_labels is not None and not (is_integer(num_labels) and num_labels > 0):
        raise UsageError(f"num_labels must be a positive integer or None, got {num_labels!r}")
    _check_positive_ints("augment_scales", settings.get("augment_scales"))
    _check_positive_ints("augment_crop_scales", settings.get("augment_crop_scales"))
    crop_size = settings.get("augment_crop_size")
    _check_positive_ints("augment_crop_size", crop_size, count=2)
    if crop_size[0] > crop_size[1]:
        raise UsageError(f"augment_crop_size must be [min, max] with min <= max, got {crop_size!r}")
    max_size = settings.get("augment_max_size")
    if not (is_integer(max_size) and max_size > 0):
        raise UsageError(f"augment_max_size must be a positive integer, got {max_size!r}")
    prob = settings.get("augment_flip_prob")
    if not isinstance(prob, (int, float)) or isinstance(prob, bool) or not 0 <= prob <= 1:
        raise UsageError(f"augment_flip_prob must be a number in [0, 1], got {prob!r}")
    for name in ("size", "pad_size"):
        sides = settings.get(name)
        sides = sides if isinstance(sides, Mapping) else vars(sides) if sides is not None else {}
        for side, value in sides.items():
            if side in _SIDES and value is not None and not (is_integer(value) and value > 0):
                raise UsageError(f"{name}[{side!r}] must be a positive integer (pixels), got {value!r}")
    if settings.get("resize_rounding") not in RESIZE_ROUNDINGS:
        raise UsageError(f"resize_rounding must be one of {RESIZE_ROUNDINGS}, got {settings.get('resize_rounding')!r}")


def _check_format(value: Any) -> None:
    value = getattr(value, "value", value)
    if value != "coco_detection":
        raise UsageError(f"only format='coco_detection' annotations are supported, got {value!r}")


def _saved_rounding(kwargs: dict[str, Any]) -> str | None:
    """The ``resize_rounding`` of a saved config that does not name one: transformers' for a config written by
    transformers (its DETR processors, old feature extractors, or one converted from them, which keeps their keys
    under hf_xcv's type name), the original's for hf_xcv's own configs saved before the setting existed. None when
    ``kwargs`` are no saved config (a new processor: the class default)."""
    if "resize_rounding" in kwargs or not {"image_processor_type", "feature_extractor_type"} & set(kwargs):
        return None
    return "original" if any(key in kwargs for key in _OWN_KEYS) else "transformers"


def _legacy_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Translate the keys of older DETR configs (``size`` int + ``max_size``, ``pad_and_return_pixel_mask``) and
    give a saved config without ``resize_rounding`` the rounding it was made with (:func:`_saved_rounding`)."""
    rounding = _saved_rounding(kwargs)
    kwargs = {key: value for key, value in kwargs.items() if key not in _IGNORED_KEYS}
    if rounding is not None:
        kwargs["resize_rounding"] = rounding
    _check_format(kwargs.pop("format", "coco_detection"))
    if "pad_and_return_pixel_mask" in kwargs:
        kwargs.setdefault("do_pad", kwargs.pop("pad_and_return_pixel_mask"))
    max_size = kwargs.pop("max_size", None)
    if is_integer(kwargs.get("size")):
        kwargs["size"] = {"shortest_edge": int(kwargs["size"]), "longest_edge": max_size or 1333}
    return kwargs


# ----------------------------------------------------------------------------------------------------------------
# Post-processing helpers


def _field(outputs: Any, name: str) -> torch.Tensor:
    value = outputs.get(name) if isinstance(outputs, Mapping) else getattr(outputs, name, None)
    if not isinstance(value, torch.Tensor):
        raise UsageError(f"outputs must have a tensor '{name}', got {type(value).__name__}")
    return value


def _softmax_detections(logits: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """DETR: one detection per query, the best class after dropping the last (no-object) one."""
    scores, labels = logits.float().softmax(-1)[..., :-1].max(-1)  # (B, Q) each
    return scores, labels, boxes


def _sigmoid_detections(logits: torch.Tensor, boxes: torch.Tensor, top_k: int) -> tuple[torch.Tensor, ...]:
    """Deformable DETR: the ``top_k`` best (query, class) pairs; a query may give several detections."""
    batch, queries, classes = logits.shape
    flat = logits.float().sigmoid().reshape(batch, queries * classes)  # (B, Q*K), index = query * K + class
    scores, index = flat.topk(min(top_k, queries * classes), dim=1)  # (B, k)
    query = torch.div(index, classes, rounding_mode="floor")
    boxes = boxes.gather(1, query.unsqueeze(-1).expand(-1, -1, 4))  # (B, k, 4)
    return scores, index % classes, boxes


def _scale_factors(target_sizes: Any, batch: int) -> torch.Tensor:
    """(B, 2) sizes (height, width) -> (B, 1, 4) factors (w, h, w, h)."""
    sizes = torch.as_tensor(
        target_sizes.tolist() if isinstance(target_sizes, torch.Tensor) else target_sizes, dtype=torch.float32
    )
    if sizes.shape != (batch, 2):
        raise UsageError(
            f"target_sizes must give (height, width) for each of the {batch} images, got shape {tuple(sizes.shape)}"
        )
    height, width = sizes.unbind(1)
    return torch.stack([width, height, width, height], dim=1)[:, None, :]


# ----------------------------------------------------------------------------------------------------------------


class DetectionImageProcessor(RemoteCodeMixin, PilBackend):
    """The DETR-style detectors' image processor on transformers' PIL backend (no torchvision). Families subclass it
    (:class:`hf_xcv.XcvDetrImageProcessor`, :class:`hf_xcv.XcvDeformableDetrImageProcessor`): a subclass is saved
    as its own ``image_processor_type``, which transformers resolves by class name, so none may be one of
    transformers' own names (that would change what its ``detr`` repos load after ``import hf_xcv``).

    Args (all optional; every one can also be passed per call):
        do_resize / size: ``{"shortest_edge": 800, "longest_edge": 1333}`` (default), ``{"height", "width"}``
            (exact) or ``{"max_height", "max_width"}`` (fit inside, keep the aspect ratio).
        resize_rounding: how a shortest-edge resize rounds when the longest edge caps it: ``"original"`` (the
            default, the original DETR's: the long side from the rounded short side) or ``"transformers"``
            (transformers' DETR processors': from the unrounded one; at most one pixel more). Saved with the
            processor; a saved config without it loads as what wrote it: transformers' (its own DETR and
            Deformable DETR processors, and the configs hf_xcv converts from them) with ``"transformers"``, so
            sizes and pixels equal transformers'; hf_xcv's older ones with ``"original"``.
        resample: PIL filter, bilinear.
        do_rescale / rescale_factor: multiply by 1/255.
        do_normalize / image_mean / image_std: ImageNet mean and std.
        do_pad / pad_size: pad bottom/right with zeros to the largest image of the batch, or to
            ``pad_size = {"height", "width"}``; returns ``pixel_mask`` (1 = image, 0 = padding).
        do_convert_annotations: boxes as normalised ``(cx, cy, w, h)`` relative to the unpadded resized image
            (True) or absolute ``(x0, y0, x1, y1)`` pixels of the resized image (False).
        do_convert_rgb: grayscale -> 3 channels, alpha composited on white, other modes to RGB.
        num_labels: if set, category ids outside ``[0, num_labels)`` raise a ValueError.
        class_activation: ``"softmax"`` (DETR: last class is no-object) or ``"sigmoid"`` (Deformable DETR), for
            :meth:`post_process_object_detection`.
        do_augment: apply the original DETR training augmentations (keep False in a saved processor, pass
            ``do_augment=True`` per call in training). The augmentation's last resize replaces ``size``.
        augment_scales / augment_max_size: shorter-side sizes of the final random resize and its cap on the longer
            side (480..800 step 32 and 1333, as the original).
        augment_crop_scales: shorter-side sizes of the resize before the random crop (400, 500, 600).
        augment_crop_size: ``[min, max]`` side of the random crop (384, 600).
        augment_flip_prob: probability of a horizontal flip (0.5).

    For small images scale the augmentation settings together, e.g. at ~64-128 px:
    ``augment_scales=[64, 72, 80, 88, 96], augment_max_size=160, augment_crop_scales=[64, 80, 96],
    augment_crop_size=[48, 96]``.
    """

    valid_kwargs = DetectionImageProcessorKwargs
    model_input_names = ["pixel_values", "pixel_mask"]
    resample = PILImageResampling.BILINEAR
    image_mean = IMAGENET_DEFAULT_MEAN
    image_std = IMAGENET_DEFAULT_STD
    size = {"shortest_edge": 800, "longest_edge": 1333}
    default_to_square = False
    do_resize = True
    do_rescale = True
    do_normalize = True
    do_pad = True
    do_convert_annotations = True
    do_convert_rgb = True
    num_labels = None
    class_activation = "softmax"
    do_augment = False
    augment_scales = DEFAULT_AUGMENT_SCALES
    augment_max_size = 1333
    augment_crop_scales = [400, 500, 600]
    augment_crop_size = [384, 600]
    augment_flip_prob = 0.5
    resize_rounding = "original"

    def __init__(self, **kwargs: Any) -> None:
        kwargs = _legacy_kwargs(kwargs)
        unknown = sorted(set(kwargs) - set(self.valid_kwargs.__annotations__))
        if unknown:
            raise UsageError(f"unknown setting(s) {unknown}; accepted: {sorted(self.valid_kwargs.__annotations__)}")
        super().__init__(**kwargs)
        for key in ("augment_scales", "augment_crop_scales", "augment_crop_size"):
            setattr(self, key, list(getattr(self, key)))  # lists, so that a saved and reloaded processor is equal
        check_settings(self.__dict__)

    # ------------------------------------------------------------------------------------------------------------
    # preprocessing

    def preprocess(
        self,
        images: Any,
        annotations: Mapping | Sequence[Mapping] | None = None,
        return_tensors: str | None = None,
        generator: np.random.Generator | int | None = None,
        **kwargs: Any,
    ) -> BatchFeature:
        """Images (+ COCO detection annotations) -> ``pixel_values``, ``pixel_mask`` (+ ``labels``).

        Args:
            images: a PIL image, numpy array or torch tensor, or a batch of them, read as
                :mod:`hf_xcv.processing.input_policy` says (floats in [0, 1] are never rescaled twice; 16-bit
                images are scaled to 8 bits' range).
            annotations: one dict per image, a single dict for a single image: COCO's ``{"image_id",
                "annotations": [{"bbox", "category_id", ...}]}`` or a Hub detection dataset row's ``{"image_id",
                "objects": {"bbox": [...], "category": [...], ...}}`` (boxes ``[x, y, width, height]`` in pixels,
                categories as ids).
            return_tensors: ``"pt"`` for torch tensors (labels included), ``"np"`` or None for numpy arrays.
            generator: randomness of the augmentations: a ``numpy.random.Generator`` or an int seed (None: fresh
                entropy). One generator serves the whole batch, image after image.
            **kwargs: any constructor setting, for this call only; ``format`` must be ``"coco_detection"``.

        Returns:
            ``pixel_values`` (B, 3, H, W) float32, ``pixel_mask`` (B, H, W) int64 when padding, and with annotations
            ``labels``: one dict per image with ``class_labels`` (T,) int64, ``boxes`` (T, 4) float32, ``iscrowd``
            (T,) int64 (crowd boxes are kept), ``area`` (T,) float32, ``image_id`` (1,), ``orig_size`` and ``size``
            (height, width) int64, ``size`` being the resized image before padding. Augmentation removes boxes
            that a crop leaves empty, with their labels, areas and crowd flags; the image is always kept.
        """
        settings = self._call_settings(kwargs)
        arrays = read_images(
            images,
            to_rgb=bool(settings["do_convert_rgb"]),
            data_format=settings["input_data_format"],
            rescale=bool(settings["do_rescale"]),
        )
        annotations = self._annotations_per_image(annotations, len(arrays))
        rng = as_generator(generator, "numpy") if settings["do_augment"] else None
        pixels, targets = [], []
        for index, image in enumerate(arrays):
            annotation = None if annotations is None else annotations[index]
            image, target = self._process_one(image, annotation, index, settings, rng)
            pixels.append(image)
            targets.append(target)
        return self._batch(pixels, targets if annotations is not None else None, settings, return_tensors)

    def _call_settings(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The instance's settings overridden by this call's, checked and standardised (size -> SizeDict)."""
        if "format" in kwargs:
            _check_format(kwargs.pop("format"))
        unknown = sorted(set(kwargs) - set(self.valid_kwargs.__annotations__))
        if unknown:
            raise UsageError(f"unknown argument(s) {unknown}; accepted: {sorted(self.valid_kwargs.__annotations__)}")
        settings = {name: getattr(self, name, None) for name in self.valid_kwargs.__annotations__}
        settings.update({key: value for key, value in kwargs.items() if value is not None})
        settings = self._standardize_kwargs(**settings)
        check_settings(settings)
        return settings

    @staticmethod
    def _annotations_per_image(annotations: Any, num_images: int) -> list | None:
        if annotations is None:
            return None
        if isinstance(annotations, Mapping):
            annotations = [annotations]
        if not isinstance(annotations, Sequence) or isinstance(annotations, str):
            raise UsageError(f"annotations must be a dict or a list of dicts, got {type(annotations).__name__}")
        if len(annotations) != num_images:
            raise UsageError(
                f"got {num_images} image(s) but {len(annotations)} annotation(s): give one annotation dict per image"
            )
        return list(annotations)

    def _process_one(
        self,
        image: np.ndarray,
        annotation: Mapping | None,
        index: int,
        settings: dict[str, Any],
        rng: np.random.Generator | None,
    ) -> tuple[np.ndarray, dict]:
        """One (C, H, W) image and its annotation -> processed image and target (absolute xyxy boxes)."""
        image_size = image.shape[-2:]
        if annotation is None:
            target = coco_target({"image_id": -1, "annotations": []}, image_size, index)
        else:
            target = coco_target(annotation, image_size, index, settings["num_labels"])
        if settings["do_augment"]:
            image, target = self._augment(image, target, rng, settings, index)
        elif settings["do_resize"]:
            new_size = output_size(image_size, settings["size"], settings["resize_rounding"])
            check_resized_size(image_size, new_size, size_setting(settings["size"]), f"image {index}")
            image, target = self._resize_pair(image, target, new_size, settings["resample"])
        if settings["do_rescale"]:
            image = self.rescale(image, settings["rescale_factor"])
        if settings["do_normalize"]:
            image = self.normalize(image, settings["image_mean"], settings["image_std"])
        target["size"] = np.asarray(image.shape[-2:], dtype=np.int64)
        if settings["do_convert_annotations"]:
            target["boxes"] = _normalized_cxcywh(target["boxes"], image.shape[-2:])
        return image.astype(np.float32, copy=False), target

    def _resize_pair(
        self, image: np.ndarray, target: dict, new_size: tuple[int, int], resample: Any
    ) -> tuple[np.ndarray, dict]:
        old_size = image.shape[-2:]
        image = resize_image(image, new_size, resample)  # transformers' pixels for uint8, float images unquantized
        return image, resize_target(target, old_size, new_size)

    def _random_resize(
        self,
        image: np.ndarray,
        target: dict,
        rng: np.random.Generator,
        scales: list[int],
        max_size: int | None,
        resample: Any,
        rounding: str = "original",
        what: str = "",
    ) -> tuple[np.ndarray, dict]:
        scale = int(scales[int(rng.integers(len(scales)))])
        new_size = size_with_aspect_ratio(image.shape[-2:], scale, max_size, rounding)
        cap = f" and longest edge {max_size}" if max_size is not None else ""
        setting = f"the augmentation's shortest edge {scale}{cap}"
        check_resized_size(image.shape[-2:], new_size, setting, what or "an image")
        return self._resize_pair(image, target, new_size, resample)

    def _augment(
        self, image: np.ndarray, target: dict, rng: np.random.Generator, s: dict, index: int = 0
    ) -> tuple[np.ndarray, dict]:
        """The original DETR training transform: flip, then either a multi-scale resize, or a resize, a random
        size crop and a multi-scale resize (each with probability 0.5)."""
        if rng.random() < s["augment_flip_prob"]:
            image, target = hflip(image, target)
        scales, max_size, resample, rounding = (
            s["augment_scales"],
            s["augment_max_size"],
            s["resample"],
            s["resize_rounding"],
        )
        what = f"image {index}"
        if rng.random() < 0.5:
            return self._random_resize(image, target, rng, scales, max_size, resample, rounding, what)
        image, target = self._random_resize(
            image, target, rng, s["augment_crop_scales"], None, resample, rounding, what
        )
        low, high = s["augment_crop_size"]
        image, target = crop(image, target, random_size_crop_region(image.shape[-2:], low, high, rng))
        return self._random_resize(image, target, rng, scales, max_size, resample, rounding, what)

    def _batch(
        self, pixels: list[np.ndarray], targets: list[dict] | None, settings: dict, return_tensors: str | None
    ) -> BatchFeature:
        data: dict[str, Any] = {}
        if settings["do_pad"]:
            pixels, data["pixel_mask"] = _pad(pixels, settings["pad_size"])
        elif return_tensors is not None and len({image.shape for image in pixels}) > 1:
            raise UsageError(
                f"images of different sizes {sorted({image.shape[-2:] for image in pixels})} cannot be stacked "
                "into one tensor without padding: pass do_pad=True (or return_tensors=None)"
            )
        data["pixel_values"] = pixels
        batch = BatchFeature(data=data, tensor_type=return_tensors)
        if targets is not None:
            batch["labels"] = [_finish_target(target, return_tensors) for target in targets]
        return batch

    # ------------------------------------------------------------------------------------------------------------
    # post-processing

    def post_process_object_detection(
        self,
        outputs: Any,
        threshold: float = 0.5,
        target_sizes: torch.Tensor | Sequence[tuple[int, int]] | None = None,
        top_k: int = 100,
    ) -> list[dict[str, torch.Tensor]]:
        """Model outputs -> per image ``{"scores", "labels", "boxes"}`` with ``scores > threshold``.

        Args:
            outputs: has ``logits`` (B, Q, K) and ``pred_boxes`` (B, Q, 4), normalised ``(cx, cy, w, h)`` relative
                to the unpadded image.
            threshold: keep detections scoring above it (0 keeps everything, as COCO mAP needs).
            target_sizes: (B, 2) tensor or list of (height, width) of the *original* images; boxes come out in
                their pixels. None keeps them normalised.
            top_k: with ``class_activation="sigmoid"``, the number of (query, class) pairs kept before the
                threshold. With ``"softmax"`` every query gives one detection (as DETR).

        Returns:
            One dict per image: ``scores`` (N,), ``labels`` (N,) int64, ``boxes`` (N, 4) ``(x0, y0, x1, y1)``.
        """
        logits, boxes = _field(outputs, "logits"), _field(outputs, "pred_boxes")
        if logits.ndim != 3 or boxes.shape != (*logits.shape[:2], 4):
            raise UsageError(
                f"expected logits (B, Q, K) and pred_boxes (B, Q, 4), got {tuple(logits.shape)} and "
                f"{tuple(boxes.shape)}"
            )
        if self.class_activation == "softmax":
            scores, labels, boxes = _softmax_detections(logits, boxes)
        else:
            scores, labels, boxes = _sigmoid_detections(logits, boxes, top_k)
        boxes = box_cxcywh_to_xyxy(boxes.float())
        if target_sizes is not None:
            boxes = boxes * _scale_factors(target_sizes, len(logits)).to(boxes.device)
        return [
            {"scores": s[s > threshold], "labels": lab[s > threshold], "boxes": b[s > threshold]}
            for s, lab, b in zip(scores, labels, boxes)
        ]


def _normalized_cxcywh(boxes: np.ndarray, image_size: tuple[int, int]) -> np.ndarray:
    height, width = image_size
    x0, y0, x1, y1 = boxes.T
    return np.stack([(x0 + x1) / 2 / width, (y0 + y1) / 2 / height, (x1 - x0) / width, (y1 - y0) / height], axis=1)


def _pad(images: list[np.ndarray], pad_size: SizeDict | None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Zero-pad (C, H, W) images at the bottom/right to ``pad_size`` or the largest; masks 1 = image."""
    if pad_size is not None:
        if not (pad_size.height and pad_size.width):
            raise UsageError(f'pad_size must be {{"height": int, "width": int}}, got {dict(pad_size)}')
        height, width = pad_size.height, pad_size.width
    else:
        height, width = max(image.shape[-2] for image in images), max(image.shape[-1] for image in images)
    padded, masks = [], []
    for index, image in enumerate(images):
        h, w = image.shape[-2:]
        if h > height or w > width:
            raise UsageError(
                f"image {index} is {h}x{w} (height x width) after resizing, larger than pad_size {height}x{width}"
            )
        padded.append(np.pad(image, ((0, 0), (0, height - h), (0, width - w))))
        mask = np.zeros((height, width), dtype=np.int64)
        mask[:h, :w] = 1
        masks.append(mask)
    return padded, masks


def _finish_target(target: dict, return_tensors: str | None) -> dict[str, Any]:
    out = {
        "class_labels": target["class_labels"].astype(np.int64),
        "boxes": target["boxes"].astype(np.float32).reshape(-1, 4),
        "iscrowd": target["iscrowd"].astype(np.int64),
        "area": target["area"].astype(np.float32),
        "image_id": target["image_id"],
        "orig_size": target["orig_size"],
        "size": target["size"],
    }
    if return_tensors == "pt":
        return {key: torch.from_numpy(np.ascontiguousarray(value)) for key, value in out.items()}
    return out
