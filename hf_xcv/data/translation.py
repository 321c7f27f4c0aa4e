"""A built-in parallel corpus, numbers written out in two languages, and the batch tokenization for translation.

``load_number_translation_dataset()`` pairs sentences such as "one hundred and twenty-three" with "cent
vingt-trois", made by num2words, so a translation model can be trained and evaluated fully offline. The task is
small but not trivial: word order, agreement and irregular forms differ between languages, and the validation and
test numbers are held out from training, so a model must generalise rather than memorise.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict, Features, Translation, Value

from ..utils.errors import MissingColumnError, UsageError

SPLITS = ("train", "validation", "test")
MAX_NUMBER_LIMIT = 10**18 - 1  # the largest with every bucket bound (up to 10**18) inside int64


def _digit_buckets(max_number: int) -> list[tuple[int, int]]:
    """Inclusive ranges of the numbers 0..max_number with 1, 2, 3, ... digits."""
    buckets, low = [], 0
    for digits in range(1, len(str(max_number)) + 1):
        high = min(10**digits - 1, max_number)
        buckets.append((low, high))
        low = high + 1
    return buckets


def _bucket_quotas(capacities: list[int], total: int) -> list[int]:
    """As even a share of ``total`` per bucket as the capacities allow; small buckets give their surplus away."""
    quotas = [0] * len(capacities)
    remaining = total
    order = sorted(range(len(capacities)), key=lambda index: capacities[index])
    for position, index in enumerate(order):
        quotas[index] = min(capacities[index], remaining // (len(order) - position))
        remaining -= quotas[index]
    return quotas


def _draw_distinct(rng: np.random.Generator, low: int, high: int, count: int) -> list[int]:
    """``count`` distinct integers drawn uniformly from [low, high]."""
    size = high - low + 1
    if 2 * count >= size:  # dense: shuffle the whole range
        return (low + rng.permutation(size)[:count]).tolist()
    drawn: dict[int, None] = {}  # insertion-ordered set, so the result is deterministic
    while len(drawn) < count:
        for number in rng.integers(low, high + 1, size=2 * (count - len(drawn))).tolist():
            drawn.setdefault(number)
    return list(drawn)[:count]


def sample_numbers(total: int, max_number: int, rng: np.random.Generator) -> list[int]:
    """``total`` distinct numbers of 0..max_number, about as many of each digit count, in random order.

    Uniform sampling on 0..999,999 would give 90% six-digit numbers; here every magnitude gets an even share,
    except those too small to fill it (there are only ten one-digit numbers), whose surplus goes to the others.
    """
    buckets = _digit_buckets(max_number)
    quotas = _bucket_quotas([high - low + 1 for low, high in buckets], total)
    numbers = [n for (low, high), count in zip(buckets, quotas) for n in _draw_distinct(rng, low, high, count)]
    return [numbers[i] for i in rng.permutation(len(numbers))]


def _num2words() -> ModuleType:
    try:
        import num2words
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("the number translation dataset needs num2words: pip install 'hf_xcv[translation]'") from err
    return num2words


def _check_languages(source_lang: str, target_lang: str) -> None:
    languages = _num2words().CONVERTER_CLASSES
    for name, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        if lang not in languages:
            raise UsageError(f"{name}={lang!r} is not a language of num2words; choose one of {sorted(languages)}")
    if source_lang == target_lang:
        raise UsageError(f"source_lang and target_lang must differ, both are {source_lang!r}")


def _check_sizes(train_size: int, validation_size: int, test_size: int, max_number: int) -> None:
    if not isinstance(max_number, int) or not 0 <= max_number <= MAX_NUMBER_LIMIT:
        raise UsageError(f"max_number must be an int in [0, {MAX_NUMBER_LIMIT}] (int64 numbers), got {max_number!r}")
    if not isinstance(train_size, int) or train_size < 1:
        raise UsageError(f"train_size must be a positive int, got {train_size!r}")
    for name, size in (("validation_size", validation_size), ("test_size", test_size)):
        if not isinstance(size, int) or size < 0:
            raise UsageError(f"{name} must be a non-negative int, got {size!r}")
    total = train_size + validation_size + test_size
    if total > max_number + 1:
        raise UsageError(
            f"train_size + validation_size + test_size = {total} distinct numbers do not fit in 0..{max_number}: "
            f"lower the sizes or raise max_number to at least {total - 1}"
        )


def _spell(numbers: list[int], lang: str) -> list[str]:
    spell = _num2words().num2words
    return [spell(number, lang=lang) for number in numbers]


def load_number_translation_dataset(
    source_lang: str = "en",
    target_lang: str = "fr",
    train_size: int = 20000,
    validation_size: int = 500,
    test_size: int = 500,
    max_number: int = 999_999,
    seed: int = 0,
) -> DatasetDict:
    """Numbers written out in two languages, split train / validation / test with no number in two splits.

    Args:
        source_lang: num2words language code of the source side (``"en"``, ``"fr"``, ``"de"``, ...).
        target_lang: Language code of the target side.
        train_size: Pairs in the train split.
        validation_size: Pairs in the validation split (may be 0).
        test_size: Pairs in the test split (may be 0).
        max_number: Largest number; the numbers are drawn from 0..max_number with every digit count about
            equally frequent (see :func:`sample_numbers`).
        seed: Seed of the draw; the same arguments always give the same dataset.

    Returns:
        A DatasetDict with columns ``translation`` (a ``Translation`` feature: ``{source_lang: ..., target_lang:
        ...}``), ``number`` (int64) and ``id`` (``"<split>-<index>"``).

    Raises:
        ValueError: If a language is unknown to num2words or both are the same, a size is out of range, the sizes
            add up to more numbers than 0..max_number holds, or num2words cannot spell max_number.
    """
    _check_languages(source_lang, target_lang)
    _check_sizes(train_size, validation_size, test_size, max_number)
    for lang in (source_lang, target_lang):
        try:
            _spell([max_number], lang)
        except (OverflowError, NotImplementedError, ValueError) as err:
            raise UsageError(f"max_number={max_number} is too large for num2words in {lang!r}: {err}") from err
    numbers = sample_numbers(train_size + validation_size + test_size, max_number, np.random.default_rng(seed))
    features = Features(
        {
            "translation": Translation(languages=[source_lang, target_lang]),
            "number": Value("int64"),
            "id": Value("string"),
        }
    )
    # Shuffled already, so consecutive slices are random splits with the same mix of magnitudes.
    bounds = np.cumsum([0, train_size, validation_size, test_size])
    splits = {}
    for name, start, stop in zip(SPLITS, bounds[:-1], bounds[1:]):
        part = numbers[start:stop]
        pairs = zip(_spell(part, source_lang), _spell(part, target_lang))
        data = {
            "translation": [{source_lang: source, target_lang: target} for source, target in pairs],
            "number": part,
            "id": [f"{name}-{index}" for index in range(len(part))],
        }
        splits[name] = Dataset.from_dict(data, features=features)
    return DatasetDict(splits)


def tokenize_translation_batch(
    batch: dict[str, list[Any]],
    tokenizer,
    source_lang: str,
    target_lang: str,
    max_source_length: int = 128,
    max_target_length: int = 128,
) -> dict[str, list[list[int]]]:
    """Tokenize a batch of ``translation`` pairs, for ``Dataset.map(batched=True)``.

    Sources become ``input_ids`` and ``attention_mask``, targets ``labels`` (through ``text_target=``), each cut to
    its own length limit and left unpadded: a collator pads per batch (and marks padded labels -100).

    Args:
        batch: A batch with a ``translation`` column of ``{language: text}`` dicts.
        tokenizer: A transformers tokenizer, e.g. ``TransformerTokenizerFast``.
        source_lang: Key of the source text in each pair.
        target_lang: Key of the target text in each pair.
        max_source_length: Most tokens of an input, the end-of-sequence token included.
        max_target_length: Most tokens of a label sequence, the end-of-sequence token included.

    Returns:
        ``{"input_ids", "attention_mask", "labels"}``, one list of ints per pair.
    """
    for name, length in (("max_source_length", max_source_length), ("max_target_length", max_target_length)):
        if not isinstance(length, int) or length < 1:
            raise UsageError(f"{name} must be a positive int, got {length!r}")
    if "translation" not in batch:
        raise MissingColumnError(f"the batch has no 'translation' column, only {sorted(batch)}")
    pairs = batch["translation"]
    for name, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        missing = [index for index, pair in enumerate(pairs) if lang not in pair]
        if missing:
            raise MissingColumnError(f"{name}={lang!r} is missing from the translation pairs {missing[:10]}")
    sources = [pair[source_lang] for pair in pairs]
    targets = [pair[target_lang] for pair in pairs]
    inputs = tokenizer(sources, max_length=max_source_length, truncation=True)
    labels = tokenizer(text_target=targets, max_length=max_target_length, truncation=True)
    return {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"], "labels": labels["input_ids"]}


def translation_texts(dataset: Dataset, lang: str) -> list[str]:
    """The ``lang`` side of a dataset's ``translation`` pairs, in row order."""
    return [pair[lang] for pair in dataset["translation"]]
