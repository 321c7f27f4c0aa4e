"""Bleu and ChrF give exactly sacrebleu's numbers, for one or several references and every option."""

from __future__ import annotations

import evaluate
import pytest
import sacrebleu

from hf_xcv.metrics import Bleu, ChrF

PREDICTIONS = [
    "The cat sat on the mat.",
    "There is a dog in the garden!",
    "It rains today",
    "Bonjour le monde",
]
REFERENCES = [
    "The cat is sitting on the mat.",
    "A dog is in the garden.",
    "Today it is raining",
    "Bonjour tout le monde",
]
# 2, 2, 1 and 3 references per prediction
MULTI_REFERENCES = [
    ["The cat is sitting on the mat.", "the cat sat on the mat."],
    ["A dog is in the garden.", "There is a dog in the garden."],
    ["Today it is raining"],
    ["Bonjour tout le monde", "Salut le monde", "Bonjour, le monde"],
]
# the same, as sacrebleu's reference streams: one list per reference, None where a prediction has no more
MULTI_STREAMS = [
    ["The cat is sitting on the mat.", "A dog is in the garden.", "Today it is raining", "Bonjour tout le monde"],
    ["the cat sat on the mat.", "There is a dog in the garden.", None, "Salut le monde"],
    [None, None, None, "Bonjour, le monde"],
]


def sacrebleu_bleu(streams, **options) -> dict:
    bleu = sacrebleu.BLEU(**{"tokenize": "13a", **options})
    score = bleu.corpus_score(PREDICTIONS, streams)
    fields = ("score", "counts", "totals", "precisions", "bp", "sys_len", "ref_len")
    return {**{name: getattr(score, name) for name in fields}, "signature": str(bleu.get_signature())}


def sacrebleu_chrf(streams, **options) -> dict:
    chrf = sacrebleu.CHRF(**options)
    score = chrf.corpus_score(PREDICTIONS, streams)
    fields = ("score", "char_order", "word_order", "beta")
    return {**{name: getattr(score, name) for name in fields}, "signature": str(chrf.get_signature())}


def test_bleu_single_reference_equals_sacrebleu():
    result = Bleu().compute(predictions=PREDICTIONS, references=REFERENCES)
    assert result == sacrebleu_bleu([REFERENCES])
    assert result["score"] == sacrebleu.corpus_bleu(PREDICTIONS, [REFERENCES]).score
    assert 0 < result["score"] < 100
    assert result["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")


@pytest.mark.parametrize(
    ("options", "in_signature"),
    [
        ({"tokenize": "intl"}, "tok:intl"),
        ({"tokenize": "char"}, "tok:char"),
        ({"tokenize": "none"}, "tok:none"),
        ({"lowercase": True}, "case:lc"),
        ({"smooth_method": "floor", "smooth_value": 0.5}, "smooth:floor[0.50]"),
        ({"smooth_method": "add-k"}, "smooth:add-k[1.00]"),
        ({"smooth_method": "none"}, "smooth:none"),
        ({"force": True}, "tok:13a"),
    ],
)
def test_bleu_options_equal_sacrebleu(options, in_signature):
    result = Bleu().compute(predictions=PREDICTIONS, references=REFERENCES, **options)
    assert result == sacrebleu_bleu([REFERENCES], **options)
    assert in_signature in result["signature"]


def test_options_change_the_score():
    plain = Bleu().compute(predictions=PREDICTIONS, references=REFERENCES)["score"]
    assert Bleu().compute(predictions=PREDICTIONS, references=REFERENCES, tokenize="char")["score"] != plain
    # "the cat sat on the mat." matches "The cat ..." better once lowercased
    assert (
        Bleu().compute(predictions=PREDICTIONS, references=MULTI_REFERENCES, lowercase=True)["score"]
        > (Bleu().compute(predictions=PREDICTIONS, references=MULTI_REFERENCES)["score"])
    )


def test_bleu_several_references_of_different_counts_equal_sacrebleu():
    result = Bleu().compute(predictions=PREDICTIONS, references=MULTI_REFERENCES)
    assert result == sacrebleu_bleu(MULTI_STREAMS)
    assert result["signature"].startswith("nrefs:var|")
    assert result["score"] > Bleu().compute(predictions=PREDICTIONS, references=REFERENCES)["score"]
    # the same number of references everywhere: sacrebleu's usual streams, nrefs:2
    two = [refs[:2] if len(refs) > 1 else refs * 2 for refs in MULTI_REFERENCES]
    streams = [[refs[0] for refs in two], [refs[1] for refs in two]]
    assert Bleu().compute(predictions=PREDICTIONS, references=two) == sacrebleu_bleu(streams)


def test_identical_text_scores_100():
    # approx: sacrebleu's exp(mean(log p)) gives 100.00000000000004 for four precisions of 100
    assert Bleu().compute(predictions=REFERENCES, references=REFERENCES)["score"] == pytest.approx(100.0)
    assert ChrF().compute(predictions=REFERENCES, references=REFERENCES)["score"] == pytest.approx(100.0)


def test_chrf_equals_sacrebleu():
    result = ChrF().compute(predictions=PREDICTIONS, references=REFERENCES)
    assert result == sacrebleu_chrf([REFERENCES])
    assert result["score"] == sacrebleu.corpus_chrf(PREDICTIONS, [REFERENCES]).score
    assert (result["char_order"], result["word_order"], result["beta"]) == (6, 0, 2)


@pytest.mark.parametrize(
    ("options", "in_signature"),
    [
        ({"word_order": 2}, "nw:2"),  # chrF++
        ({"char_order": 4}, "nc:4"),
        ({"beta": 1}, "nc:6"),
        ({"lowercase": True}, "case:lc"),
        ({"whitespace": True}, "space:yes"),
        ({"char_order": 0, "word_order": 2}, "nc:0|nw:2"),
    ],
)
def test_chrf_options_equal_sacrebleu(options, in_signature):
    result = ChrF().compute(predictions=PREDICTIONS, references=REFERENCES, **options)
    assert result == sacrebleu_chrf([REFERENCES], **options)
    assert in_signature in result["signature"]
    assert result["score"] != ChrF().compute(predictions=PREDICTIONS, references=REFERENCES)["score"]


def test_chrf_several_references_equal_sacrebleu():
    result = ChrF().compute(predictions=PREDICTIONS, references=MULTI_REFERENCES, word_order=2)
    assert result == sacrebleu_chrf(MULTI_STREAMS, word_order=2)
    assert result["signature"].startswith("nrefs:var|")


def test_batches_accumulate_and_combine():
    metric = Bleu()
    metric.add_batch(predictions=PREDICTIONS[:3], references=MULTI_REFERENCES[:3])
    metric.add_batch(predictions=[], references=[])  # an empty last batch adds nothing
    metric.add_batch(predictions=PREDICTIONS[3:], references=MULTI_REFERENCES[3:])
    assert metric.compute() == Bleu().compute(predictions=PREDICTIONS, references=MULTI_REFERENCES)
    combined = evaluate.combine([Bleu(), ChrF()]).compute(predictions=PREDICTIONS, references=REFERENCES)
    assert combined["bleu_score"] == sacrebleu_bleu([REFERENCES])["score"]
    assert combined["chr_f_score"] == sacrebleu_chrf([REFERENCES])["score"]


@pytest.mark.parametrize("metric_class", [Bleu, ChrF])
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"predictions": PREDICTIONS, "references": REFERENCES[:3]}, "got 4 predictions but 3 references"),
        ({"predictions": PREDICTIONS[:1], "references": []}, "got 1 predictions but 0 references"),
        ({"predictions": [], "references": []}, "empty corpus"),
        ({}, "empty corpus"),
        ({"predictions": PREDICTIONS}, "give both predictions and references"),
        ({"predictions": ["a", "b"], "references": [["a"], []]}, r"predictions \[1\] have none"),
    ],
)
def test_bad_inputs(metric_class, kwargs, message):
    with pytest.raises(ValueError, match=message):
        metric_class().compute(**kwargs)


@pytest.mark.parametrize(
    ("metric_class", "options", "message"),
    [
        (Bleu, {"tokenize": "moses"}, "tokenize must be one of"),
        (Bleu, {"smooth_method": "laplace"}, "smooth_method must be one of"),
        (ChrF, {"char_order": 0, "word_order": 0}, "both 0"),
        (ChrF, {"beta": -1}, "beta must be a non-negative int"),
        (ChrF, {"word_order": 1.5}, "word_order must be a non-negative int"),
    ],
)
def test_bad_options(metric_class, options, message):
    with pytest.raises(ValueError, match=message):
        metric_class().compute(predictions=PREDICTIONS, references=REFERENCES, **options)


def test_unknown_option_is_an_error():
    with pytest.raises(TypeError, match="smoothing"):
        Bleu().compute(predictions=PREDICTIONS, references=REFERENCES, smoothing="exp")
