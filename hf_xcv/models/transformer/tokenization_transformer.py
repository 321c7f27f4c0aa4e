"""Tokenizer of the vanilla Transformer: one subword vocabulary shared by source and target, and never ``<unk>``.

The ids of the first 260 tokens are fixed, whatever the corpus:

    0 ``<pad>``, 1 ``<s>``, 2 ``</s>``, 3 ``<unk>``, 4..259 the bytes ``<0x00>``..``<0xFF>``, 260.. learned subwords.

Whitespace is SentencePiece's: the Metaspace pre-tokenizer writes every space as ``▁`` and starts every word with
one; the Metaspace decoder turns them back into spaces. A character the vocabulary lacks (an emoji, a CJK or
accented character unseen in training) is encoded as the bytes of its UTF-8 form (byte fallback) and the
ByteFallback decoder joins them again, so ``<unk>`` is never produced.

No normalisation is applied: text is neither Unicode-normalised nor lower-cased, so
``decode(tokenizer(text).input_ids, skip_special_tokens=True) == text`` for any text that does not start with a
space (a leading space merges with the ``▁`` that starts every sequence and is lost). The one character that cannot
round-trip is ``▁`` (U+2581) itself, which decodes as a space, as in SentencePiece. Text that looks like a special
token (``"</s>"``) is encoded as plain text (``split_special_tokens=True``), so inputs cannot inject control tokens.

Every sequence, source or target, ends with ``</s>`` (a post-processor); none starts with ``<s>``, which is left to
the model (as the decoder's start token, for instance).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import TokenizersBackend

from ...remote_code import RemoteCodeMixin
from ...utils.errors import UsageError

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)  # ids 0..3
BYTE_TOKENS = tuple(f"<0x{value:02X}>" for value in range(256))  # ids 4..259
NUM_RESERVED_TOKENS = len(SPECIAL_TOKENS) + len(BYTE_TOKENS)
TOKENIZER_MODELS = ("bpe", "unigram")

_SPACE = "\u2581"  # ▁, SentencePiece's visible space
# The characters the reserved tokens are spelled with: the unigram model needs them as pieces so that the literal
# text "<0x41>" or "</s>" is segmented into characters rather than read as a reserved token (see _finalise_unigram).
_RESERVED_CHARS = sorted(set("".join(SPECIAL_TOKENS + BYTE_TOKENS)))


class TransformerTokenizerFast(RemoteCodeMixin, TokenizersBackend):
    """Fast tokenizer of :class:`~hf_xcv.TransformerConfig` models, built by :func:`train_tokenizer`.

    A ``tokenizers`` backend with byte fallback (see the module docstring for the vocabulary layout and the round
    trip guarantee). ``tokenizer(sources, text_target=targets)`` returns ``input_ids``, ``attention_mask`` and
    ``labels``, each ending with ``</s>``; padding is on the right with ``<pad>`` (id 0).

    Whether ``<s>`` and ``</s>`` are added is fixed by the class (never and always), not a setting, so a tokenizer
    reloaded with ``from_pretrained`` cannot silently lose its ``</s>``.
    """

    vocab_files_names = {"tokenizer_file": "tokenizer.json"}
    model_input_names = ["input_ids", "attention_mask"]
    padding_side = "right"
    truncation_side = "right"

    # No __init__ here on purpose: transformers 5 hands ``tokenizer.json`` to the backend as is only for classes
    # that do not define one; for the others it rebuilds a plain BPE/Unigram from the vocabulary, which would drop
    # the Metaspace pre-tokenizer and the byte fallback.

    @property
    def can_save_slow_tokenizer(self) -> bool:
        # There is no slow tokenizer; True would make save_pretrained record tokenizer_class "TransformerTokenizer".
        return False

    @property
    def add_bos_token(self) -> bool:
        return False

    @add_bos_token.setter
    def add_bos_token(self, value: bool) -> None:
        if value:
            raise UsageError(f"{type(self).__name__} never prepends {BOS_TOKEN}: sequences only end with {EOS_TOKEN}")

    @property
    def add_eos_token(self) -> bool:
        return True

    @add_eos_token.setter
    def add_eos_token(self, value: bool) -> None:
        if not value:
            raise UsageError(f"{type(self).__name__} always appends {EOS_TOKEN}, to sources and targets alike")


def _untrained_backend(model: str) -> Tokenizer:
    """An empty ``tokenizers.Tokenizer`` with the Metaspace pre-tokenizer and the byte-fallback decoder."""
    if model == "bpe":
        backend = Tokenizer(models.BPE(unk_token=UNK_TOKEN, byte_fallback=True))
    else:
        backend = Tokenizer(models.Unigram())
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_SPACE, prepend_scheme="always", split=True)
    # Bytes first: <0xE2><0x82><0xAC> -> "€"; then ▁ -> space, dropping the one that starts the sequence.
    backend.decoder = decoders.Sequence(
        [decoders.ByteFallback(), decoders.Metaspace(replacement=_SPACE, prepend_scheme="always", split=True)]
    )
    return backend


def _trainer(model: str, vocab_size: int, min_frequency: int) -> trainers.Trainer:
    reserved = list(SPECIAL_TOKENS + BYTE_TOKENS)  # given first, so they take ids 0..259 in this order
    if model == "bpe":
        # Rare characters beyond the budget are left to byte fallback rather than overflow vocab_size.
        return trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=reserved,
            limit_alphabet=vocab_size - NUM_RESERVED_TOKENS,
            show_progress=False,
        )
    return trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=reserved,
        unk_token=UNK_TOKEN,
        initial_alphabet=_RESERVED_CHARS,
        show_progress=False,
    )


def _finalise_unigram(model_json: dict) -> None:
    """Make the reserved pieces unreachable from text: their score sinks below any segmentation into characters.

    Unlike BPE, which only builds tokens by merges, the unigram model matches every piece against the text, and the
    trainer scores the reserved ones 0, the best score there is.
    """
    vocab = model_json["vocab"]  # [[piece, log-probability], ...]
    lowest = min(score for _, score in vocab[NUM_RESERVED_TOKENS:])
    # The characters of a reserved piece are pieces too, each scoring at least `lowest` (< 0): spelling the piece
    # out always beats reading it whole.
    unreachable = max(len(token) for token in SPECIAL_TOKENS + BYTE_TOKENS) * lowest - 100.0
    for entry in vocab[:NUM_RESERVED_TOKENS]:
        entry[1] = unreachable
    model_json["unk_id"] = SPECIAL_TOKENS.index(UNK_TOKEN)


def _finalise(backend: Tokenizer, model: str) -> Tokenizer:
    """The trained backend with byte fallback on, only the four real special tokens special, and ``</s>`` appended.

    The trainer registers every reserved token as a special added token; byte tokens must stay ordinary vocabulary,
    or ``skip_special_tokens=True`` would drop them from decoded text.
    """
    state = json.loads(backend.to_str())
    state["added_tokens"] = [token for token in state["added_tokens"] if token["content"] in SPECIAL_TOKENS]
    state["model"]["byte_fallback"] = True  # the unigram trainer does not keep the flag
    if model == "unigram":
        _finalise_unigram(state["model"])
    backend = Tokenizer.from_str(json.dumps(state))
    for expected_id, token in enumerate(SPECIAL_TOKENS + BYTE_TOKENS):
        if backend.token_to_id(token) != expected_id:
            raise RuntimeError(f"{token} has id {backend.token_to_id(token)}, expected {expected_id}")
    eos_id = SPECIAL_TOKENS.index(EOS_TOKEN)
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A:0 {EOS_TOKEN}:0",
        pair=f"$A:0 {EOS_TOKEN}:0 $B:1 {EOS_TOKEN}:1",
        special_tokens=[(EOS_TOKEN, eos_id)],
    )
    return backend


def _check_training_arguments(corpus: list[str], vocab_size: int, model: str, min_frequency: int) -> None:
    if model not in TOKENIZER_MODELS:
        raise UsageError(f"model must be one of {TOKENIZER_MODELS}, got {model!r}")
    if not any(corpus):
        raise UsageError("texts is empty: the tokenizer needs at least one non-empty sentence to train on")
    if not isinstance(vocab_size, int) or vocab_size <= NUM_RESERVED_TOKENS:
        raise UsageError(
            f"vocab_size must be an int above {NUM_RESERVED_TOKENS} ({len(SPECIAL_TOKENS)} special tokens and "
            f"{len(BYTE_TOKENS)} byte tokens) to leave room for subwords, got {vocab_size!r}"
        )
    if not isinstance(min_frequency, int) or min_frequency < 0:
        raise UsageError(f"min_frequency must be a non-negative int, got {min_frequency!r}")
    if model == "unigram":
        # The unigram trainer keeps every character of the corpus as a piece, budget or not.
        characters = set(" ".join(corpus).replace(" ", _SPACE)) | set(_RESERVED_CHARS)
        if vocab_size < NUM_RESERVED_TOKENS + len(characters):
            raise UsageError(
                f"vocab_size={vocab_size} is too small for model='unigram' on this corpus: its "
                f"{len(characters)} distinct characters each need a piece, so vocab_size must be at least "
                f"{NUM_RESERVED_TOKENS + len(characters)} (model='bpe' leaves rare characters to byte fallback)"
            )


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    model: str = "bpe",
    min_frequency: int = 2,
    model_max_length: int = 512,
) -> TransformerTokenizerFast:
    """Train a joint source/target vocabulary with the ``tokenizers`` library.

    Args:
        texts: Sentences of both languages (the vocabulary is shared, so train on sources and targets together).
            Held in memory while training.
        vocab_size: Most tokens in the vocabulary, the 260 reserved ones included; a small corpus may give fewer.
        model: ``"bpe"`` (byte-pair encoding) or ``"unigram"`` (SentencePiece's unigram language model), both with
            byte fallback.
        min_frequency: Fewest occurrences of a pair for BPE to merge it; the unigram trainer has no such threshold
            and ignores it.
        model_max_length: Length ``truncation=True`` cuts sequences to when no ``max_length`` is given.

    Returns:
        The trained tokenizer, ready for ``save_pretrained``.

    Raises:
        ValueError: If an argument is out of range, the corpus is empty, or (unigram) ``vocab_size`` cannot hold
            every character of the corpus.
    """
    if isinstance(texts, str):
        raise TypeError("texts must be an iterable of sentences, got a single str")
    corpus = [text for text in texts if text]
    _check_training_arguments(corpus, vocab_size, model, min_frequency)
    if not isinstance(model_max_length, int) or model_max_length < 1:
        raise UsageError(f"model_max_length must be a positive int, got {model_max_length!r}")
    backend = _untrained_backend(model)
    backend.train_from_iterator(corpus, _trainer(model, vocab_size, min_frequency), length=len(corpus))
    return TransformerTokenizerFast(
        tokenizer_object=_finalise(backend, model),
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=model_max_length,
        split_special_tokens=True,
        clean_up_tokenization_spaces=False,
    )
