"""Random Marian models and tokenizers, for the conversion and export tests of the Transformer."""

from __future__ import annotations

import json

import sentencepiece as spm
import torch
from transformers import MarianConfig, MarianMTModel, MarianTokenizer

CORPUS = [
    "the cat sat on the mat",
    "a dog runs in the park",
    "le chat est assis sur le tapis",
    "un chien court dans le parc",
    "numbers like one two three four five",
    "un deux trois quatre cinq six sept",
] * 10


def marian_config(**overrides) -> MarianConfig:
    settings = dict(
        vocab_size=60,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=59,
        decoder_start_token_id=59,
        eos_token_id=0,
        forced_eos_token_id=0,
        scale_embedding=True,
        activation_function="swish",  # what opus-mt models use
    )
    return MarianConfig(**{**settings, **overrides})


def random_marian(cls=MarianMTModel, seed: int = 0, **overrides):
    """A Marian model with weights large enough that beam search has real choices to make."""
    torch.manual_seed(seed)
    model = cls(marian_config(**overrides)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("weight") and "norm" not in name and "embed_positions" not in name:
                param.normal_(std=0.3)
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_(std=0.5)
    return model


def build_marian_tokenizer(folder) -> MarianTokenizer:
    """A real MarianTokenizer (sentencepiece models + vocab.json) trained on a toy corpus, saved into ``folder``."""
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(CORPUS))
    prefix = folder / "spm"
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=40, model_type="unigram", minloglevel=2
    )
    processor = spm.SentencePieceProcessor(model_file=f"{prefix}.model")
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = 59
    (folder / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = MarianTokenizer(f"{prefix}.model", f"{prefix}.model", str(folder / "vocab.json"))
    corpus.unlink()
    return tokenizer
