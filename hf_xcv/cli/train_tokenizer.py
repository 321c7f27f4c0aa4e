#!/usr/bin/env python
"""Train the joint source/target tokenizer of a translation model and save it for ``from_pretrained``.

    hf-xcv-train tokenizer --builtin_numbers 20000 --vocab_size 1000 --output runs/numbers-tokenizer
    hf-xcv-train tokenizer --corpus train.en train.de --vocab_size 8000 --model unigram --output tok

(``python -m hf_xcv.train tokenizer ...``; in a checkout also ``python training/train_tokenizer.py ...``.)

``--corpus`` reads text files with one sentence per line (blank lines skipped); give the files of both languages,
since the vocabulary is shared. ``--builtin_numbers N`` trains on both sides of the train split of
``hf_xcv.data.load_number_translation_dataset(train_size=N)``, the sentences a model on that corpus will see.

The folder is written atomically: the tokenizer is saved to a temporary folder beside ``--output``, which then takes
its place, so an interrupted run never leaves a half-written tokenizer. An existing non-empty ``--output`` is
replaced only with ``--overwrite``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hf_xcv.models.transformer.tokenization_transformer import TransformerTokenizerFast


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", nargs="+", metavar="FILE", help="text files, one sentence per line")
    source.add_argument("--builtin_numbers", type=int, metavar="N", help="train on N pairs of the number corpus")
    parser.add_argument("--source_lang", default="en", help="source language of --builtin_numbers")
    parser.add_argument("--target_lang", default="fr", help="target language of --builtin_numbers")
    parser.add_argument("--seed", type=int, default=0, help="seed of --builtin_numbers")
    parser.add_argument("--vocab_size", type=int, default=8000, help="most tokens, the 260 reserved ones included")
    parser.add_argument("--model", choices=("bpe", "unigram"), default="bpe")
    parser.add_argument("--min_frequency", type=int, default=2, help="fewest occurrences of a BPE merge")
    parser.add_argument("--model_max_length", type=int, default=512, help="default truncation length")
    parser.add_argument("--output", required=True, type=Path, help="folder to save the tokenizer to")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --output")
    args = parser.parse_args(argv)
    problem = _output_problem(args.output, args.overwrite)
    if problem:
        parser.error(problem)
    for path in args.corpus or []:
        if not Path(path).is_file():
            parser.error(f"--corpus {path} is not a file")
    if args.builtin_numbers is not None and args.builtin_numbers < 1:
        parser.error(f"--builtin_numbers must be positive, got {args.builtin_numbers}")
    return args


def _output_problem(output: Path, overwrite: bool) -> str | None:
    """Why ``output`` may not be written, or None."""
    if output.exists() and not output.is_dir():
        return f"--output {output} is a file"
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        return f"--output {output} is not empty; pass --overwrite to replace it"
    return None


def read_corpus(paths: Sequence[str | os.PathLike]) -> Iterator[str]:
    """The non-blank lines of the files, without their line ends."""
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.rstrip("\r\n")
                if line.strip():
                    yield line


def builtin_number_corpus(size: int, source_lang: str, target_lang: str, seed: int) -> list[str]:
    """Both sides of the train split of the built-in number corpus."""
    from hf_xcv.data import load_number_translation_dataset

    train = load_number_translation_dataset(source_lang, target_lang, train_size=size, seed=seed)["train"]
    return [pair[lang] for pair in train["translation"] for lang in (source_lang, target_lang)]


def save_atomically(tokenizer: TransformerTokenizerFast, output: Path) -> None:
    """Save to a temporary folder beside ``output``, then swap it in; the old ``output`` goes only at the end."""
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.new-", dir=output.parent))
    trash = Path(tempfile.mkdtemp(prefix=f".{output.name}.old-", dir=output.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp makes the folder private; give it the permissions mkdir would
        tokenizer.save_pretrained(staging)
        if output.exists():
            os.rename(output, trash / output.name)
        try:
            os.rename(staging, output)
        except OSError:
            if (trash / output.name).exists():
                os.rename(trash / output.name, output)  # put the old folder back
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(trash, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> TransformerTokenizerFast:
    args = parse_args(argv)
    # Imported after the argument checks: hf_xcv loads torch, which takes seconds a usage error should not wait.
    from hf_xcv.models.transformer.tokenization_transformer import train_tokenizer

    if args.corpus:
        texts = read_corpus(args.corpus)
    else:
        texts = builtin_number_corpus(args.builtin_numbers, args.source_lang, args.target_lang, args.seed)
    tokenizer = train_tokenizer(
        texts,
        vocab_size=args.vocab_size,
        model=args.model,
        min_frequency=args.min_frequency,
        model_max_length=args.model_max_length,
    )
    save_atomically(tokenizer, args.output)
    print(f"saved a {args.model} tokenizer of {len(tokenizer)} tokens to {args.output}")
    return tokenizer


if __name__ == "__main__":
    try:
        main()
    except ValueError as err:  # a bad --vocab_size, an empty corpus, ...: the message says which
        sys.exit(f"error: {err}")
