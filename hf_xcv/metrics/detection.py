"""COCO box mAP as an ``evaluate.Metric`` over pycocotools' ``COCOeval``, needing no Hub.

The numbers are COCOeval's own (``evaluate()``, ``accumulate()``, ``summarize()``), not a re-implementation: the
inputs are turned into a COCO ground-truth dataset and a COCO result list, and the twelve summary statistics are
returned under torchmetrics' names. Inputs follow torchmetrics and transformers' object-detection examples, one dict
per image, as lists, numpy arrays or torch tensors (what ``post_process_object_detection`` returns)::

    predictions = [{"boxes": (N, 4), "scores": (N,), "labels": (N,)}, ...]
    references = [{"boxes": (M, 4), "labels": (M,), "iscrowd": (M,) optional, "area": (M,) optional}, ...]

Boxes are in pixels: normalised boxes give the same IoUs, but COCO's small/medium/large buckets are in pixels.
Keys other than these are ignored (datasets carry ``image_id``, ``orig_size``, ...).
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Mapping
from typing import Any

import datasets
import evaluate
import numpy as np

BOX_FORMATS = ("xyxy", "xywh", "cxcywh")
_CITATION = """\
@inproceedings{lin2014microsoft,
    title = "Microsoft {COCO}: Common Objects in Context",
    author = "Lin, Tsung-Yi and Maire, Michael and Belongie, Serge and Hays, James and Perona, Pietro and
              Ramanan, Deva and Doll{\\'a}r, Piotr and Zitnick, C. Lawrence",
    booktitle = "European Conference on Computer Vision",
    year = "2014",
    pages = "740--755",
}
"""
_INPUTS = (
    "predictions: one dict per image with 'boxes' (N, 4), 'scores' (N,) and 'labels' (N,); references: one dict per "
    "image with 'boxes' (M, 4), 'labels' (M,) and optionally 'iscrowd' (M,) and 'area' (M,). Lists, numpy arrays "
    "or torch tensors; boxes in pixels, in the metric's box_format."
)
_PREDICTION_KEYS = ("boxes", "scores", "labels")
_REFERENCE_KEYS = ("boxes", "labels")
_AREAS = ("small", "medium", "large")


def _pycocotools() -> tuple[type, type]:
    """pycocotools' ``COCO`` and ``COCOeval``, imported only when a metric is built: it is an optional extra."""
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("MeanAveragePrecision needs pycocotools: pip install 'hf_xcv[detection]'") from err
    return COCO, COCOeval


def _features() -> datasets.Features:
    """The Arrow schema of one image: boxes are stored already converted to COCO's xywh, defaults filled in."""
    boxes = datasets.Sequence(datasets.Sequence(datasets.Value("float64"), length=4))
    floats, ints = datasets.Sequence(datasets.Value("float64")), datasets.Sequence(datasets.Value("int64"))
    return datasets.Features(
        {
            "predictions": {"boxes": boxes, "scores": floats, "labels": ints},
            "references": {"boxes": boxes, "labels": ints, "iscrowd": ints, "area": floats},
        }
    )


# ----------------------------------------------------------------------------------------------------------------
# input normalisation: any array-like to checked numpy arrays, then to the stored lists


def _to_numpy(value: Any, where: str) -> np.ndarray:
    """A list, numpy array or torch tensor (any device, any dtype) as a numeric numpy array."""
    if hasattr(value, "detach"):  # a torch tensor; duck-typed so that lists and arrays need no torch
        value = value.detach().cpu()
        # numpy has no bfloat16, and float64 holds every float dtype exactly
        value = (value.double() if value.is_floating_point() else value).numpy()
    try:
        array = np.asarray(value)
    except ValueError as err:  # ragged nested lists
        raise ValueError(f"{where} is not a rectangular array: {err}") from None
    if array.dtype != bool and not np.issubdtype(array.dtype, np.number):
        raise ValueError(f"{where} must be numeric, got dtype {array.dtype}")
    return array


def _float_field(value: Any, where: str, length: int | None = None) -> np.ndarray:
    """A 1-D float64 array of finite values, of ``length`` when given."""
    array = _to_numpy(value, where).astype(np.float64)
    if array.ndim != 1:
        raise ValueError(f"{where} must have shape ({'N' if length is None else length},), got {array.shape}")
    if length is not None and len(array) != length:
        raise ValueError(f"{where} has {len(array)} values but there are {length} boxes")
    if not np.isfinite(array).all():
        raise ValueError(f"{where} holds non-finite values (nan or inf) at {np.flatnonzero(~np.isfinite(array))}")
    return array


def _int_field(value: Any, where: str, length: int) -> np.ndarray:
    """A 1-D int64 array of ``length`` values; floats are accepted when they are whole numbers."""
    array = _float_field(value, where, length)
    if (array != np.round(array)).any():
        raise ValueError(f"{where} must hold whole numbers, got {array[array != np.round(array)][:5].tolist()}")
    return array.astype(np.int64)


def _boxes_xywh(value: Any, where: str, box_format: str) -> np.ndarray:
    """Boxes of shape (N, 4) in ``box_format`` as COCO's (N, 4) xywh, after checking shape, finiteness and size."""
    boxes = _to_numpy(value, where).astype(np.float64)
    if boxes.size == 0:
        boxes = boxes.reshape(0, 4)  # [] and np.zeros((0, 4)) both mean "no box"
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"{where} must have shape (N, 4) in {box_format}, got {boxes.shape}")
    if not np.isfinite(boxes).all():
        rows = np.flatnonzero(~np.isfinite(boxes).all(axis=1))
        raise ValueError(f"{where} holds non-finite values (nan or inf) in boxes {rows[:10].tolist()}")
    if box_format == "xyxy":
        xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
    elif box_format == "cxcywh":
        xywh = np.concatenate([boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, 2:]], axis=1)
    else:
        xywh = boxes
    negative = np.flatnonzero((xywh[:, 2:] < 0).any(axis=1))
    if negative.size:
        rule = "x1 >= x0 and y1 >= y0" if box_format == "xyxy" else "width and height >= 0"
        raise ValueError(
            f"{where} has boxes of negative size (boxes must satisfy {rule} in {box_format}): boxes "
            f"{negative[:10].tolist()}, e.g. {boxes[negative[0]].tolist()}"
        )
    return xywh


def _check_keys(sample: Any, keys: tuple[str, ...], where: str) -> None:
    if not isinstance(sample, Mapping):
        raise ValueError(f"{where} must be a dict with keys {list(keys)}, got {type(sample).__name__}")
    missing = [key for key in keys if key not in sample]
    if missing:
        hint = " (transformers' training targets call the labels 'class_labels')" if "class_labels" in sample else ""
        raise ValueError(f"{where} lacks {missing}: expected keys {list(keys)}{hint}")


def _prediction(sample: Any, where: str, box_format: str) -> dict[str, list]:
    """One image's detections, checked, as the stored lists (boxes in xywh)."""
    _check_keys(sample, _PREDICTION_KEYS, where)
    boxes = _boxes_xywh(sample["boxes"], f"{where}['boxes']", box_format)
    scores = _float_field(sample["scores"], f"{where}['scores']", len(boxes))
    labels = _int_field(sample["labels"], f"{where}['labels']", len(boxes))
    return {"boxes": boxes.tolist(), "scores": scores.tolist(), "labels": labels.tolist()}


def _reference(sample: Any, where: str, box_format: str) -> dict[str, list]:
    """One image's ground truth, checked, with ``iscrowd`` (0) and ``area`` (the box area) filled in when absent."""
    _check_keys(sample, _REFERENCE_KEYS, where)
    boxes = _boxes_xywh(sample["boxes"], f"{where}['boxes']", box_format)
    labels = _int_field(sample["labels"], f"{where}['labels']", len(boxes))
    iscrowd = np.zeros(len(boxes), np.int64)
    if sample.get("iscrowd") is not None:
        iscrowd = _int_field(sample["iscrowd"], f"{where}['iscrowd']", len(boxes))
        if not np.isin(iscrowd, (0, 1)).all():
            raise ValueError(f"{where}['iscrowd'] must be 0 or 1, got {sorted(set(iscrowd.tolist()))}")
    # COCO buckets small/medium/large by the GT 'area' field (the mask area on COCO itself), so a given one wins
    area = boxes[:, 2] * boxes[:, 3]
    if sample.get("area") is not None:
        area = _float_field(sample["area"], f"{where}['area']", len(boxes))
        if (area < 0).any():
            raise ValueError(f"{where}['area'] must be >= 0, got {area[area < 0][:5].tolist()}")
    return {"boxes": boxes.tolist(), "labels": labels.tolist(), "iscrowd": iscrowd.tolist(), "area": area.tolist()}


# ----------------------------------------------------------------------------------------------------------------
# COCO: the stored images as a ground-truth dataset and a result list, evaluated by COCOeval


def _coco_inputs(predictions: list[dict], references: list[dict]) -> tuple[dict, list[dict], list[int]]:
    """COCO's ground-truth dict, result list and the sorted class ids; image ``i`` gets id ``i + 1``.

    Annotation ids start at 1 because COCOeval stores the id of the matched annotation and reads 0 as "no match".
    """
    classes = sorted({label for sample in (*predictions, *references) for label in sample["labels"]})
    annotations, detections = [], []
    for image_id, (prediction, reference) in enumerate(zip(predictions, references, strict=True), start=1):
        for box, label, crowd, area in zip(
            reference["boxes"], reference["labels"], reference["iscrowd"], reference["area"], strict=True
        ):
            annotations.append(
                {"id": len(annotations) + 1, "image_id": image_id, "category_id": label, "bbox": box}
                | {"area": area, "iscrowd": crowd}
            )
        for box, score, label in zip(prediction["boxes"], prediction["scores"], prediction["labels"], strict=True):
            detections.append({"image_id": image_id, "category_id": label, "bbox": box, "score": score})
    ground_truth = {
        "images": [{"id": image_id} for image_id in range(1, len(references) + 1)],
        "annotations": annotations,
        "categories": [{"id": label, "name": str(label)} for label in classes],
    }
    return ground_truth, detections, classes


def _results_api(coco_gt: Any, detections: list[dict]) -> Any:
    """The detections as a COCO object, as ``loadRes`` builds it, which cannot take an empty list.

    Without detections COCOeval still counts every ground truth as missed: AP and AR are 0 wherever a bucket has
    ground truth and -1 where it has none, as for any image without detections.
    """
    if detections:
        return coco_gt.loadRes(detections)
    COCO, _ = _pycocotools()
    coco_dt = COCO()
    coco_dt.dataset = {"images": list(coco_gt.dataset["images"]), "annotations": []}
    coco_dt.dataset["categories"] = list(coco_gt.dataset["categories"])
    coco_dt.createIndex()
    return coco_dt


def _mean_valid(values: np.ndarray) -> float:
    """summarize()'s average: the mean over entries that are not -1 (-1 marks "no ground truth"), else -1."""
    valid = values[values > -1]
    return float(np.mean(valid)) if valid.size else -1.0


# ----------------------------------------------------------------------------------------------------------------
# the metric


def _iou_thresholds(value: Any) -> list[float] | None:
    """Checked IoU thresholds (None: COCO's, left untouched so that the default run is COCO's own)."""
    if value is None:
        return None
    try:
        ious = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        ious = np.full(0, np.nan)
    if ious.ndim != 1 or ious.size == 0 or not ((ious >= 0) & (ious <= 1)).all() or (np.diff(ious) <= 0).any():
        raise ValueError(f"iou_thresholds must be increasing values in [0, 1], got {value!r}")
    # summarize() finds 0.5 and 0.75 by ==, which np.arange(0.5, 0.96, 0.05)'s 0.7500000000000002 fails
    for anchor in (0.5, 0.75):
        ious[np.isclose(ious, anchor, rtol=0, atol=1e-9)] = anchor
    return ious.tolist()


def _max_detection_thresholds(value: Any) -> list[int] | None:
    """Checked max-detection thresholds (None: COCO's [1, 10, 100], left untouched)."""
    if value is None:
        return None
    max_dets = list(value) if isinstance(value, list | tuple) else []
    valid = len(max_dets) == 3 and all(isinstance(m, int | np.integer) and not isinstance(m, bool) for m in max_dets)
    if not (valid and 0 < max_dets[0] < max_dets[1] < max_dets[2]):
        raise ValueError(
            f"max_detection_thresholds must be 3 increasing positive ints (COCO's summary reads three), got {value!r}"
        )
    return [int(m) for m in max_dets]


class MeanAveragePrecision(evaluate.Metric):
    """COCO box mAP and mAR of pycocotools' ``COCOeval``, with torchmetrics' inputs and result names.

    The options are constructor arguments (as in torchmetrics' ``MeanAveragePrecision``), not ``compute`` keyword
    arguments: the box format must be known when a batch is added, because each batch is checked and converted then,
    so that bad input fails in the ``add_batch`` call that brought it; ``compute`` takes no options. The other
    evaluate constructor arguments (``num_process``, ``process_id``, ``experiment_id``, ``cache_dir``, ...) pass
    through, so distributed evaluation gathers through evaluate's cache files: every process must add at least one
    image, and process 0 returns the result over all of them (the others return None).

    Args:
        box_format: ``"xyxy"`` (corners), ``"xywh"`` (COCO's top-left corner and size) or ``"cxcywh"`` (centre and
            size), in pixels, for predictions and references alike.
        iou_thresholds: increasing IoU thresholds; None: COCO's 0.50:0.05:0.95. ``map_50`` and ``map_75`` are -1
            when 0.5 or 0.75 is not among them (as in ``COCOeval.summarize``); a threshold within 1e-9 of either
            is taken as exactly it, so that lists made with ``np.arange`` find them.
        max_detection_thresholds: three increasing numbers of detections per image kept, highest scores first;
            None: COCO's ``[1, 10, 100]``. ``map`` and the area and per-class results use the last.
        class_metrics: also return ``map_per_class`` and ``mar_<last>_per_class``, aligned with ``classes``.
        **kwargs: ``evaluate.Metric``'s own arguments.

    ``compute`` returns floats ``map``, ``map_50``, ``map_75``, ``map_small``, ``map_medium``, ``map_large``,
    ``mar_<k>`` for each max-detection threshold ``k``, ``mar_small``, ``mar_medium``, ``mar_large``, and
    ``classes``: the sorted label ids found in references or predictions. A value is -1 where COCO gives -1: no
    ground truth in that bucket (area range, class, or at all). A class found only in predictions has no ground truth
    and so does not enter ``map``, as in COCO. Crowd ground truth (``iscrowd=1``) is an ignore region: a detection
    matched to it is neither a true nor a false positive. Images without ground truth or without detections are
    valid; with no detections at all, AP and AR are 0 wherever there is ground truth (COCOeval counts it all as
    missed) and -1 elsewhere. The values are ``COCOeval.summarize()``'s stats, except that ``map`` is read at the last
    max-detection threshold where summarize() hard-codes 100.
    """

    def __init__(
        self,
        *,
        box_format: str = "xyxy",
        iou_thresholds: list[float] | None = None,
        max_detection_thresholds: list[int] | None = None,
        class_metrics: bool = False,
        **kwargs,
    ) -> None:
        if box_format not in BOX_FORMATS:
            raise ValueError(f"box_format must be one of {list(BOX_FORMATS)}, got {box_format!r}")
        if not isinstance(class_metrics, bool):
            raise ValueError(f"class_metrics must be a bool, got {class_metrics!r}")
        self.box_format, self.class_metrics = box_format, class_metrics
        self.iou_thresholds = _iou_thresholds(iou_thresholds)
        self.max_detection_thresholds = _max_detection_thresholds(max_detection_thresholds)
        _pycocotools()  # fail now, not after an evaluation loop, when the extra is missing
        super().__init__(**kwargs)

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description="COCO mean average precision and recall of boxes, computed by pycocotools' COCOeval.",
            citation=_CITATION,
            inputs_description=_INPUTS,
            features=_features(),
            reference_urls=["https://github.com/cocodataset/cocoapi"],
        )

    @property
    def _max_dets(self) -> list[int]:
        return self.max_detection_thresholds or [1, 10, 100]

    def _normalise(self, predictions: Any, references: Any) -> tuple[list[dict], list[dict]]:
        """Check a batch and turn it into the stored lists; an index names the image in the call and overall."""
        for name, value in (("predictions", predictions), ("references", references)):
            if isinstance(value, Mapping) or not hasattr(value, "__len__"):
                raise ValueError(
                    f"{name} must be a list of per-image dicts, got {type(value).__name__} "
                    "(use add(prediction=..., reference=...) for one image)"
                )
        if len(predictions) != len(references):
            raise ValueError(f"got {len(predictions)} predictions but {len(references)} references: one each per image")
        offset = len(self)  # images already added, so that the messages also give the overall index

        def where(name: str, index: int) -> str:
            return f"{name}[{index}]" + (f" (image {offset + index} overall)" if offset else "")

        preds = [_prediction(p, where("predictions", i), self.box_format) for i, p in enumerate(predictions)]
        refs = [_reference(r, where("references", i), self.box_format) for i, r in enumerate(references)]
        return preds, refs

    def add_batch(self, *, predictions=None, references=None, **kwargs) -> None:
        """Add a batch of images (one prediction dict and one reference dict each); an empty batch adds nothing.\n"""
        if kwargs:
            raise ValueError(f"unknown inputs {sorted(kwargs)}: add_batch takes predictions and references")
        predictions, references = self._normalise(predictions, references)
        if predictions:
            super().add_batch(predictions=predictions, references=references)

    def add(self, *, prediction=None, reference=None, **kwargs) -> None:
        """Add one image: its prediction dict and its reference dict.\n"""
        if kwargs:
            raise ValueError(f"unknown inputs {sorted(kwargs)}: add takes prediction and reference")
        (prediction,), (reference,) = self._normalise([prediction], [reference])
        super().add(prediction=prediction, reference=reference)

    def compute(self, *, predictions=None, references=None, **kwargs) -> dict[str, Any] | None:
        """Score the images given here and those added before; None on processes other than 0.\n"""
        if kwargs:
            raise ValueError(
                f"unknown arguments {sorted(kwargs)}: MeanAveragePrecision takes its options (box_format, "
                "iou_thresholds, max_detection_thresholds, class_metrics) in the constructor"
            )
        if (predictions is None) != (references is None):
            raise ValueError("give both predictions and references, or neither to score what add_batch added")
        if self.writer is None and (predictions is None or len(predictions) == 0):
            raise ValueError("MeanAveragePrecision of no images is undefined: add images before compute")
        return super().compute(predictions=predictions, references=references)

    def _compute(self, predictions, references) -> dict[str, Any]:
        ground_truth, detections, classes = _coco_inputs(predictions, references)
        coco_eval = self._evaluate(ground_truth, detections)
        return self._summary(coco_eval, classes)

    def _evaluate(self, ground_truth: dict, detections: list[dict]) -> Any:
        """COCOeval run to the end on these inputs and the metric's thresholds, its printing swallowed."""
        COCO, COCOeval = _pycocotools()
        with contextlib.redirect_stdout(io.StringIO()):
            coco_gt = COCO()
            coco_gt.dataset = ground_truth
            coco_gt.createIndex()
            coco_eval = COCOeval(coco_gt, _results_api(coco_gt, detections), "bbox")
            if self.iou_thresholds is not None:
                coco_eval.params.iouThrs = np.asarray(self.iou_thresholds, dtype=np.float64)
            if self.max_detection_thresholds is not None:
                coco_eval.params.maxDets = list(self.max_detection_thresholds)
            coco_eval.evaluate()
            coco_eval.accumulate()
            coco_eval.summarize()
        return coco_eval

    def _summary(self, coco_eval: Any, classes: list[int]) -> dict[str, Any]:
        """summarize()'s twelve stats under torchmetrics' names, plus per-class values when asked for."""
        stats = [float(s) for s in coco_eval.stats]
        precision = coco_eval.eval["precision"]  # (iou, recall, class, area, max_dets); area 0 is "all"
        recall = coco_eval.eval["recall"]  # (iou, class, area, max_dets)
        max_dets = self._max_dets
        if max_dets[-1] != 100:  # summarize() reads its first stat at a hard-coded 100 detections
            stats[0] = _mean_valid(precision[:, :, :, 0, -1])
        names = ["map", "map_50", "map_75", *(f"map_{a}" for a in _AREAS)]
        names += [*(f"mar_{m}" for m in max_dets), *(f"mar_{a}" for a in _AREAS)]
        results: dict[str, Any] = dict(zip(names, stats, strict=True))
        if self.class_metrics:
            # COCOeval orders classes as sorted(catIds), which is `classes`
            results["map_per_class"] = [_mean_valid(precision[:, :, k, 0, -1]) for k in range(len(classes))]
            results[f"mar_{max_dets[-1]}_per_class"] = [_mean_valid(recall[:, k, 0, -1]) for k in range(len(classes))]
        results["classes"] = list(classes)
        return results


def flatten_detection_metrics(
    results: Mapping[str, Any], id2label: Mapping[int, str] | Mapping[str, str] | None = None
) -> dict[str, float]:
    """Turn ``MeanAveragePrecision``'s per-class lists into scalars, for ``Trainer.compute_metrics`` and logs.

    ``map_per_class`` becomes ``map_<name>`` and ``mar_<k>_per_class`` becomes ``mar_<k>_<name>``, where ``name``
    is ``id2label[class id]`` (a model config's ``id2label``; keys may be ints or strings) or the id itself. The
    lists and ``classes`` are dropped; the scalars are kept.

    Raises:
        ValueError: a class id is not in ``id2label``, two classes share a name, or the lengths disagree.
    """
    classes = [int(c) for c in results.get("classes", [])]
    flat = {key: float(value) for key, value in results.items() if not isinstance(value, list | tuple)}
    names = [_class_name(c, id2label) for c in classes]
    if len(set(names)) != len(names):
        raise ValueError(f"id2label gives several classes the same name: {names}")
    for key, values in results.items():
        match = re.fullmatch(r"(map|mar_\d+)_per_class", key)
        if match is None:
            continue
        if len(values) != len(classes):
            raise ValueError(f"{key} has {len(values)} values but there are {len(classes)} classes")
        flat.update({f"{match.group(1)}_{name}": float(value) for name, value in zip(names, values, strict=True)})
    return flat


def _class_name(class_id: int, id2label: Mapping[int, str] | Mapping[str, str] | None) -> str:
    if id2label is None:
        return str(class_id)
    for key in (class_id, str(class_id)):
        if key in id2label:
            return str(id2label[key])
    raise ValueError(f"class {class_id} is not in id2label (which has {len(id2label)} labels: {list(id2label)[:10]})")
