"""The built-in number translation corpus and the batch tokenization for translation models."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from datasets import Translation, Value
from num2words import num2words

from hf_xcv.data import load_number_translation_dataset, tokenize_translation_batch
from hf_xcv.data.translation import sample_numbers
from hf_xcv.models.transformer.tokenization_transformer import train_tokenizer

SIZES = {"train": 2000, "validation": 200, "test": 200}


@pytest.fixture(scope="module")
def numbers():
    return load_number_translation_dataset(train_size=2000, validation_size=200, test_size=200, seed=0)


@pytest.fixture(scope="module")
def tokenizer(numbers):
    texts = [text for pair in numbers["train"]["translation"] for text in pair.values()]
    return train_tokenizer(texts, vocab_size=500)


def test_splits_sizes_and_features(numbers):
    assert {name: len(split) for name, split in numbers.items()} == SIZES
    features = numbers["train"].features
    assert isinstance(features["translation"], Translation) and features["translation"].languages == ["en", "fr"]
    assert features["number"] == Value("int64") and features["id"] == Value("string")
    for name, split in numbers.items():
        assert split["id"] == [f"{name}-{index}" for index in range(len(split))]


def test_pairs_are_the_numbers_written_out(numbers):
    for split in numbers.values():
        for row in split.select(range(50)):
            assert row["translation"] == {
                "en": num2words(row["number"], lang="en"),
                "fr": num2words(row["number"], lang="fr"),
            }


def test_held_out_numbers_are_in_one_split_only(numbers):
    sets = {name: set(split["number"]) for name, split in numbers.items()}
    for name, split in numbers.items():
        assert len(sets[name]) == len(split)  # no number twice within a split
        assert min(sets[name]) >= 0 and max(sets[name]) <= 999_999
    assert not sets["train"] & sets["validation"]
    assert not sets["train"] & sets["test"]
    assert not sets["validation"] & sets["test"]


def test_every_magnitude_is_represented(numbers):
    digits = {name: Counter(len(str(n)) for n in split["number"]) for name, split in numbers.items()}
    assert set(digits["train"]) == {1, 2, 3, 4, 5, 6}
    for name, size in SIZES.items():
        for count in (3, 4, 5, 6):  # the digit counts with enough numbers get about a quarter each
            assert digits[name][count] >= 0.15 * size, (name, digits[name])
    # uniform sampling on 0..999,999 would give ~90% six-digit numbers
    assert digits["train"][6] < 0.35 * SIZES["train"]


def test_sample_numbers_gives_small_magnitudes_their_share():
    sample = sample_numbers(100, 999, np.random.default_rng(0))
    assert len(set(sample)) == 100
    # 100 // 3 = 33 per digit count; only 10 one-digit numbers exist, so the other two take 45 each
    assert Counter(len(str(n)) for n in sample) == {1: 10, 2: 45, 3: 45}
    assert set(range(10)) <= set(sample)
    assert sample != sorted(sample)  # shuffled, so consecutive slices are random splits


def test_whole_range_is_used_when_the_sizes_ask_for_it():
    data = load_number_translation_dataset(train_size=80, validation_size=10, test_size=10, max_number=99)
    assert sorted(n for split in data.values() for n in split["number"]) == list(range(100))
    pairs = {row["number"]: row["translation"] for split in data.values() for row in split}
    assert pairs[21] == {"en": "twenty-one", "fr": "vingt et un"}
    assert pairs[80] == {"en": "eighty", "fr": "quatre-vingts"}
    assert pairs[0] == {"en": "zero", "fr": "zéro"}


def test_deterministic_for_a_seed(numbers):
    again = load_number_translation_dataset(train_size=2000, validation_size=200, test_size=200, seed=0)
    for name in SIZES:
        assert again[name].to_dict() == numbers[name].to_dict()
    other = load_number_translation_dataset(train_size=2000, validation_size=200, test_size=200, seed=1)
    assert other["test"]["number"] != numbers["test"]["number"]


def test_other_languages_and_empty_held_out_splits():
    data = load_number_translation_dataset("de", "es", train_size=20, validation_size=0, test_size=5, seed=3)
    assert data["train"].features["translation"].languages == ["de", "es"]
    assert len(data["validation"]) == 0 and len(data["test"]) == 5
    row = data["test"][0]
    assert row["translation"] == {"de": num2words(row["number"], lang="de"), "es": num2words(row["number"], lang="es")}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source_lang": "xx"}, "source_lang='xx' is not a language of num2words"),
        ({"target_lang": "klingon"}, "target_lang='klingon' is not a language of num2words"),
        ({"source_lang": "fr", "target_lang": "fr"}, "source_lang and target_lang must differ"),
        ({"train_size": 0}, "train_size must be a positive int"),
        ({"validation_size": -1}, "validation_size must be a non-negative int"),
        ({"test_size": 2.5}, "test_size must be a non-negative int"),
        ({"max_number": -1}, "max_number must be an int"),
        ({"max_number": 10**30}, "max_number must be an int"),
        ({"train_size": 95, "validation_size": 5, "test_size": 1, "max_number": 99}, "101 distinct numbers do not fit"),
    ],
)
def test_bad_arguments(kwargs, message):
    arguments = {"train_size": 10, "validation_size": 2, "test_size": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        load_number_translation_dataset(**arguments)


def test_tokenize_translation_batch_maps_to_model_inputs(numbers, tokenizer):
    split = numbers["validation"]
    encoded = split.map(
        tokenize_translation_batch,
        batched=True,
        fn_kwargs={"tokenizer": tokenizer, "source_lang": "en", "target_lang": "fr"},
        remove_columns=split.column_names,
    )
    assert encoded.column_names == ["input_ids", "attention_mask", "labels"]
    for row, pair in zip(encoded.select(range(20)), split["translation"][:20]):
        assert row["input_ids"] == tokenizer(pair["en"]).input_ids
        assert row["attention_mask"] == [1] * len(row["input_ids"])  # unpadded: a collator pads per batch
        assert row["labels"] == tokenizer(pair["fr"]).input_ids
        assert tokenizer.decode(row["labels"], skip_special_tokens=True) == pair["fr"]


def test_tokenize_translation_batch_truncates_each_side_to_its_limit(numbers, tokenizer):
    batch = numbers["test"][:16]
    full = tokenize_translation_batch(batch, tokenizer, "fr", "en")
    assert full["labels"][0] == tokenizer(batch["translation"][0]["en"]).input_ids  # the reverse direction
    cut = tokenize_translation_batch(batch, tokenizer, "fr", "en", max_source_length=5, max_target_length=3)
    eos = [tokenizer.eos_token_id]
    for key, limit in (("input_ids", 5), ("labels", 3)):
        assert any(len(ids) > limit for ids in full[key])
        for whole, short in zip(full[key], cut[key]):
            assert short == (whole if len(whole) <= limit else whole[: limit - 1] + eos)
    assert [len(mask) for mask in cut["attention_mask"]] == [len(ids) for ids in cut["input_ids"]]


def test_tokenize_translation_batch_errors(numbers, tokenizer):
    batch = numbers["test"][:4]
    with pytest.raises(KeyError, match="target_lang='de' is missing"):
        tokenize_translation_batch(batch, tokenizer, "en", "de")
    with pytest.raises(KeyError, match="no 'translation' column"):
        tokenize_translation_batch({"text": ["a"]}, tokenizer, "en", "fr")
    with pytest.raises(ValueError, match="max_source_length must be a positive int"):
        tokenize_translation_batch(batch, tokenizer, "en", "fr", max_source_length=0)


def test_translation_texts_returns_one_side_in_row_order():
    from hf_xcv.data import translation_texts

    data = load_number_translation_dataset(train_size=20, validation_size=5, test_size=5, max_number=999)
    pairs = data["test"]["translation"]
    assert translation_texts(data["test"], "fr") == [pair["fr"] for pair in pairs]
    assert translation_texts(data["test"], "en") == [pair["en"] for pair in pairs]
