"""Registry-driven bad-input checks: every registered model refuses an empty batch with one error that says so, and
every classification head refuses class labels outside [0, num_labels) by value and num_labels (-100, which the loss
ignores, stays allowed)."""

from __future__ import annotations

import pytest
import torch
from model_testing import HEADS, MODEL_CASES, SPECS, case_id, make_inputs, tiny_config

from hf_xcv import TTSRModel, ViTForImageClassification, preset_config
from hf_xcv.utils.errors import UsageError

CLASSIFIERS = ("AutoModelForImageClassification", "AutoModelForSequenceClassification")
CLASSIFIER_CASES = [(model_type, head) for model_type, auto_name, head in HEADS if auto_name in CLASSIFIERS]


def classifier_id(case) -> str:
    return f"{case[0]}-{case[1].__name__}"


@pytest.fixture(scope="module")
def built():
    """One tiny model per class, shared by the tests of this module (they only run forwards)."""
    cache = {}

    def get(model_type, cls):
        if cls not in cache:
            torch.manual_seed(0)
            cache[cls] = cls(tiny_config(model_type)).eval()
        return cache[cls]

    return get


@pytest.mark.parametrize("case", MODEL_CASES, ids=case_id)
def test_an_empty_batch_is_refused_by_name(case, built):
    model = built(*case)
    inputs = make_inputs(model, batch=0, padded=False)  # with the task's labels, as a training step passes them
    with pytest.raises(UsageError, match=r"^the batch is empty: \w+ has shape \(0, [\d, ]+\)"):
        model(**inputs)


def test_an_empty_reference_is_named():
    model = TTSRModel(tiny_config("xcv_ttsr")).eval()
    inputs = make_inputs(model, batch=2)
    inputs["reference_pixel_values"] = inputs["reference_pixel_values"][:0]
    with pytest.raises(UsageError, match=r"the batch is empty: reference_pixel_values has shape \(0, 3, 28, 24\)"):
        model(**inputs)


def test_every_classification_head_is_checked():
    assert {head.__name__ for _, head in CLASSIFIER_CASES} >= {
        "ViTForImageClassification",
        "SwinForImageClassification",
        "XFormerForSequenceClassification",
    }


@pytest.mark.parametrize("case", CLASSIFIER_CASES, ids=classifier_id)
@pytest.mark.parametrize("wrong", ["num_labels", -2])
def test_class_labels_out_of_range_are_named(case, wrong, built):
    model = built(*case)
    num_labels = model.config.num_labels
    value = num_labels if wrong == "num_labels" else wrong
    inputs = make_inputs(model, batch=2, padded=False)
    inputs["labels"] = torch.tensor([0, value])
    with pytest.raises(UsageError, match=rf"labels \[{value}\] are out of range: .*num_labels={num_labels}\)"):
        model(**inputs)


@pytest.mark.parametrize("case", CLASSIFIER_CASES, ids=classifier_id)
def test_class_labels_in_range_and_ignored_ones_give_a_loss(case, built):
    model = built(*case)
    inputs = make_inputs(model, batch=3, padded=False)
    inputs["labels"] = torch.tensor([0, model.config.num_labels - 1, -100])  # -100: cross-entropy ignores it
    with torch.no_grad():
        assert torch.isfinite(model(**inputs).loss)


def test_regression_and_multi_label_targets_are_not_class_ids():
    """Only class-index labels are checked: regression values and multi-hot targets keep their losses."""
    regression = ViTForImageClassification(preset_config(SPECS["xcv_vit"].test_preset, num_labels=1)).eval()
    inputs = make_inputs(regression, batch=2, labels=False)
    with torch.no_grad():
        assert torch.isfinite(regression(**inputs, labels=torch.tensor([7.5, -3.0])).loss)
    multi = ViTForImageClassification(tiny_config("xcv_vit", problem_type="multi_label_classification")).eval()
    with torch.no_grad():
        assert torch.isfinite(multi(**inputs, labels=torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])).loss)


@pytest.mark.parametrize("case", CLASSIFIER_CASES, ids=classifier_id)
def test_the_label_check_stays_out_of_a_compiled_graph(case, built):
    """The value check reads the labels: torch.compile(fullgraph=True) leaves it out and captures the loss whole."""
    model = built(*case)
    inputs = make_inputs(model, batch=2, padded=False)
    with torch.no_grad():
        expected = model(**inputs).loss
        compiled = torch.compile(model, fullgraph=True, backend="eager")(**inputs).loss
    torch.testing.assert_close(compiled, expected)
