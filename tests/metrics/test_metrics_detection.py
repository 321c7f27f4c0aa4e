"""MeanAveragePrecision gives exactly what pycocotools' COCOeval gives on the same COCO data, for every input form.

The reference side builds the COCO ground-truth dict and result list by hand from xyxy pixel boxes and runs
COCOeval itself, so the metric's conversion (boxes, crowd flags, areas, empty images) is checked, not assumed.
"""

from __future__ import annotations

import json
import multiprocessing
import types

import numpy as np
import pytest
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from hf_xcv.metrics import MeanAveragePrecision, flatten_detection_metrics

STATS = (
    "map", "map_50", "map_75", "map_small", "map_medium", "map_large",
    "mar_1", "mar_10", "mar_100", "mar_small", "mar_medium", "mar_large",
)  # fmt: skip
NO_GT, NO_PREDICTIONS, EMPTY = 5, 6, 7  # image indices of random_case() without GT / predictions / either


def _bucket(area: np.ndarray) -> np.ndarray:
    return np.digitize(area, [32**2, 96**2])  # COCO's small / medium / large


def random_case(seed: int = 0, num_images: int = 8, num_classes: int = 3) -> tuple[list[dict], list[dict]]:
    """Images with crowd GT, explicit GT areas (a mask is smaller than its box), and empty images; xyxy boxes."""
    rng = np.random.default_rng(seed)
    predictions, references = [], []
    for image in range(num_images):
        m = 0 if image in (NO_GT, EMPTY) else int(rng.integers(2, 8))
        xy = rng.uniform(0, 400, (m, 2))
        wh = np.exp(rng.uniform(np.log(6), np.log(300), (m, 2)))  # spans all three area buckets
        gt_boxes, gt_labels = np.concatenate([xy, xy + wh], 1), rng.integers(0, num_classes, m)
        references.append(
            {
                "boxes": gt_boxes.tolist(),
                "labels": gt_labels.tolist(),
                "iscrowd": (rng.random(m) < 0.2).astype(int).tolist(),
                "area": (wh.prod(1) * rng.uniform(0.2, 1.0, m)).tolist(),
            }
        )
        hit = rng.random(m) < 0.7  # detections near most GT boxes, some with a wrong label, plus clutter
        near = gt_boxes[hit] + rng.normal(0, 0.1, (int(hit.sum()), 4)) * np.tile(wh[hit], 2)
        near_labels = np.where(rng.random(int(hit.sum())) < 0.8, gt_labels[hit], rng.integers(0, num_classes))
        k = 0 if image in (NO_PREDICTIONS, EMPTY) else int(rng.integers(1, 5))
        xy = rng.uniform(0, 400, (k, 2))
        clutter = np.concatenate([xy, xy + rng.uniform(5, 200, (k, 2))], 1)
        boxes = np.concatenate([near, clutter])
        boxes = np.concatenate([boxes[:, :2], np.maximum(boxes[:, 2:], boxes[:, :2])], 1)  # no negative sizes
        if image == NO_PREDICTIONS:
            boxes = boxes[:0]
        labels = np.concatenate([near_labels, rng.integers(0, num_classes, k)])[: len(boxes)]
        predictions.append(
            {"boxes": boxes.tolist(), "scores": rng.random(len(boxes)).tolist(), "labels": labels.tolist()}
        )
    return predictions, references


def coco_eval(predictions: list[dict], references: list[dict], **params) -> COCOeval:
    """COCOeval on COCO data written out here from xyxy boxes; ``params`` set COCOeval.params fields."""
    annotations = [
        {"image_id": i + 1, "category_id": label, "iscrowd": crowd, "area": area, "bbox": [x0, y0, x1 - x0, y1 - y0]}
        for i, ref in enumerate(references)
        for (x0, y0, x1, y1), label, crowd, area in zip(ref["boxes"], ref["labels"], ref["iscrowd"], ref["area"])
    ]
    for index, annotation in enumerate(annotations):
        annotation["id"] = index + 1  # COCOeval reads id 0 as "unmatched"
    classes = sorted({c for sample in predictions + references for c in sample["labels"]})
    gt = COCO()
    gt.dataset = {
        "images": [{"id": i + 1} for i in range(len(references))],
        "annotations": annotations,
        "categories": [{"id": c} for c in classes],
    }
    gt.createIndex()
    results = [
        {"image_id": i + 1, "category_id": label, "score": score, "bbox": [x0, y0, x1 - x0, y1 - y0]}
        for i, pred in enumerate(predictions)
        for (x0, y0, x1, y1), score, label in zip(pred["boxes"], pred["scores"], pred["labels"])
    ]
    evaluator = COCOeval(gt, gt.loadRes(results), "bbox")
    for name, value in params.items():
        setattr(evaluator.params, name, value)
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    return evaluator


def stats_of(result: dict) -> list[float]:
    return [result[name] for name in STATS]


@pytest.fixture(scope="module")
def case() -> tuple[list[dict], list[dict]]:
    return random_case()


@pytest.fixture(scope="module")
def expected(case) -> dict:
    return MeanAveragePrecision(class_metrics=True).compute(predictions=case[0], references=case[1])


# ---------------------------------------------------------------------------------------------------------------
# equal to COCOeval


def test_the_random_case_covers_what_it_should(case):
    predictions, references = case
    assert [len(r["boxes"]) == 0 for r in references].count(True) == 2
    assert len(predictions[NO_GT]["boxes"]) > 0 and len(predictions[NO_PREDICTIONS]["boxes"]) == 0
    assert len(references[NO_PREDICTIONS]["boxes"]) > 0 and len(predictions[EMPTY]["boxes"]) == 0
    assert sum(sum(r["iscrowd"]) for r in references) >= 2
    boxes = np.concatenate([np.reshape(r["boxes"], (-1, 4)) for r in references])
    areas = np.concatenate([r["area"] for r in references])
    box_areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    assert (_bucket(areas) != _bucket(box_areas)).sum() >= 5  # the given areas move boxes between buckets
    assert set(_bucket(areas)) == {0, 1, 2}


def test_equals_cocoeval_on_a_random_case(case, expected):
    assert stats_of(expected) == coco_eval(*case).stats.tolist()
    assert all(0 < value < 1 for value in stats_of(expected))
    assert expected["classes"] == [0, 1, 2]
    assert all(type(value) is float for value in stats_of(expected))


def test_given_areas_decide_the_area_buckets(case, expected):
    predictions, references = case
    without_area = [{k: v for k, v in r.items() if k != "area"} for r in references]
    result = MeanAveragePrecision().compute(predictions=predictions, references=without_area)
    assert result["map"] == expected["map"]  # area only sorts GT into buckets
    assert [result[f"map_{a}"] for a in ("small", "medium", "large")] != [
        expected[f"map_{a}"] for a in ("small", "medium", "large")
    ]
    box_area = [dict(r, area=[(x1 - x0) * (y1 - y0) for x0, y0, x1, y1 in r["boxes"]]) for r in references]
    assert stats_of(result) == coco_eval(predictions, box_area).stats.tolist()


def test_per_class_values_equal_cocoeval_on_that_class_alone(case, expected):
    for k, c in enumerate(expected["classes"]):
        stats = coco_eval(*case, catIds=[c]).stats
        assert expected["map_per_class"][k] == pytest.approx(stats[0], abs=1e-12)
        assert expected["mar_100_per_class"][k] == pytest.approx(stats[8], abs=1e-12)
    assert len(set(expected["map_per_class"])) == 3


def test_a_class_only_in_predictions_is_minus_one_and_does_not_enter_map(case, expected):
    predictions, references = case
    extra = [dict(p) for p in predictions]
    extra[0] = {key: list(value) for key, value in extra[0].items()}
    extra[0]["boxes"].append([1.0, 1.0, 50.0, 50.0])
    extra[0]["scores"].append(0.99)
    extra[0]["labels"].append(9)
    result = MeanAveragePrecision(class_metrics=True).compute(predictions=extra, references=references)
    assert result["classes"] == [0, 1, 2, 9]
    assert result["map_per_class"][:3] == expected["map_per_class"] and result["map_per_class"][3] == -1.0
    assert result["map"] == expected["map"]


def test_other_max_detection_thresholds_equal_cocoeval(case):
    predictions, references = case
    result = MeanAveragePrecision(max_detection_thresholds=[1, 3, 5]).compute(
        predictions=predictions, references=references
    )
    evaluator = coco_eval(predictions, references, maxDets=[1, 3, 5])
    # summarize() reads its first stat at 100 detections, which [1, 3, 5] lacks, so it says -1; the metric
    # averages COCOeval's precision at the last threshold, as summarize does for every other stat
    assert evaluator.stats[0] == -1
    precision = evaluator.eval["precision"][:, :, :, 0, 2]
    assert result["map"] == pytest.approx(precision[precision > -1].mean(), abs=1e-12)
    names = ["map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_3", "mar_5"]
    names += ["mar_small", "mar_medium", "mar_large"]
    assert [result[name] for name in names] == evaluator.stats[1:].tolist()
    assert "mar_100" not in result


def test_iou_thresholds(case, expected):
    predictions, references = case
    only_50 = MeanAveragePrecision(iou_thresholds=[0.5]).compute(predictions=predictions, references=references)
    assert only_50["map"] == pytest.approx(expected["map_50"], abs=1e-12)
    assert only_50["map_50"] == pytest.approx(expected["map_50"], abs=1e-12)
    assert only_50["map_75"] == -1.0  # as in COCOeval.summarize: 0.75 is not among the thresholds
    two = MeanAveragePrecision(iou_thresholds=[0.5, 0.75]).compute(predictions=predictions, references=references)
    assert two["map_75"] == pytest.approx(expected["map_75"], abs=1e-12)
    # np.arange's 0.7500000000000002 still counts as 0.75
    arange = MeanAveragePrecision(iou_thresholds=np.arange(0.5, 0.96, 0.05)).compute(
        predictions=predictions, references=references
    )
    assert stats_of(arange) == pytest.approx(stats_of(expected), abs=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# semantics


def test_perfect_predictions_give_one(case):
    references = case[1]
    perfect = [{"boxes": r["boxes"], "scores": [0.5] * len(r["boxes"]), "labels": r["labels"]} for r in references]
    result = MeanAveragePrecision().compute(predictions=perfect, references=references)
    assert result["map"] == pytest.approx(1.0) and result["map_50"] == pytest.approx(1.0)
    assert result["mar_100"] == pytest.approx(1.0) and result["map_small"] == pytest.approx(1.0)


CROWD_REFERENCE = {"boxes": [[10, 10, 60, 60], [100, 100, 300, 300]], "labels": [0, 0], "iscrowd": [0, 1]}
ON_OBJECT = {"boxes": [[10, 10, 60, 60]], "scores": [0.8], "labels": [0]}
ON_OBJECT_AND_CROWD = {"boxes": [[10, 10, 60, 60], [150, 150, 250, 250]], "scores": [0.8, 0.9], "labels": [0, 0]}


def test_a_detection_on_a_crowd_region_is_not_a_false_positive():
    metric = MeanAveragePrecision()
    with_it = metric.compute(predictions=[ON_OBJECT_AND_CROWD], references=[CROWD_REFERENCE])
    without_it = metric.compute(predictions=[ON_OBJECT], references=[CROWD_REFERENCE])
    # COCO keeps the top-scored detections before matching, so at one detection the crowd one takes the slot
    assert {**with_it, "mar_1": None} == {**without_it, "mar_1": None}
    assert with_it["map"] == pytest.approx(1.0) and with_it["mar_1"] == 0.0 and without_it["mar_1"] == 1.0
    with_area = dict(CROWD_REFERENCE, area=[2500, 40000])
    assert stats_of(with_it) == coco_eval([ON_OBJECT_AND_CROWD], [with_area]).stats.tolist()
    # the same detection with the crowd region gone is a false positive above the true positive
    no_crowd = {"boxes": CROWD_REFERENCE["boxes"][:1], "labels": [0]}
    assert metric.compute(predictions=[ON_OBJECT_AND_CROWD], references=[no_crowd])["map"] < 0.6


def test_no_predictions_at_all_give_zero_where_there_is_ground_truth():
    references = [{"boxes": [[0, 0, 10, 10], [0, 0, 40, 40]], "labels": [0, 1]}, {"boxes": [], "labels": []}]
    nothing = [{"boxes": [], "scores": [], "labels": []}] * 2
    result = MeanAveragePrecision(class_metrics=True).compute(predictions=nothing, references=references)
    assert result["map"] == 0.0 and result["mar_100"] == 0.0 and result["map_small"] == 0.0
    assert result["map_medium"] == 0.0 and result["map_large"] == -1.0  # no large GT
    assert result["map_per_class"] == [0.0, 0.0] and result["classes"] == [0, 1]


def test_no_ground_truth_at_all_gives_minus_one():
    predictions = [
        {"boxes": [[0, 0, 10, 10]], "scores": [0.5], "labels": [3]},
        {"boxes": [], "scores": [], "labels": []},
    ]
    references = [{"boxes": [], "labels": []}] * 2
    result = MeanAveragePrecision().compute(predictions=predictions, references=references)
    assert stats_of(result) == [-1.0] * 12 and result["classes"] == [3]
    empty = MeanAveragePrecision().compute(predictions=predictions[1:], references=references[1:])
    assert stats_of(empty) == [-1.0] * 12 and empty["classes"] == []


# ---------------------------------------------------------------------------------------------------------------
# input forms


def test_batches_accumulate_to_one_compute(case, expected):
    predictions, references = case
    metric = MeanAveragePrecision(class_metrics=True)
    metric.add_batch(predictions=predictions[:3], references=references[:3])
    metric.add_batch(predictions=[], references=[])  # an empty last batch adds nothing
    metric.add_batch(predictions=predictions[3:], references=references[3:])
    assert metric.compute() == expected
    for prediction, reference in zip(predictions[:2], references[:2]):
        metric.add(prediction=prediction, reference=reference)
    metric.add_batch(predictions=predictions[2:5], references=references[2:5])
    assert metric.compute(predictions=predictions[5:], references=references[5:]) == expected


def test_a_rejected_batch_leaves_what_was_added(case):
    predictions, references = case
    metric = MeanAveragePrecision()
    metric.add_batch(predictions=predictions[:4], references=references[:4])
    with pytest.raises(ValueError, match="non-finite"):
        metric.add_batch(predictions=[{"boxes": [[0, 0, np.nan, 1]], "scores": [1], "labels": [0]}], references=[{}])
    assert metric.compute() == MeanAveragePrecision().compute(predictions=predictions[:4], references=references[:4])


def test_tensors_and_arrays_equal_lists(case):
    predictions, references = case
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
    tensor_predictions = [
        {
            "boxes": torch.tensor(p["boxes"], dtype=torch.float32).reshape(-1, 4).requires_grad_(),
            "scores": torch.tensor(p["scores"], dtype=dtypes[i % 4]),
            "labels": torch.tensor(p["labels"], dtype=torch.int32 if i % 2 else torch.float32),
        }
        for i, p in enumerate(predictions)
    ]
    array_references = [
        {
            "boxes": np.asarray(r["boxes"], np.float32).reshape(-1, 4),
            "labels": np.asarray(r["labels"], np.int64),
            "iscrowd": torch.tensor(r["iscrowd"], dtype=torch.bool),
            "area": torch.tensor(r["area"], dtype=torch.float32),
        }
        for r in references
    ]
    as_lists = [{k: v.detach().double().tolist() for k, v in p.items()} for p in tensor_predictions]
    lists_references = [{k: np.asarray(v, np.float64).tolist() for k, v in r.items()} for r in array_references]
    metric = MeanAveragePrecision()
    result = metric.compute(predictions=tensor_predictions, references=array_references)
    assert result == metric.compute(predictions=as_lists, references=lists_references)
    assert 0 < result["map"] < 1


def test_accepts_what_detr_post_processing_returns():
    from transformers import DetrImageProcessor

    torch.manual_seed(0)
    outputs = types.SimpleNamespace(logits=torch.randn(2, 6, 4), pred_boxes=torch.rand(2, 6, 4) * 0.5 + 0.25)
    sizes = [(120, 200), (80, 60)]
    processed = DetrImageProcessor().post_process_object_detection(outputs, threshold=0.0, target_sizes=sizes)
    references = [{"boxes": p["boxes"][:2].tolist(), "labels": [0, 1]} for p in processed]
    metric = MeanAveragePrecision()
    result = metric.compute(predictions=processed, references=references)
    as_lists = [{k: v.tolist() for k, v in p.items()} for p in processed]
    assert result == metric.compute(predictions=as_lists, references=references)
    assert result["map_50"] > 0


@pytest.mark.parametrize("box_format", ["xywh", "cxcywh"])
def test_box_formats_agree(case, expected, box_format):
    def convert(boxes):
        b = np.asarray(boxes, np.float64).reshape(-1, 4)
        wh = b[:, 2:] - b[:, :2]
        return np.concatenate([b[:, :2] if box_format == "xywh" else b[:, :2] + wh / 2, wh], 1).tolist()

    predictions, references = ([dict(s, boxes=convert(s["boxes"])) for s in samples] for samples in case)
    result = MeanAveragePrecision(box_format=box_format).compute(predictions=predictions, references=references)
    assert stats_of(result) == pytest.approx(stats_of(expected), abs=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# bad input


def _pred(boxes=((0, 0, 10, 10),), scores=(0.5,), labels=(0,)) -> dict:
    return {"boxes": [list(b) for b in boxes], "scores": list(scores), "labels": list(labels)}


def _ref(boxes=((0, 0, 10, 10),), labels=(0,), **extra) -> dict:
    return {"boxes": [list(b) for b in boxes], "labels": list(labels), **extra}


@pytest.mark.parametrize(
    ("predictions", "references", "box_format", "message"),
    [
        ([_pred(), _pred()], [_ref()], "xyxy", r"got 2 predictions but 1 references"),
        ([_pred(boxes=[(0, 0, 1, 1, 1)])], [_ref()], "xyxy", r"predictions\[0\]\['boxes'\] must have shape \(N, 4\)"),
        ([{**_pred(), "boxes": [0, 0, 1, 1]}], [_ref()], "xyxy", r"must have shape \(N, 4\) in xyxy, got \(4,\)"),
        ([_pred(scores=[0.5, 0.4])], [_ref()], "xyxy", r"\['scores'\] has 2 values but there are 1 boxes"),
        ([_pred()], [_ref(labels=[])], "xyxy", r"references\[0\]\['labels'\] has 0 values but there are 1 boxes"),
        (
            [_pred(), _pred()],
            [_ref(), _ref(boxes=[(0, 0, 10, 10), (5, 0, 4, 10)], labels=[0, 0])],
            "xyxy",
            r"references\[1\]\['boxes'\] has boxes of negative size .*x1 >= x0.*boxes \[1\]",
        ),
        ([_pred(boxes=[(5, 5, -1, 2)])], [_ref()], "cxcywh", r"predictions\[0\]\['boxes'\] has boxes of negative"),
        ([_pred(boxes=[(0, 0, np.nan, 1)])], [_ref()], "xyxy", r"predictions\[0\]\['boxes'\] holds non-finite"),
        ([_pred(scores=[np.inf])], [_ref()], "xyxy", r"predictions\[0\]\['scores'\] holds non-finite"),
        ([_pred()], [_ref(area=[np.nan])], "xyxy", r"references\[0\]\['area'\] holds non-finite"),
        ([_pred()], [_ref(area=[1.0, 2.0])], "xyxy", r"\['area'\] has 2 values but there are 1 boxes"),
        ([_pred()], [_ref(iscrowd=[2])], "xyxy", r"references\[0\]\['iscrowd'\] must be 0 or 1"),
        ([_pred(labels=[1.5])], [_ref()], "xyxy", r"predictions\[0\]\['labels'\] must hold whole numbers"),
        ([{"boxes": [], "labels": []}], [_ref()], "xyxy", r"predictions\[0\] lacks \['scores'\]"),
        ([_pred()], [{"boxes": [], "class_labels": []}], "xyxy", r"lacks \['labels'\].*'class_labels'"),
        ([[]], [_ref()], "xyxy", r"predictions\[0\] must be a dict"),
        (_pred(), [_ref()], "xyxy", r"predictions must be a list of per-image dicts"),
        ([_pred(labels=["cat"])], [_ref()], "xyxy", r"\['labels'\] must be numeric"),
    ],
)
def test_bad_inputs(predictions, references, box_format, message):
    with pytest.raises(ValueError, match=message):
        MeanAveragePrecision(box_format=box_format).compute(predictions=predictions, references=references)


def test_a_bad_image_of_a_later_batch_is_named_by_its_overall_index():
    metric = MeanAveragePrecision()
    metric.add_batch(predictions=[_pred()] * 3, references=[_ref()] * 3)
    with pytest.raises(ValueError, match=r"predictions\[1\] \(image 4 overall\)\['scores'\]"):
        metric.add_batch(predictions=[_pred(), _pred(scores=[])], references=[_ref(), _ref()])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"box_format": "xyxy_normalized"}, r"box_format must be one of \['xyxy', 'xywh', 'cxcywh'\]"),
        ({"iou_thresholds": [0.5, 1.5]}, r"iou_thresholds must be increasing values in \[0, 1\]"),
        ({"iou_thresholds": [0.75, 0.5]}, r"iou_thresholds must be increasing"),
        ({"iou_thresholds": []}, r"iou_thresholds must be increasing"),
        ({"iou_thresholds": ["high"]}, r"iou_thresholds must be increasing"),
        ({"max_detection_thresholds": [1, 10]}, r"max_detection_thresholds must be 3 increasing positive ints"),
        ({"max_detection_thresholds": [10, 1, 100]}, r"max_detection_thresholds must be 3"),
        ({"max_detection_thresholds": [0, 1, 2]}, r"max_detection_thresholds must be 3"),
        ({"max_detection_thresholds": [1, 10, 99.5]}, r"max_detection_thresholds must be 3"),
        ({"class_metrics": "yes"}, r"class_metrics must be a bool"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        MeanAveragePrecision(**options)


def test_bad_compute_calls():
    metric = MeanAveragePrecision()
    with pytest.raises(ValueError, match=r"unknown arguments \['box_format'\].*in the constructor"):
        metric.compute(predictions=[_pred()], references=[_ref()], box_format="xywh")
    with pytest.raises(ValueError, match="no images"):
        metric.compute()
    with pytest.raises(ValueError, match="no images"):
        metric.compute(predictions=[], references=[])
    with pytest.raises(ValueError, match="give both predictions and references"):
        metric.compute(predictions=[_pred()])
    with pytest.raises(ValueError, match=r"unknown inputs \['image_ids'\]"):
        metric.add_batch(predictions=[_pred()], references=[_ref()], image_ids=[1])


# ---------------------------------------------------------------------------------------------------------------
# distributed: evaluate's cache-file gathering


def _worker(rank: int, predictions: list, references: list, cache_dir: str, out: str) -> None:
    metric = MeanAveragePrecision(
        class_metrics=True, num_process=2, process_id=rank, experiment_id="detection-test", cache_dir=cache_dir
    )
    # evaluate's rendezvous: process 0 waits in its first add_batch until the other has opened its cache file
    metric.add_batch(predictions=predictions, references=references)
    with open(out, "w") as file:
        json.dump(metric.compute(), file)


def test_two_processes_equal_one(case, expected, tmp_path):
    predictions, references = case
    # fork, not spawn: a spawned child would import torch and transformers again (~10 s)
    context = multiprocessing.get_context("fork")
    halves = [slice(0, 4), slice(4, None)]
    processes = [
        context.Process(
            target=_worker,
            args=(rank, predictions[half], references[half], str(tmp_path / "cache"), str(tmp_path / f"{rank}.json")),
        )
        for rank, half in enumerate(halves)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)  # a safety net against a hung rendezvous, not a speed check
    assert [process.exitcode for process in processes] == [0, 0]
    assert json.loads((tmp_path / "0.json").read_text()) == expected
    assert json.loads((tmp_path / "1.json").read_text()) is None
    assert not list((tmp_path / "cache").rglob("*.arrow"))  # process 0 removed every cache file


# ---------------------------------------------------------------------------------------------------------------
# flattening for compute_metrics and logs


def test_flatten_turns_per_class_lists_into_named_scalars(expected):
    flat = flatten_detection_metrics(expected, id2label={0: "cat", 1: "dog", 2: "bird", 3: "unused"})
    for k, name in enumerate(["cat", "dog", "bird"]):
        assert flat[f"map_{name}"] == expected["map_per_class"][k]
        assert flat[f"mar_100_{name}"] == expected["mar_100_per_class"][k]
    assert {name: flat[name] for name in STATS} == {name: expected[name] for name in STATS}
    assert len(flat) == 12 + 6 and all(type(value) is float for value in flat.values())
    by_string_keys = flatten_detection_metrics(expected, id2label={"0": "cat", "1": "dog", "2": "bird"})
    assert by_string_keys == flat
    assert flatten_detection_metrics(expected)["map_2"] == expected["map_per_class"][2]


def test_flatten_without_class_metrics_keeps_the_scalars(case):
    result = MeanAveragePrecision().compute(predictions=case[0], references=case[1])
    assert flatten_detection_metrics(result) == {name: result[name] for name in STATS}


def test_flatten_rejects_unknown_and_duplicate_names(expected):
    with pytest.raises(ValueError, match=r"class 2 is not in id2label"):
        flatten_detection_metrics(expected, id2label={0: "cat", 1: "dog"})
    with pytest.raises(ValueError, match=r"several classes the same name"):
        flatten_detection_metrics(expected, id2label={0: "cat", 1: "cat", 2: "bird"})
