"""One policy for extra keyword arguments, on every registered model class: the pass-through keys a class
honours (``_honoured_kwargs``: what transformers' Trainer and generate() send) are honoured, anything else
with a value is refused with the names the model accepts."""

from __future__ import annotations

import pytest
import torch
from model_testing import MODEL_CASES, case_id, main_output, make_inputs, tiny_config


def build(case):
    model_type, cls = case
    torch.manual_seed(0)
    return cls(tiny_config(model_type)).eval()


@pytest.mark.parametrize("case", MODEL_CASES, ids=case_id)
def test_unknown_keyword_arguments_are_refused_with_the_accepted_names(case):
    model = build(case)
    inputs = make_inputs(model)
    with pytest.raises(ValueError, match=r"got unexpected arguments \['not_an_argument'\]; it accepts \[") as err:
        model(**inputs, not_an_argument=torch.ones(1))
    message = str(err.value)
    assert type(model).__name__ in message
    for name in model._honoured_kwargs:
        assert repr(name) in message
    with torch.no_grad():  # None passes nothing: transformers sends None for what it does not use
        assert torch.equal(main_output(model(**inputs, not_an_argument=None)), main_output(model(**inputs)))


def check_num_items_in_batch(model, inputs):
    """The loss is a sum normalised by ``num_items_in_batch`` (Trainer counts label items across gradient
    accumulation): doubling the count halves the loss, and the count of this batch's items gives the mean."""
    with torch.no_grad():
        plain = model(**inputs).loss
        for count in (3, 7):
            single = model(**inputs, num_items_in_batch=count).loss
            double = model(**inputs, num_items_in_batch=2 * count).loss
            torch.testing.assert_close(single, 2 * double)
        assert not torch.allclose(model(**inputs, num_items_in_batch=1000).loss, plain)


def check_shift_labels(model, inputs):
    """Labels already shifted (Trainer under context parallelism) give the loss of the unshifted labels."""
    labels = inputs.pop("labels")
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].contiguous()
    with torch.no_grad():
        expected = model(**inputs, labels=labels).loss
        torch.testing.assert_close(model(**inputs, shift_labels=shifted).loss, expected)


HONOURED_CHECKS = {"num_items_in_batch": check_num_items_in_batch, "shift_labels": check_shift_labels}
HONOURED = [(case, key) for case in MODEL_CASES for key in sorted(case[1]._honoured_kwargs)]


def test_every_honoured_key_has_a_check():
    assert {key for _, key in HONOURED} <= set(HONOURED_CHECKS)


@pytest.mark.parametrize("case, key", HONOURED, ids=[f"{case_id(c)}-{k}" for c, k in HONOURED])
def test_honoured_keyword_arguments_are_honoured(case, key):
    model = build(case)
    HONOURED_CHECKS[key](model, make_inputs(model))
