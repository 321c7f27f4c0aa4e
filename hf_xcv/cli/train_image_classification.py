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
import os
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
from hf_xcv.data.augment import RandomErasing, image_classification_train_transform
from hf_xcv.data.checks import DataReport, card_line
from hf_xcv.data.image_classification import DROP_OPTION
from hf_xcv.data.mixup import MixupCutmix
from hf_xcv.layers import to_pair
from hf_xcv.metrics import Accuracy, TopKAccuracy
from hf_xcv.training import TEMPLATES, TrainerState, layer_decay_parameter_groups, parameter_groups, runner
from hf_xcv.training.recipes import RECIPES, ClassificationRecipe, get_recipe

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
    rand_augment: str | None = field(
        default=None, metadata={"help": "RandAugment as timm's config string, e.g. rand-m9-mstd0.5-inc1 ('none': off)"}
    )
    crop_scale_min: float | None = field(
        default=None,
        metadata={
            "help": "random resized crop to the model's size with area in [this, 1] (0.08 in the recipes); unset with "
            "--hflip or --rand_augment: the largest centre square"
        },
    )
    hflip: float | None = field(
        default=None, metadata={"help": "probability of a horizontal flip (0.5 in the recipes)"}
    )
    random_erasing: float | None = field(
        default=None, metadata={"help": "probability of erasing a box with per-pixel noise (0.25 in the recipes)"}
    )
    mixup_alpha: float | None = field(default=None, metadata={"help": "Mixup's Beta(alpha, alpha) (0.8; 0: off)"})
    cutmix_alpha: float | None = field(default=None, metadata={"help": "CutMix's Beta(alpha, alpha) (1.0; 0: off)"})
    mix_prob: float | None = field(default=None, metadata={"help": "probability that a batch is mixed (1.0)"})
    mix_switch_prob: float | None = field(
        default=None, metadata={"help": "probability of CutMix rather than Mixup when both are on (0.5)"}
    )
    label_smoothing: float | None = field(default=None, metadata={"help": "label smoothing of the targets (0.1)"})
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
    recipe: str | None = field(
        default=None,
        metadata={
            "help": f"a paper's training recipe, {sorted(RECIPES)} (hf_xcv.training.recipes): sets every option it "
            "names that the command line does not"
        },
    )
    layer_decay: float | None = field(
        default=None, metadata={"help": "layer-wise learning-rate decay (0.75 in the finetune recipe; None: off)"}
    )
    drop_path_rate: float | None = field(
        default=None, metadata={"help": "stochastic depth of the model (a config field; set by a recipe)"}
    )


# Where a recipe's options live: the data arguments hold the augmentation, the training arguments the rest.
DATA_OPTIONS = ("rand_augment", "crop_scale_min", "hflip", "random_erasing", "mixup_alpha", "cutmix_alpha",
                "mix_prob", "mix_switch_prob", "label_smoothing")  # fmt: skip


PLAIN = {
    "hflip": 0.0,
    "random_erasing": 0.0,
    "mixup_alpha": 0.0,
    "cutmix_alpha": 0.0,
    "mix_prob": 1.0,
    "mix_switch_prob": 0.5,
    "label_smoothing": 0.0,
}  # fmt: skip  (without a recipe; crop_scale_min None: no crop)


def recipe_fields(data_args: DataArguments, args: TrainArguments) -> dict[str, Any]:
    """The config fields the training asks for: ``--drop_path_rate``, and a single-label problem type when the
    targets are soft (Mixup / CutMix / label smoothing: the loss is then the soft-target cross-entropy)."""
    fields: dict[str, Any] = {}
    if args.drop_path_rate is not None:
        fields["drop_path_rate"] = args.drop_path_rate
    if data_args.mixup_alpha or data_args.cutmix_alpha or data_args.label_smoothing:
        fields["problem_type"] = "single_label_classification"
    return fields


def given_options(argv: list[str]) -> set[str]:
    """The options the command line sets itself, by field name, however spelt: ``--name value``, ``--name=value``,
    the dashed alias ``--name-with-dashes`` and any unambiguous prefix, as the argument parser reads them."""
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainArguments))
    spellings = {string: action.dest for action in parser._actions for string in action.option_strings}
    given = set()
    for arg in argv:
        if not arg.startswith("--"):
            continue
        typed = arg.split("=", 1)[0]
        matches = {spellings[typed]} if typed in spellings else {d for s, d in spellings.items() if s.startswith(typed)}
        if len(matches) == 1:
            given |= matches
    return given


def apply_recipe(argv: list[str], data_args: DataArguments, args: TrainArguments) -> ClassificationRecipe | None:
    """``--recipe``: every option of the recipe the command line does not set takes the recipe's value (the learning
    rate scaled to the total batch: per-device batch x processes x accumulation). Then options still unset are
    off (no RandAugment, crop, erasing, mixing or smoothing: the script's plain training)."""
    recipe = get_recipe(args.recipe) if args.recipe else None
    if recipe is not None:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        total_batch = args.per_device_train_batch_size * world * args.gradient_accumulation_steps
        given = given_options(argv)
        for name, value in recipe.options(total_batch).items():
            if name in given:
                continue
            setattr(data_args if name in DATA_OPTIONS else args, name, value)
        if "max_shift" not in given:
            data_args.max_shift = 0  # the random resized crop replaces the plain shift
    if data_args.rand_augment in ("none", ""):
        data_args.rand_augment = None
    for name, value in PLAIN.items():
        if getattr(data_args, name) is None:
            setattr(data_args, name, value)
    return recipe


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


def build_model_and_processor(
    args: ModelArguments, labels: list[str], recipe_fields: dict[str, Any] | None = None
) -> tuple[torch.nn.Module, Any]:
    """A fresh model from a preset, or a checkpoint with a new head for ``labels``; and its processor.
    ``recipe_fields``: config fields the training sets (stochastic depth, soft-target loss), under
    ``--config_overrides``."""
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
    overrides.update(recipe_fields or {})
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


class EpochSeeded(torch.utils.data.Dataset):
    """The train split under a recipe's transform, each sample's draws seeded by (seed, epoch, index): the loop's
    ``set_epoch`` (accelerate passes it to the dataset) moves every sample to its next epoch's augmentation, and a
    resumed run, which skips batches without loading them, augments every later sample as the uninterrupted run."""

    INDEX = "__index__"

    def __init__(self, split: Any, transform: Any) -> None:
        self.transform = transform
        self.split = split.add_column(self.INDEX, list(range(len(split)))).with_transform(transform)

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.split[index]

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        return self.split.__getitems__(indices)

    def set_epoch(self, epoch: int) -> None:
        self.transform.set_epoch(epoch)


def build_dataloaders(
    data: DatasetDict, processor: Any, data_args: DataArguments, args: TrainArguments, num_channels: int
) -> list[DataLoader]:
    """Train, eval and test loaders of images with the model's channels, normalised for the model; the train split
    under the recipe's transform (random resized crop, flip, RandAugment) when one is asked for."""
    transform = image_classification_transform(
        processor, data_args.image_column, data_args.label_column, num_channels=num_channels
    )
    train = data["train"].with_transform(transform)
    if data_args.crop_scale_min is not None or data_args.rand_augment or data_args.hflip:
        augment = image_classification_train_transform(
            processor, data_args.image_column, data_args.label_column, num_channels,
            scale=(data_args.crop_scale_min if data_args.crop_scale_min is not None else 1.0, 1.0),
            ratio=(3 / 4, 4 / 3) if data_args.crop_scale_min is not None else (1.0, 1.0),
            hflip=data_args.hflip, auto_augment=data_args.rand_augment, re_prob=0.0,  # erasing: in the loss
            seed=args.seed, index_column=EpochSeeded.INDEX,
        )  # fmt: skip
        train = EpochSeeded(data["train"], augment)
    splits = [train] + [data[split].with_transform(transform) for split in (data_args.eval_split, data_args.test_split)]
    return runner.build_dataloaders(splits, args, ImageClassificationCollator())


def build_optimizer(
    model: torch.nn.Module, args: TrainArguments, total_steps: int
) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW without decay on biases, norms, [CLS], positions and relative bias tables (and with ``--layer_decay``,
    each block's learning rate decayed by its depth); warm-up + schedule."""
    if args.layer_decay:
        groups = layer_decay_parameter_groups(model, args.learning_rate, args.weight_decay, args.layer_decay)
    else:
        groups = parameter_groups(model, args.weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate)
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


def augmented_loss(
    model: torch.nn.Module, data_args: DataArguments, fill: list[float], num_labels: int
) -> Callable[[dict], torch.Tensor]:
    """batch -> loss of the augmented batch: randomly shifted (``--max_shift``; ``fill``: a black pixel, normalised,
    per channel), erased (``--random_erasing``), mixed (Mixup / CutMix) into soft targets with label smoothing.
    Inside the loss, these draws come from the generator the loop reseeds before every batch: they replay on
    resume."""
    erase = RandomErasing(data_args.random_erasing) if data_args.random_erasing else None
    mix = None
    if data_args.mixup_alpha or data_args.cutmix_alpha:
        mix = MixupCutmix(
            num_labels, mixup_alpha=data_args.mixup_alpha, cutmix_alpha=data_args.cutmix_alpha,
            prob=data_args.mix_prob, switch_prob=data_args.mix_switch_prob, label_smoothing=data_args.label_smoothing,
        )  # fmt: skip

    def loss_of(batch: dict) -> torch.Tensor:
        pixels, labels = random_shift(batch["pixel_values"], data_args.max_shift, fill), batch["labels"]
        if erase is not None:
            pixels = erase(pixels)
        if mix is not None:
            pixels, labels = mix(pixels, labels)  # soft targets: the model's problem_type is single-label
        elif data_args.label_smoothing:  # smoothed one-hot targets, as the mixer makes them
            smoothing = data_args.label_smoothing
            labels = torch.nn.functional.one_hot(labels, num_labels) * (1.0 - smoothing) + smoothing / num_labels
        return model(pixel_values=pixels, labels=labels).loss

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
    recipe: ClassificationRecipe | None = None,
) -> ModelCard:
    split = data_args.test_split
    return runner.run_model_card(
        TEMPLATE, model, args, results, argv, task="image-classification", split=split,
        metrics={k: v for k, v in results[split].items() if k != "num_samples"}, dataset=data_args.dataset,
        built_in=("digits", "sklearn-digits"), base_model=model_args.model_name_or_path,
        template_vars={"dropped": card_line(results.get("data"), DROP_OPTION),
                       "recipe": recipe_line(recipe, data_args)},
    )  # fmt: skip


def recipe_line(recipe: ClassificationRecipe | None, data_args: DataArguments) -> str:
    """The card's sentence on the training recipe and the augmentation the run used ("" for the plain training)."""
    parts = [f"RandAugment `{data_args.rand_augment}`"] if data_args.rand_augment else []
    if data_args.crop_scale_min is not None:
        parts.append(f"random resized crop (scale {data_args.crop_scale_min}-1)")
    names = {"hflip": "horizontal flip", "random_erasing": "random erasing", "mixup_alpha": "Mixup",
             "cutmix_alpha": "CutMix", "label_smoothing": "label smoothing"}  # fmt: skip
    parts += [f"{label} {getattr(data_args, name)}" for name, label in names.items() if getattr(data_args, name)]
    if recipe is None and not parts:
        return ""
    head = f"Trained with the `{recipe.name}` recipe ({recipe.source})" if recipe else "Trained with"
    return head + (": " + ", ".join(parts) if parts else "") + "; the values of every option are below."


@runner.distributed_main
def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    model_args, data_args, args = parse_args(argv)
    recipe = apply_recipe(argv, data_args, args)  # before the arguments are recorded: the run's values
    data = load_data(data_args, args.seed)  # before the run folder is claimed: a bad dataset leaves nothing behind
    data, data_report = check_data(data, data_args, not args.disable_tqdm)
    accelerator, out = runner.start_run(args, model=model_args, data=data_args)
    with runner.setting_up(accelerator, out):
        labels = data["train"].features[data_args.label_column].names
        model, processor = build_model_and_processor(model_args, labels, recipe_fields(data_args, args))
        loaders = build_dataloaders(data, processor, data_args, args, model.config.num_channels)
        parts, state, (eval_dl, test_dl) = runner.prepare_loop(
            accelerator, out, args, model, loaders, lambda model, total_steps: build_optimizer(model, args, total_steps)
        )
    model = parts.model  # prepared by accelerate
    fill = [-m / s for m, s in zip(processor.image_mean, processor.image_std)]  # a black pixel, normalised
    report = reporter(accelerator, model, eval_dl, args.eval_every_epochs, data_args.eval_split)
    loss_of = augmented_loss(model, data_args, fill, len(labels))
    state, stopped = runner.train_loop(parts, state, args, loss_of, report)
    if stopped:
        return None
    scores = {
        data_args.eval_split: functools.partial(evaluate_split, accelerator, model, eval_dl),
        data_args.test_split: functools.partial(evaluate_split, accelerator, model, test_dl),
    }
    card_for = functools.partial(
        model_card, args=args, model_args=model_args, data_args=data_args, argv=argv, recipe=recipe
    )
    dropped = data_report.as_dict(annotations=False) if data_args.drop_invalid_images else None
    return runner.finish(parts, state, args, scores, [processor], card_for, data_report=dropped)


if __name__ == "__main__":
    main()
