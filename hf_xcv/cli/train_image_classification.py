#!/usr/bin/env python
"""Train an hf_xcv image classifier (ViT or Swin) with accelerate: one CPU, several processes, or several GPUs.

    hf-xcv-train image-classification --output_dir runs/digits        (or python -m hf_xcv.train ...)
    hf-xcv-train image-classification --preset swin-digits --output_dir runs/swin-digits
    accelerate launch --multi_gpu --num_processes 2 -m hf_xcv.train image-classification --output_dir runs/ddp
    torchrun --nproc_per_node 2 -m hf_xcv.train image-classification --output_dir runs/ddp

In a checkout, ``python training/train_image_classification.py ...`` runs the same script.

Checkpoints are atomic (see hf_xcv.training.checkpointing); ``--resume_from_checkpoint latest``
continues a stopped run exactly where it stopped. The final folder (model, processor, README.md
model card with the measured results) is ready for the Hub; ``--push_to_hub`` uploads it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from datasets import DatasetDict, load_dataset, load_from_disk
from huggingface_hub import ModelCard
from torch.utils.data import DataLoader
from transformers import AutoImageProcessor, HfArgumentParser

import hf_xcv
import hf_xcv.conversion
from hf_xcv.configuration_utils import check_known_fields
from hf_xcv.data import (
    ImageClassificationCollator,
    check_classification_dataset,
    encode_labels,
    image_classification_transform,
    load_digits_dataset,
    random_shift,
)
from hf_xcv.data.checks import DataReport, card_line
from hf_xcv.data.image_classification import DROP_OPTION
from hf_xcv.layers import to_pair
from hf_xcv.metrics import Accuracy, TopKAccuracy
from hf_xcv.training import TEMPLATES, TrainerState, parameter_groups, runner

from ..utils.errors import UsageError

TEMPLATE = TEMPLATES / "image_classification.md"


@dataclass
class ModelArguments:
    preset: str | None = field(
        default=None,
        metadata={
            "help": "named configuration from hf_xcv.PRESETS (a ViT or Swin one); vit-digits without it and "
            "--model_name_or_path"
        },
    )
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "fine-tune this checkpoint (hf_xcv, or transformers ViT / Swin) instead of a preset"},
    )
    attention_type: str | None = field(default=None, metadata={"help": "override the attention_type"})
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "config fields: 'hidden_dropout_prob=0.1,drop_path_rate=0.1' or a JSON object"},
    )
    attn_implementation: str = field(default="sdpa", metadata={"help": "sdpa, eager, flash_attention_2, ..."})


@dataclass
class DataArguments:
    dataset: str = field(
        default="digits", metadata={"help": "'digits' (built in), an imagefolder path, or a save_to_disk DatasetDict"}
    )
    image_column: str = "image"
    label_column: str = "label"
    max_shift: int = field(default=2, metadata={"help": "random translation in pixels at model resolution (train)"})
    max_train_samples: int | None = None
    eval_split: str = field(default="validation", metadata={"help": "split evaluated during training"})
    test_split: str = field(default="test", metadata={"help": "split of the final, reported evaluation"})
    train_validation_split: float | None = field(
        default=None,
        metadata={"help": "hold out this fraction of train as the validation split (class folders without splits)"},
    )
    train_test_split: float | None = field(
        default=None, metadata={"help": "hold out this fraction of train as the test split (stratified, seeded)"}
    )
    drop_invalid_images: bool = field(
        default=False,
        metadata={
            "help": "drop the images that do not decode or whose label is not a class, instead of refusing the "
            "dataset; the count is logged, and recorded in all_results.json and the model card"
        },
    )


@dataclass
class TrainArguments(runner.RunArguments):
    weight_decay: float = 0.05
    warmup_ratio: float = 0.1
    eval_every_epochs: int = 25


def parse_args(argv: list[str] | None = None) -> tuple[ModelArguments, DataArguments, TrainArguments]:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainArguments))
    return parser.parse_args_into_dataclasses(args=argv)


def load_data(args: DataArguments, seed: int) -> DatasetDict:
    """The dataset with the splits used (the train split cut to ``max_train_samples``), labels encoded."""
    if args.dataset == "digits":
        data = load_digits_dataset(seed=seed)
    elif Path(args.dataset, "dataset_dict.json").exists():
        data = load_from_disk(args.dataset)
    else:
        data = load_dataset("imagefolder", data_dir=args.dataset)
    if args.train_validation_split or args.train_test_split:
        data = encode_labels(data, args.label_column)  # a ClassLabel to stratify by
    held_out = {args.eval_split: args.train_validation_split, args.test_split: args.train_test_split}
    splits = ("train", args.eval_split, args.test_split)
    data = runner.require_splits(data, args.dataset, splits, args.max_train_samples, held_out, seed, args.label_column)
    return encode_labels(data, args.label_column)  # one id per class over all splits


def check_data(data: DatasetDict, args: DataArguments, progress: bool = True) -> tuple[DatasetDict, DataReport]:
    """The splits used, every image decoded and every label checked (:func:`check_classification_dataset`: refused
    naming every problem, or with ``--drop_invalid_images`` the invalid rows dropped); and what was dropped."""
    data = DatasetDict({split: data[split] for split in dict.fromkeys(("train", args.eval_split, args.test_split))})
    data, report = check_classification_dataset(
        data, args.image_column, args.label_column, args.dataset, drop_invalid=args.drop_invalid_images,
        progress=progress,
    )  # fmt: skip
    if report.problems:
        print(report.summary(DROP_OPTION, annotations=False))
    return data, report


# The model types this script trains (those with an image classifier), and the source types converted on load.
def classifier_types() -> dict[str, Any]:
    """model_type (hf_xcv's and the converted sources') -> the hf_xcv ModelEntry with an image classifier."""
    from hf_xcv.registry import MODEL_TYPES, converted_types

    return {
        source: MODEL_TYPES[target]
        for source, target in converted_types().items()
        if "AutoModelForImageClassification" in MODEL_TYPES[target].heads
    }


def family_of(args: ModelArguments) -> Any:
    """The ModelEntry of the model to train: the preset's, or the checkpoint's (hf_xcv or convertible)."""
    entries = classifier_types()
    if args.model_name_or_path:
        model_type = hf_xcv.conversion.load_config_dict(args.model_name_or_path).get("model_type")
        if model_type not in entries:
            raise UsageError(
                f"{args.model_name_or_path} holds a {model_type!r} model; this script trains {sorted(entries)}"
            )
        return entries[model_type]
    fitting = sorted(name for name, preset in hf_xcv.PRESETS.items() if preset.model_type in entries)
    if args.preset and args.preset not in hf_xcv.PRESETS:
        raise UsageError(f"unknown preset {args.preset!r}; available presets: {fitting}")
    model_type = hf_xcv.PRESETS[args.preset].model_type if args.preset else "xcv_vit"
    if model_type not in entries:
        raise UsageError(
            f"preset {args.preset!r} makes a {model_type} model; this script needs an image classifier's preset: "
            f"{fitting}"
        )
    return entries[model_type]


def build_model_and_processor(args: ModelArguments, labels: list[str]) -> tuple[torch.nn.Module, Any]:
    """A fresh model from a preset, or a checkpoint with a new head for ``labels``; and its processor."""
    if args.model_name_or_path and args.preset:
        raise UsageError("pass either --preset or --model_name_or_path, not both")
    id2label = dict(enumerate(labels))
    overrides: dict[str, Any] = {
        "num_labels": len(labels),
        "id2label": id2label,
        "label2id": {v: k for k, v in id2label.items()},
    }
    if args.attention_type:
        overrides["attention_type"] = args.attention_type
    overrides.update(runner.parse_overrides(args.config_overrides))
    entry = family_of(args)
    check_known_fields(entry.config, overrides)
    classifier = entry.heads["AutoModelForImageClassification"]
    if args.model_name_or_path:
        processor = AutoImageProcessor.from_pretrained(args.model_name_or_path)
        model = classifier.from_pretrained(
            args.model_name_or_path,
            ignore_mismatched_sizes=True,  # only the task head may be re-initialised (checked on load)
            attn_implementation=args.attn_implementation,
            **overrides,
        )
        return model, processor
    config = hf_xcv.preset_config(args.preset or "vit-digits", entry.model_type, **overrides)
    config._attn_implementation = args.attn_implementation
    return classifier(config), entry.image_processor.for_image_size(to_pair(config.image_size))


def build_dataloaders(
    data: DatasetDict, processor: Any, data_args: DataArguments, args: TrainArguments, num_channels: int
) -> list[DataLoader]:
    """Train, eval and test loaders of images with the model's channels, normalised for the model."""
    transform = image_classification_transform(
        processor, data_args.image_column, data_args.label_column, num_channels=num_channels
    )
    splits = [data[split].with_transform(transform) for split in ("train", data_args.eval_split, data_args.test_split)]
    return runner.build_dataloaders(splits, args, ImageClassificationCollator())


def build_optimizer(
    model: torch.nn.Module, args: TrainArguments, total_steps: int
) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW without decay on biases, norms, [CLS], positions and relative bias tables; warm-up + schedule."""
    optimizer = torch.optim.AdamW(parameter_groups(model, args.weight_decay), lr=args.learning_rate)
    warmup_steps = int(args.warmup_ratio * total_steps)
    return optimizer, runner.build_scheduler(optimizer, args.lr_scheduler_type, warmup_steps, total_steps)


def reporter(
    accelerator: Accelerator, model: torch.nn.Module, eval_dl: DataLoader, every_epochs: int, split: str
) -> Callable[[TrainerState, bool], None]:
    """Validation accuracy every ``every_epochs`` epochs (the loop reseeds per step: this changes nothing)."""

    def report(state: TrainerState, epoch_ended: bool) -> None:
        if epoch_ended and every_epochs and state.epoch % every_epochs == 0:
            results = evaluate_split(accelerator, model, eval_dl)
            accelerator.print(f"epoch {state.epoch} step {state.completed_steps}: {split} {results}")

    return report


def augmented_loss(model: torch.nn.Module, max_shift: int, fill: list[float]) -> Callable[[dict], torch.Tensor]:
    """batch -> loss of the randomly shifted images (``fill``: a black pixel, normalised, per channel)."""

    def loss_of(batch: dict) -> torch.Tensor:
        pixels = random_shift(batch["pixel_values"], max_shift, fill)
        return model(pixel_values=pixels, labels=batch["labels"]).loss

    return loss_of


@torch.no_grad()
def evaluate_split(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader) -> dict[str, float]:
    """Accuracy (and top-5 with >= 5 classes) over the whole split, gathered from every process."""
    model.eval()
    logits, labels = [], []
    for batch in loader:
        out = model(pixel_values=batch["pixel_values"]).logits
        out, ref = accelerator.gather_for_metrics((out.float(), batch["labels"]))
        logits.append(out.cpu())
        labels.append(ref.cpu())
    logits, labels = torch.cat(logits), torch.cat(labels)
    results = Accuracy().compute(predictions=logits.argmax(-1).tolist(), references=labels.tolist())
    if logits.shape[1] >= 5:
        results.update(TopKAccuracy().compute(predictions=logits.tolist(), references=labels.tolist(), k=5))
    results["num_samples"] = len(labels)
    return results


def model_card(
    model: torch.nn.Module,
    results: dict[str, Any],
    args: TrainArguments,
    model_args: ModelArguments,
    data_args: DataArguments,
    argv: list[str],
) -> ModelCard:
    split = data_args.test_split
    return runner.run_model_card(
        TEMPLATE, model, args, results, argv, task="image-classification", split=split,
        metrics={k: v for k, v in results[split].items() if k != "num_samples"}, dataset=data_args.dataset,
        built_in=("digits", "sklearn-digits"), base_model=model_args.model_name_or_path,
        template_vars={"dropped": card_line(results.get("data"), DROP_OPTION)},
    )  # fmt: skip


@runner.distributed_main
def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    model_args, data_args, args = parse_args(argv)
    data = load_data(data_args, args.seed)  # before the run folder is claimed: a bad dataset leaves nothing behind
    data, data_report = check_data(data, data_args, not args.disable_tqdm)
    accelerator, out = runner.start_run(args, model=model_args, data=data_args)
    with runner.setting_up(accelerator, out):
        model, processor = build_model_and_processor(model_args, data["train"].features[data_args.label_column].names)
        loaders = build_dataloaders(data, processor, data_args, args, model.config.num_channels)
        parts, state, (eval_dl, test_dl) = runner.prepare_loop(
            accelerator, out, args, model, loaders, lambda model, total_steps: build_optimizer(model, args, total_steps)
        )
    model = parts.model  # prepared by accelerate
    fill = [-m / s for m, s in zip(processor.image_mean, processor.image_std)]  # a black pixel, normalised
    report = reporter(accelerator, model, eval_dl, args.eval_every_epochs, data_args.eval_split)
    state, stopped = runner.train_loop(parts, state, args, augmented_loss(model, data_args.max_shift, fill), report)
    if stopped:
        return None
    scores = {
        data_args.eval_split: functools.partial(evaluate_split, accelerator, model, eval_dl),
        data_args.test_split: functools.partial(evaluate_split, accelerator, model, test_dl),
    }
    card_for = functools.partial(model_card, args=args, model_args=model_args, data_args=data_args, argv=argv)
    dropped = data_report.as_dict(annotations=False) if data_args.drop_invalid_images else None
    return runner.finish(parts, state, args, scores, [processor], card_for, data_report=dropped)


if __name__ == "__main__":
    main()
