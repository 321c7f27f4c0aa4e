"""Translation metrics (BLEU, chrF) as ``evaluate.Metric`` classes over sacrebleu, needing no Hub.

The scores are sacrebleu's own (``sacrebleu.BLEU`` / ``sacrebleu.CHRF``), not a re-implementation, so they equal
what ``sacrebleu`` prints for the same options, and the returned ``signature`` records those options.

predictions: one detokenized string per segment. references: one string per segment, or a list of strings per
segment (several references; the number may differ between segments).
"""

from __future__ import annotations

from types import ModuleType

import datasets
import evaluate

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""

_INPUTS = (
    "predictions: list of hypothesis strings; references: list of reference strings, or a list of lists of "
    "reference strings (several references per prediction, possibly a different number for each)."
)


def _sacrebleu() -> ModuleType:
    try:
        import sacrebleu
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("BLEU and chrF need sacrebleu: pip install 'hf_xcv[translation]'") from err
    return sacrebleu


def _features() -> list[datasets.Features]:
    """One reference per prediction, or a list of them; evaluate picks the format that matches the input."""
    prediction = datasets.Value("string", id="sequence")
    return [
        datasets.Features(
            {"predictions": prediction, "references": datasets.Sequence(datasets.Value("string", id="sequence"))}
        ),
        datasets.Features({"predictions": prediction, "references": datasets.Value("string", id="sequence")}),
    ]


def _reference_streams(references: list[str] | list[list[str]]) -> list[list[str | None]]:
    """Turn per-prediction references into sacrebleu's reference streams (one list of n strings per reference).

    Predictions with fewer references than the most any has are padded with ``None``, which sacrebleu skips, so
    ``[["a", "b"], ["c"]]`` becomes ``[["a", "c"], ["b", None]]``.
    """
    per_segment = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
    num_streams = max(len(refs) for refs in per_segment)
    return [[refs[k] if k < len(refs) else None for refs in per_segment] for k in range(num_streams)]


class _CorpusMetric(evaluate.Metric):
    """A sacrebleu corpus score; subclasses build the sacrebleu metric from the options and report its result.

    Inputs and options are checked before evaluate stores anything: an error inside ``_compute`` would leave
    evaluate's cache-file lock taken, and the next metric instance would wait a second for it. evaluate appends
    ``inputs_description`` to the docstrings of ``compute`` and ``add_batch``, so the overrides need one.
    """

    DESCRIPTION = ""
    FIELDS: tuple[str, ...] = ()  # attributes of sacrebleu's score object that compute returns

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=self.DESCRIPTION, citation=_CITATION, inputs_description=_INPUTS, features=_features()
        )

    def _scorer(self, **options):
        """The sacrebleu metric (``sacrebleu.BLEU``, ``sacrebleu.CHRF``) for these options, which it checks."""
        raise NotImplementedError

    def _summary(self, scorer, score) -> dict:
        return {**{name: getattr(score, name) for name in self.FIELDS}, "signature": str(scorer.get_signature())}

    def add_batch(self, *, predictions=None, references=None, **kwargs) -> None:
        """Add a batch of predictions and references; an empty batch adds nothing.\n"""
        if predictions is not None and references is not None:
            if len(predictions) != len(references):
                raise ValueError(f"got {len(predictions)} predictions but {len(references)} references")
            if len(predictions) == 0:
                return  # an empty last batch of an evaluation loop
            empty = [index for index, refs in enumerate(references) if not isinstance(refs, str) and len(refs) == 0]
            if empty:
                raise ValueError(f"every prediction needs at least one reference; predictions {empty[:10]} have none")
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def compute(self, *, predictions=None, references=None, **options) -> dict | None:
        """Score the corpus given here and added by ``add_batch``; other keyword arguments are options.\n"""
        self._scorer(**options)
        if (predictions is None) != (references is None):
            raise ValueError("give both predictions and references, or neither to score what add_batch added")
        nothing_added = self.writer is None
        if nothing_added and (predictions is None or (len(predictions) == 0 and len(references) == 0)):
            raise ValueError(f"{type(self).__name__} of no predictions is undefined: got an empty corpus")
        return super().compute(predictions=predictions, references=references, **options)

    def _compute(self, predictions, references, **options) -> dict:
        scorer = self._scorer(**options)
        return self._summary(scorer, scorer.corpus_score(list(predictions), _reference_streams(references)))


class Bleu(_CorpusMetric):
    """Corpus BLEU of sacrebleu.

    Options of ``compute``: ``tokenize`` (one of ``sacrebleu.BLEU.TOKENIZERS``, default ``"13a"``), ``lowercase``,
    ``smooth_method`` (``"exp"``, ``"floor"``, ``"add-k"`` or ``"none"``), ``smooth_value`` (for floor and add-k;
    ``None``: sacrebleu's default) and ``force`` (score text that looks tokenized without a warning).

    Returns ``score`` (0-100), n-gram ``counts`` and ``totals``, ``precisions`` (%), brevity penalty ``bp``,
    ``sys_len``, ``ref_len`` and sacrebleu's ``signature``.
    """

    DESCRIPTION = "BLEU of sacrebleu: n-gram precision with a brevity penalty, over the whole corpus."
    FIELDS = ("score", "counts", "totals", "precisions", "bp", "sys_len", "ref_len")

    def _scorer(
        self,
        tokenize: str = "13a",
        lowercase: bool = False,
        smooth_method: str = "exp",
        smooth_value: float | None = None,
        force: bool = False,
    ):
        sacrebleu = _sacrebleu()
        if tokenize not in sacrebleu.BLEU.TOKENIZERS:
            raise ValueError(f"tokenize must be one of {sorted(sacrebleu.BLEU.TOKENIZERS)}, got {tokenize!r}")
        if smooth_method not in sacrebleu.BLEU.SMOOTH_DEFAULTS:
            raise ValueError(
                f"smooth_method must be one of {list(sacrebleu.BLEU.SMOOTH_DEFAULTS)}, got {smooth_method!r}"
            )
        return sacrebleu.BLEU(
            tokenize=tokenize, lowercase=lowercase, smooth_method=smooth_method, smooth_value=smooth_value, force=force
        )


class ChrF(_CorpusMetric):
    """Corpus chrF (chrF++ with ``word_order=2``) of sacrebleu.

    Options of ``compute``: ``char_order`` (default 6), ``word_order`` (default 0), ``beta`` (weight of recall,
    default 2), ``lowercase`` and ``whitespace`` (keep spaces in the character n-grams).

    Returns ``score`` (0-100), the orders and ``beta`` it was computed with, and sacrebleu's ``signature``.
    """

    DESCRIPTION = "chrF of sacrebleu: F-score of character (and with word_order > 0, word) n-grams."
    FIELDS = ("score", "char_order", "word_order", "beta")

    def _scorer(
        self,
        char_order: int = 6,
        word_order: int = 0,
        beta: int = 2,
        lowercase: bool = False,
        whitespace: bool = False,
    ):
        for name, value in (("char_order", char_order), ("word_order", word_order), ("beta", beta)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if char_order + word_order == 0:
            raise ValueError("char_order and word_order are both 0: chrF needs n-grams of some order")
        return _sacrebleu().CHRF(
            char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase, whitespace=whitespace
        )
