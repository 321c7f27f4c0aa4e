"""hf_xcv.metrics against hand-computed values; offline by construction."""

from __future__ import annotations

import evaluate
import numpy as np
import pytest

from hf_xcv.metrics import Accuracy, TopKAccuracy


def test_accuracy_hand_computed():
    # 3 of 5 right
    result = Accuracy().compute(predictions=[0, 1, 2, 3, 4], references=[0, 1, 2, 0, 0])
    assert result == {"accuracy": pytest.approx(0.6)}
    assert Accuracy().compute(predictions=[0, 1, 2, 3, 4], references=[0, 1, 2, 0, 0], normalize=False) == {
        "accuracy": 3.0
    }


def test_accuracy_with_sample_weights():
    # right answers weigh 1 + 3, wrong 2: 4 / 6
    result = Accuracy().compute(predictions=[1, 0, 1], references=[1, 1, 1], sample_weight=[1, 2, 3])
    assert result["accuracy"] == pytest.approx(4 / 6)


def test_accuracy_accumulates_batches_and_combines():
    metric = Accuracy()
    metric.add_batch(predictions=[1, 2], references=[1, 2])
    metric.add_batch(predictions=[0, 0], references=[1, 0])
    assert metric.compute()["accuracy"] == pytest.approx(0.75)
    combined = evaluate.combine([Accuracy()])
    assert combined.compute(predictions=[1, 1], references=[1, 0]) == {"accuracy": 0.5}


def test_top_k_hand_computed():
    scores = [
        [0.1, 0.6, 0.3],  # ranking 1, 2, 0
        [0.5, 0.2, 0.3],  # ranking 0, 2, 1
        [0.2, 0.2, 0.6],  # ranking 2, then the tie 0/1 broken towards 0
    ]
    references = [2, 1, 1]
    assert TopKAccuracy().compute(predictions=scores, references=references, k=1) == {"top1_accuracy": 0.0}
    # k=2: sample 0 hit (2 in {1,2}); sample 1 miss (1 not in {0,2}); sample 2 miss (1 not in {2,0})
    assert TopKAccuracy().compute(predictions=scores, references=references, k=2)["top2_accuracy"] == pytest.approx(
        1 / 3
    )
    assert TopKAccuracy().compute(predictions=scores, references=references, k=3)["top3_accuracy"] == 1.0


def test_top_1_equals_accuracy_of_the_argmax():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(50, 7))
    references = rng.integers(0, 7, size=50)
    top1 = TopKAccuracy().compute(predictions=scores.tolist(), references=references.tolist(), k=1)["top1_accuracy"]
    accuracy = Accuracy().compute(predictions=scores.argmax(1).tolist(), references=references.tolist())["accuracy"]
    assert top1 == pytest.approx(accuracy)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"predictions": [[0.1, 0.9]], "references": [1], "k": 3}, "k must be in"),
        ({"predictions": [[0.1, 0.9]], "references": [5], "k": 1}, "class ids"),
        ({"predictions": [], "references": [], "k": 1}, "empty"),
    ],
)
def test_top_k_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TopKAccuracy().compute(**kwargs)


def test_accuracy_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        Accuracy().compute(predictions=[], references=[])


def test_top_k_defaults_to_five_or_every_class():
    scores = [[0.1, 0.7, 0.2], [0.8, 0.1, 0.1]]
    assert TopKAccuracy().compute(predictions=scores, references=[2, 1]) == {"top3_accuracy": 1.0}
    five = [[float(i == j) for i in range(6)] for j in range(6)]
    assert TopKAccuracy().compute(predictions=five, references=list(range(6))) == {"top5_accuracy": 1.0}
