#!/usr/bin/env python
"""Train an hf_xcv Transformer for translation with accelerate: one CPU, several processes, or several GPUs.

    hf-xcv-train translation --output_dir runs/numbers        (or python -m hf_xcv.train translation ...)
    accelerate launch --multi_gpu --num_processes 2 -m hf_xcv.train translation --output_dir runs/ddp

In a checkout, ``python training/train_translation.py ...`` runs the same script.

By default it learns English -> French number words from the built-in corpus (``hf_xcv.data.translation``), with a
joint BPE vocabulary trained on the train split at the start (``--tokenizer`` takes an existing one), the paper's
Adam and learning-rate schedule, and label smoothing from the config. Validation and test splits are scored with
beam search, BLEU and chrF (sacrebleu). Checkpoints are atomic and ``--resume_from_checkpoint latest`` continues a
stopped run exactly; the final folder (model, tokenizer, generation config, README.md model card with the measured
results, all_results.json) is ready for the Hub, and ``--push_to_hub`` uploads it.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import torch
from accelerate import Accelerator
from datasets import Dataset, DatasetDict, load_dataset, load_from_disk
from huggingface_hub import ModelCard
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, DataCollatorForSeq2Seq, HfArgumentParser

import hf_xcv
from hf_xcv.configuration_utils import check_known_fields
from hf_xcv.data import load_number_translation_dataset, tokenize_translation_batch, translation_texts
from hf_xcv.metrics import Bleu, ChrF
from hf_xcv.model_card import quoted
from hf_xcv.training import TEMPLATES, TrainerState, runner
from hf_xcv.training.checkpointing import CHECKPOINTS

from ..utils.errors import UsageError

TEMPLATE = TEMPLATES / "translation.md"
BUILT_IN = "numbers"
DEFAULT_PRESET = "transformer-numbers"
TOKENIZER_DIR = "tokenizer"  # under checkpoints/: run state, like the checkpoints, not pushed to the Hub
NUM_EXAMPLES = 3  # translations kept in all_results.json per split


@dataclass
class ModelArguments:
    preset: str | None = field(
        default=None,
        metadata={
            "help": f"named configuration from hf_xcv.PRESETS; {DEFAULT_PRESET} without it and --model_name_or_path"
        },
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "fine-tune this checkpoint (hf_xcv or a transformers Marian) instead"}
    )
    config_overrides: str | None = field(
        default=None, metadata={"help": "config fields: 'dropout=0.3,label_smoothing=0.0' or a JSON object"}
    )
    attn_implementation: str = field(default="sdpa", metadata={"help": "sdpa or eager"})
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "tokenizer folder or Hub id; default: that of --model_name_or_path, else one trained here"},
    )
    tokenizer_vocab_size: int = field(default=1000, metadata={"help": "vocabulary of a tokenizer trained here"})
    tokenizer_model: str = field(default="bpe", metadata={"help": "bpe or unigram (a tokenizer trained here)"})


@dataclass
class DataArguments:
    dataset: str = field(
        default=BUILT_IN,
        metadata={"help": "'numbers' (built in), a save_to_disk DatasetDict, or a load_dataset name or folder"},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "configuration name for load_dataset"})
    source_lang: str = "en"
    target_lang: str = "fr"
    train_size: int = field(default=20000, metadata={"help": "pairs of the built-in train split"})
    validation_size: int = field(default=500, metadata={"help": "pairs of the built-in validation split"})
    test_size: int = field(default=500, metadata={"help": "pairs of the built-in test split"})
    dataset_seed: int = field(default=0, metadata={"help": "seed of the built-in corpus"})
    max_train_samples: int | None = None
    max_source_length: int | None = field(
        default=None, metadata={"help": "truncate sources to this many tokens (default: the model's positions)"}
    )
    max_target_length: int | None = field(
        default=None, metadata={"help": "truncate targets to this many tokens (default: the model's positions)"}
    )
    eval_split: str = field(default="validation", metadata={"help": "split evaluated during training"})
    test_split: str = field(default="test", metadata={"help": "split of the final, reported evaluation"})


@dataclass
class TrainArguments(runner.RunArguments):
    num_train_epochs: int = 10
    per_device_train_batch_size: int = 64
    per_device_eval_batch_size: int = 128
    lr_scheduler_type: str = field(
        default="noam", metadata={"help": "noam (the paper's) or a transformers get_scheduler name (linear, ...)"}
    )
    learning_rate: float = field(default=5e-4, metadata={"help": "peak rate of the get_scheduler schedules"})
    lr_factor: float = field(default=1.0, metadata={"help": "noam: factor * d_model^-0.5 * min(...)"})
    warmup_steps: int = 400
    weight_decay: float = 0.0
    eval_steps: int = field(default=0, metadata={"help": "score the eval split every N steps (0: only at the end)"})
    num_beams: int = 4
    max_new_tokens: int | None = field(
        default=None, metadata={"help": "generation limit (default: 64, or fewer if the model has fewer positions)"}
    )


def parse_args(argv: list[str] | None = None) -> tuple[ModelArguments, DataArguments, TrainArguments]:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainArguments))
    return parser.parse_args_into_dataclasses(args=argv)


def load_data(args: DataArguments) -> DatasetDict:
    """The splits, each with a ``translation`` column of ``{language: text}`` pairs."""
    if args.dataset == BUILT_IN:
        data = load_number_translation_dataset(
            args.source_lang, args.target_lang, args.train_size, args.validation_size, args.test_size,
            seed=args.dataset_seed,
        )  # fmt: skip
    elif Path(args.dataset, "dataset_dict.json").exists():
        data = load_from_disk(args.dataset)
    else:
        data = load_dataset(args.dataset, args.dataset_config)
    splits = ("train", args.eval_split, args.test_split)
    data = runner.require_splits(data, args.dataset, splits, args.max_train_samples)
    for split in splits:
        if "translation" not in data[split].column_names:
            raise UsageError(f"split {split!r} has no 'translation' column; columns: {data[split].column_names}")
    return data


def load_or_train_tokenizer(
    accelerator: Accelerator, model_args: ModelArguments, train: Dataset, data_args: DataArguments, out: Path
) -> Any:
    """The given tokenizer, or one trained on both sides of ``train`` by the main process and saved in the run
    (atomically), which every process then loads; a resumed run loads the one saved at its start."""
    path = model_args.tokenizer or model_args.model_name_or_path
    if path:
        return AutoTokenizer.from_pretrained(path)
    saved = out / CHECKPOINTS / TOKENIZER_DIR
    if accelerator.is_main_process and not saved.is_dir():
        texts = translation_texts(train, data_args.source_lang) + translation_texts(train, data_args.target_lang)
        tokenizer = hf_xcv.train_tokenizer(
            texts,
            vocab_size=model_args.tokenizer_vocab_size,
            model=model_args.tokenizer_model,
            model_max_length=max(data_args.max_source_length or 0, data_args.max_target_length or 0) or 512,
        )
        staging = saved.with_name(f".staging-{TOKENIZER_DIR}")
        shutil.rmtree(staging, ignore_errors=True)
        tokenizer.save_pretrained(staging)
        os.replace(staging, saved)
    accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(saved)


def special_token_ids(tokenizer: Any) -> dict[str, int]:
    """The config's token ids from the tokenizer; decoding starts with <s>, or with <pad> where there is none."""
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.pad_token_id
    return ids | {"bos_token_id": tokenizer.bos_token_id, "decoder_start_token_id": start}


def build_model(args: ModelArguments, tokenizer: Any) -> torch.nn.Module:
    """A fresh model from a preset sized to the tokenizer's vocabulary, or a checkpoint to fine-tune."""
    overrides = runner.parse_overrides(args.config_overrides)
    check_known_fields(hf_xcv.TransformerConfig, overrides)
    if args.model_name_or_path:
        if args.preset:
            raise UsageError("pass either --preset or --model_name_or_path, not both")
        model = hf_xcv.TransformerForConditionalGeneration.from_pretrained(
            args.model_name_or_path, attn_implementation=args.attn_implementation, **overrides
        )
        if len(tokenizer) > model.config.decoder_vocab_size:
            raise UsageError(
                f"the tokenizer has {len(tokenizer)} tokens, more than the model's vocabulary "
                f"({model.config.decoder_vocab_size}); fine-tune with the checkpoint's own tokenizer"
            )
        return model
    fields = {"vocab_size": len(tokenizer), **special_token_ids(tokenizer), **overrides}
    config = hf_xcv.preset_config(args.preset or DEFAULT_PRESET, hf_xcv.TransformerConfig.model_type, **fields)
    config._attn_implementation = args.attn_implementation
    return hf_xcv.TransformerForConditionalGeneration(config)


def check_lengths(model: torch.nn.Module, data_args: DataArguments, args: TrainArguments) -> None:
    """Fill in the length limits left unset from the model's positions, and fail at the start, not after
    training, when one that was given exceeds them."""
    limit = model.config.max_position_embeddings
    data_args.max_source_length = data_args.max_source_length or limit
    data_args.max_target_length = data_args.max_target_length or limit
    args.max_new_tokens = args.max_new_tokens or min(64, limit - 1)
    lengths = {
        "--max_source_length": data_args.max_source_length,
        "--max_target_length": data_args.max_target_length,
        "--max_new_tokens (+1 start token)": args.max_new_tokens + 1,
    }
    too_long = [f"{name} {value}" for name, value in lengths.items() if value > limit]
    if too_long:
        raise UsageError(f"{', '.join(too_long)} exceed the model's max_position_embeddings={limit}")


def configure_generation(model: torch.nn.Module, args: TrainArguments) -> None:
    """Beam search as evaluated, recorded in the model's generation_config.json."""
    model.generation_config.num_beams = args.num_beams
    model.generation_config.max_new_tokens = args.max_new_tokens


def tokenize_splits(data: DatasetDict, tokenizer: Any, args: DataArguments) -> DatasetDict:
    """Token ids of every split, plus ``index``: each row's position in its split (to score every row once)."""

    def encode(batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        ids = tokenize_translation_batch(
            batch, tokenizer, args.source_lang, args.target_lang, args.max_source_length, args.max_target_length
        )
        return ids | {"index": indices}

    splits = dict.fromkeys(("train", args.eval_split, args.test_split))  # ordered and distinct
    return DatasetDict(
        {
            split: data[split].map(encode, batched=True, with_indices=True, remove_columns=data[split].column_names)
            for split in splits
        }
    )


def build_dataloaders(
    encoded: DatasetDict, tokenizer: Any, data_args: DataArguments, args: TrainArguments
) -> list[DataLoader]:
    """Train, eval and test loaders of padded token ids (padded labels are -100: the loss ignores them)."""
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    splits = [encoded[split] for split in ("train", data_args.eval_split, data_args.test_split)]
    return runner.build_dataloaders(splits, args, collator)


def build_optimizer(
    model: torch.nn.Module, args: TrainArguments, total_steps: int
) -> tuple[torch.optim.Optimizer, Any]:
    """Adam with the paper's betas and epsilon; with noam the base rate is 1 and the schedule is the rate."""
    lr = 1.0 if args.lr_scheduler_type == "noam" else args.learning_rate
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=args.weight_decay
    )
    scheduler = runner.build_scheduler(
        optimizer, args.lr_scheduler_type, args.warmup_steps, total_steps, model.config.d_model, args.lr_factor
    )
    return optimizer, scheduler


def seq2seq_loss(model: torch.nn.Module) -> Callable[[dict], torch.Tensor]:
    """batch -> label-smoothed loss (teacher forcing; the model shifts the labels into decoder inputs)."""

    def loss_of(batch: dict) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss

    return loss_of


@torch.no_grad()
def translate(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader, tokenizer: Any):
    """Translations of every row of the loader's split, gathered from all processes: (row indices, texts).

    Each process generates its own shard; sequences are padded to a common length before the gather, and
    ``gather_for_metrics`` drops the rows accelerate repeated to even out the last batch.
    """
    model.eval()
    generator = accelerator.unwrap_model(model)
    indices, texts = [], []
    for batch in loader:
        generated = generator.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        generated = accelerator.pad_across_processes(generated, dim=1, pad_index=tokenizer.pad_token_id)
        generated, index = accelerator.gather_for_metrics((generated, batch["index"]))
        indices += index.tolist()
        texts += tokenizer.batch_decode(generated, skip_special_tokens=True)
    return indices, texts


def score_split(
    accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader, tokenizer: Any, split: Dataset, langs
) -> dict[str, Any]:
    """BLEU and chrF of the model's translations of ``split`` (every row exactly once), and a few examples."""
    indices, hypotheses = translate(accelerator, model, loader, tokenizer)
    if sorted(indices) != list(range(len(split))):
        raise RuntimeError(
            f"scored {len(indices)} translations ({len(set(indices))} distinct rows) of a split of {len(split)}"
        )
    sources, targets = translation_texts(split, langs[0]), translation_texts(split, langs[1])
    references = [targets[i] for i in indices]
    examples = [
        {"source": sources[i], "reference": targets[i], "hypothesis": text}
        for i, text in sorted(zip(indices, hypotheses))[:NUM_EXAMPLES]
    ]
    return {
        "bleu": Bleu().compute(predictions=hypotheses, references=references)["score"],
        "chrf": ChrF().compute(predictions=hypotheses, references=references)["score"],
        "num_samples": len(hypotheses),
        "examples": examples,
    }


def reporter(
    score: Callable[[], dict[str, Any]], accelerator: Accelerator, every_steps: int, split: str
) -> Callable[[TrainerState, bool], None]:
    """Scores the eval split every ``every_steps`` steps (the loop reseeds per step: this changes nothing)."""

    def report(state: TrainerState, epoch_ended: bool) -> None:
        if every_steps and state.completed_steps % every_steps == 0:
            results = score()
            accelerator.print(
                f"step {state.completed_steps}: {split} BLEU {results['bleu']:.2f} chrF {results['chrf']:.2f}"
            )

    return report


def model_card(
    model: torch.nn.Module,
    results: dict[str, Any],
    args: TrainArguments,
    model_args: ModelArguments,
    data_args: DataArguments,
    argv: list[str],
) -> ModelCard:
    test = results[data_args.test_split]
    langs = (data_args.source_lang, data_args.target_lang)
    names = {"dataset_name": "numbers written out (num2words)"} if data_args.dataset == BUILT_IN else {}
    example = test["examples"][0] if test["examples"] else {}
    return runner.run_model_card(
        TEMPLATE, model, args, results, argv, task="translation", split=data_args.test_split,
        metrics={metric: test[metric] for metric in ("bleu", "chrf")}, dataset=data_args.dataset,
        built_in=(BUILT_IN, f"num2words-numbers-{langs[0]}-{langs[1]}"), base_model=model_args.model_name_or_path,
        task_type="translation", pipeline_tag="translation", tags=("text", "seq2seq"), language=langs, **names,
        template_vars={
            "source_lang": langs[0], "target_lang": langs[1], "num_beams": args.num_beams,
            "example_source": quoted(example.get("source", "...")),
            "example_reference": quoted(example["reference"]) if example.get("reference") else None,
            "example_hypothesis": quoted(example["hypothesis"]) if example.get("hypothesis") else None,
        },
    )  # fmt: skip


@runner.distributed_main
def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    model_args, data_args, args = parse_args(argv)
    if args.disable_tqdm:
        datasets.disable_progress_bars()
    data = load_data(data_args)  # before the run folder is claimed: a bad dataset leaves nothing behind
    accelerator, out = runner.start_run(args, model=model_args, data=data_args)
    with runner.setting_up(accelerator, out):
        tokenizer = load_or_train_tokenizer(accelerator, model_args, data["train"], data_args, out)
        model = build_model(model_args, tokenizer)
        # truncation=True cuts to model_max_length: the positions of the model it is saved with
        tokenizer.model_max_length = model.config.max_position_embeddings
        check_lengths(model, data_args, args)
        configure_generation(model, args)
        loaders = build_dataloaders(tokenize_splits(data, tokenizer, data_args), tokenizer, data_args, args)
        parts, state, (eval_dl, test_dl) = runner.prepare_loop(
            accelerator, out, args, model, loaders, lambda model, total_steps: build_optimizer(model, args, total_steps)
        )
    model = parts.model  # prepared by accelerate
    langs = (data_args.source_lang, data_args.target_lang)
    score = functools.partial(score_split, accelerator, model, tokenizer=tokenizer, langs=langs)
    scores = {
        data_args.eval_split: functools.partial(score, eval_dl, split=data[data_args.eval_split]),
        data_args.test_split: functools.partial(score, test_dl, split=data[data_args.test_split]),
    }
    report = reporter(scores[data_args.eval_split], accelerator, args.eval_steps, data_args.eval_split)
    state, stopped = runner.train_loop(parts, state, args, seq2seq_loss(model), report)
    if stopped:
        return None
    card_for = functools.partial(model_card, args=args, model_args=model_args, data_args=data_args, argv=argv)
    return runner.finish(parts, state, args, scores, [tokenizer], card_for)


if __name__ == "__main__":
    main()
