"""TransformerTokenizerFast and train_tokenizer: fixed special ids, byte fallback, round trips, save/load, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from subprocess import PIPE

import pytest

from hf_xcv.models.transformer.tokenization_transformer import (
    BYTE_TOKENS,
    TransformerTokenizerFast,
    train_tokenizer,
)

CORPUS = [
    "the cat sat on the mat",
    "le chat est assis sur le tapis",
    "the dog sleeps in the garden",
    "le chien dort dans le jardin",
    "two hundred and thirty-four",
    "deux cent trente-quatre",
    "a small house near the river",
    "une petite maison près de la rivière",
] * 20

ROUND_TRIP_TEXTS = [
    "the cat sat on the mat",  # seen in training
    "Ça coûte déjà 5 € à Zürich",  # accented letters and a symbol never seen
    "東京は晴れです",  # CJK never seen
    "thumbs 👍🏽 and a family 👨\u200d👩\u200d👧",  # emoji with a skin tone and zero-width joiners
    "tabs\tand\nnew lines",
    "two  spaces and a trailing one ",
    "literal <0x41> and </s> and <pad> stay text",
    "Ελληνικά и кириллица",
]


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def tokenizer(request) -> TransformerTokenizerFast:
    return train_tokenizer(CORPUS, vocab_size=400, model=request.param, min_frequency=2, model_max_length=16)


def test_special_and_byte_tokens_have_fixed_ids(tokenizer):
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (
        0,
        1,
        2,
        3,
    )
    assert [tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token] == [
        "<pad>",
        "<s>",
        "</s>",
        "<unk>",
    ]
    assert tokenizer.convert_tokens_to_ids(list(BYTE_TOKENS)) == list(range(4, 260))
    assert sorted(tokenizer.all_special_ids) == [0, 1, 2, 3]  # byte tokens are vocabulary, not special
    assert 260 < len(tokenizer) <= 400  # learned subwords after the reserved ids, within the budget
    assert tokenizer.model_input_names == ["input_ids", "attention_mask"]
    assert tokenizer.padding_side == "right"


def test_every_sequence_ends_with_eos_and_none_starts_with_bos(tokenizer):
    ids = tokenizer("the cat sat").input_ids
    assert ids[-1] == tokenizer.eos_token_id and ids.count(tokenizer.eos_token_id) == 1
    assert ids[0] != tokenizer.bos_token_id
    assert tokenizer("").input_ids == [tokenizer.eos_token_id]
    batch = tokenizer(["the cat", "le chat"], text_target=["le chat", "the cat"])
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["labels"] == [tokenizer("le chat").input_ids, tokenizer("the cat").input_ids]
    assert all(labels[-1] == tokenizer.eos_token_id for labels in batch["labels"])


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_round_trip_is_exact_and_never_unk(tokenizer, text):
    ids = tokenizer(text).input_ids
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.decode(ids) == text + "</s>"


def test_unseen_characters_become_their_utf8_bytes(tokenizer):
    emoji = "🦜"
    ids = tokenizer(f"the {emoji}").input_ids
    assert ids[-5:-1] == [4 + byte for byte in emoji.encode("utf-8")]  # <0xF0> <0x9F> <0xA6> <0x9C>
    assert tokenizer.convert_ids_to_tokens(ids[-5:-1]) == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x9C>"]
    # learned words stay subwords: the training corpus needs no byte fallback
    assert all(i >= 260 or i == tokenizer.eos_token_id for i in tokenizer("le chien dort dans le jardin").input_ids)


def test_literal_special_token_text_is_not_a_control_token(tokenizer):
    ids = tokenizer("</s> <s> <pad> <unk>").input_ids
    assert ids.count(tokenizer.eos_token_id) == 1 and ids[-1] == tokenizer.eos_token_id
    assert not {tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.unk_token_id} & set(ids)


def test_batch_padding_and_truncation(tokenizer):
    texts = ["the cat", "une petite maison près de la rivière"]
    batch = tokenizer(texts, padding=True)
    short, long = batch["input_ids"]
    assert len(short) == len(long) > len(tokenizer(texts[0]).input_ids)
    n = len(tokenizer(texts[0]).input_ids)
    assert short[n:] == [0] * (len(short) - n)  # right padding with <pad> = 0
    assert batch["attention_mask"][0] == [1] * n + [0] * (len(short) - n)
    assert batch["attention_mask"][1] == [1] * len(long)
    assert tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True) == texts

    cut = tokenizer(texts, max_length=5, truncation=True)["input_ids"]
    assert [len(ids) for ids in cut] == [min(5, n), 5]
    assert cut[1][-1] == tokenizer.eos_token_id  # truncation keeps the end-of-sequence token
    assert cut[1][:4] == tokenizer(texts[1]).input_ids[:4]
    padded = tokenizer(texts, padding="max_length", max_length=12, truncation=True)["input_ids"]
    assert [len(ids) for ids in padded] == [12, 12]

    very_long = " ".join(["the cat sat on the mat"] * 10)
    assert len(tokenizer(very_long).input_ids) > tokenizer.model_max_length == 16
    assert len(tokenizer(very_long, truncation=True).input_ids) == 16  # model_max_length is the default limit


def test_save_and_reload_gives_identical_ids(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "TransformerTokenizerFast"
    reloaded = TransformerTokenizerFast.from_pretrained(tmp_path)
    assert type(reloaded) is TransformerTokenizerFast
    assert reloaded.get_vocab() == tokenizer.get_vocab()
    assert reloaded.model_max_length == 16
    assert reloaded(ROUND_TRIP_TEXTS).input_ids == tokenizer(ROUND_TRIP_TEXTS).input_ids
    encoded = reloaded(ROUND_TRIP_TEXTS, text_target=ROUND_TRIP_TEXTS, padding=True)
    assert encoded["labels"] == encoded["input_ids"]
    assert reloaded.batch_decode(encoded["input_ids"], skip_special_tokens=True) == ROUND_TRIP_TEXTS
    # the end-of-sequence rule is the class's, not a setting a reload or a rebuild of the template could lose
    reloaded.update_post_processor()
    assert reloaded(ROUND_TRIP_TEXTS).input_ids == tokenizer(ROUND_TRIP_TEXTS).input_ids
    with pytest.raises(ValueError, match="always appends"):
        reloaded.add_eos_token = False
    with pytest.raises(ValueError, match="never prepends"):
        reloaded.add_bos_token = True


def test_bpe_budget_leaves_rare_characters_to_bytes():
    rare = "".join(chr(0x4E00 + i) for i in range(200))  # 200 distinct characters, more than the budget
    tokenizer = train_tokenizer(CORPUS + [rare], vocab_size=300, model="bpe")
    assert len(tokenizer) <= 300
    ids = tokenizer(rare).input_ids
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == rare


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"vocab_size": 260}, ValueError, "vocab_size must be an int above 260"),
        ({"vocab_size": 300.0}, ValueError, "vocab_size"),
        ({"model": "wordpiece"}, ValueError, "model must be one of"),
        ({"texts": []}, ValueError, "texts is empty"),
        ({"texts": ["", ""]}, ValueError, "texts is empty"),
        ({"texts": "a single string"}, TypeError, "texts must be an iterable of sentences"),
        ({"min_frequency": -1}, ValueError, "min_frequency"),
        ({"model_max_length": 0}, ValueError, "model_max_length"),
        # unigram keeps every character as a piece: 200 CJK characters cannot fit in 300
        (
            {"model": "unigram", "vocab_size": 300, "texts": ["".join(chr(0x4E00 + i) for i in range(200))]},
            ValueError,
            "vocab_size=300 is too small for model='unigram'",
        ),
    ],
)
def test_training_arguments_are_validated(kwargs, error, message):
    arguments = {"texts": CORPUS, "vocab_size": 400, **kwargs}
    with pytest.raises(error, match=message):
        train_tokenizer(**arguments)


def test_cli_trains_saves_atomically_and_refuses_to_overwrite(tmp_path, subprocess_env, repo_root):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS[:8]) + "\n\n", encoding="utf-8")
    from_file, numbers = tmp_path / "from-file", tmp_path / "numbers"
    numbers.mkdir()
    (numbers / "keep.txt").write_text("not a tokenizer")

    def start(*args: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "training.train_tokenizer", *args]
        return subprocess.Popen(command, cwd=repo_root, env=subprocess_env, stdout=PIPE, stderr=PIPE, text=True)

    refused = start("--builtin_numbers", "50", "--output", str(numbers))
    _, stderr = refused.communicate(timeout=60)
    assert refused.returncode == 2 and "is not empty; pass --overwrite" in stderr
    assert (numbers / "keep.txt").exists()

    # the two real runs (each loads torch) side by side
    jobs = [
        start("--corpus", str(corpus), "--vocab_size", "300", "--min_frequency", "1", "--output", str(from_file)),
        start(
            "--builtin_numbers",
            "200",
            "--vocab_size",
            "500",
            "--model",
            "unigram",
            "--output",
            str(numbers),
            "--overwrite",
        ),
    ]
    for job in jobs:
        stdout, stderr = job.communicate(timeout=120)
        assert job.returncode == 0, stderr
        assert "saved a" in stdout

    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "from-file", "numbers"]  # no temp folders
    assert not (numbers / "keep.txt").exists()
    file_tokenizer = TransformerTokenizerFast.from_pretrained(from_file)
    assert file_tokenizer.decode(file_tokenizer("le chat 🐈").input_ids, skip_special_tokens=True) == "le chat 🐈"
    number_tokenizer = TransformerTokenizerFast.from_pretrained(numbers)
    assert type(number_tokenizer.backend_tokenizer.model).__name__ == "Unigram"
    ids = number_tokenizer("deux cent mille").input_ids  # learned French number words need no byte fallback
    assert ids[-1] == 2 and all(i >= 260 for i in ids[:-1])
