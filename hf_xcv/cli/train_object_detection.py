#!/usr/bin/env python
"""Train an hf_xcv object detector (DETR or Deformable DETR) with accelerate: one CPU, several processes, or several
GPUs.

    hf-xcv-train object-detection --output_dir runs/shapes        (or python -m hf_xcv.train ...)
    hf-xcv-train object-detection --preset deformable-detr-shapes --output_dir runs/deformable-shapes
    hf-xcv-train object-detection --dataset cppe-5 --model_name_or_path facebook/detr-resnet-50 --output_dir runs/cppe
    hf-xcv-train object-detection --dataset path/to/coco --preset detr-resnet-50 \
        --backbone_checkpoint path/to/resnet-50 --shortest_edge 800 --longest_edge 1333 --output_dir runs/coco
    accelerate launch --num_processes 2 -m hf_xcv.train object-detection --output_dir runs/ddp

In a checkout, ``python training/train_object_detection.py ...`` runs the same script.

The model: a preset (``--preset``, detr-shapes without it; DETR and Deformable DETR presets both go, the preset's
model type decides) or a checkpoint to fine-tune (``--model_name_or_path``: an hf_xcv folder or Hub repo, or a
transformers ``detr`` / ``deformable_detr`` one, converted on load; its config.json's model_type decides).

Data (``--dataset``): the built-in shapes scenes (``shapes``), a Hub detection dataset (``cppe-5``: rows with
``image``, ``image_id``, ``width``, ``height`` and ``objects = {"id", "area", "bbox", "category"}``, COCO
``[x, y, width, height]`` boxes in pixels, ``category`` a ``ClassLabel``) or a ``save_to_disk`` folder of one (in that
layout or COCO's ``annotations``), a COCO folder (``annotations/instances_<split>.json`` and ``<split>/`` images), or
an image folder with a ``metadata.jsonl`` of ``{"file_name", "objects": {"bbox", "category"}}`` lines (one per
image; at its top, or in each split's folder). Split names are recognised by what they say (``val``, ``valid``,
``validation`` and ``val2017`` alike): mAP is measured on the validation split, or on the test split where there is
none (cppe-5 has train and test), and the run says which. Every row is checked, and every image decoded, before the
run starts: all the problems are reported at once (``--drop_invalid_annotations`` drops the invalid annotations and
images instead, and the run records how many). Category ids are the class indices (COCO's 1..90 make 91 classes);
``id2label`` names the unused ids ``"N/A (<id>)"`` and ``label2id`` holds only the real categories. The original
recipe of the model type is the default (``--learning_rate``, ``--lr_backbone`` and ``--lr_drop`` left unset take the
model type's values):

* DETR: AdamW at lr 1e-4 for the transformer and ``--lr_backbone`` 1e-5 for the backbone stages it trains, the
  learning rate divided by 10 after ``--lr_drop`` 2/3 of the run (200 of 300 epochs);
* Deformable DETR: lr 2e-4, backbone 2e-5, the sampling offsets and reference points at ``--lr_linear_proj_mult``
  0.1 of the lr (2e-5), lr / 10 after ``--lr_drop`` 0.8 of the run (40 of 50 epochs);

both with weight decay 1e-4 on every parameter, gradient clipping at 0.1, the original's flips, multi-scale resizing
and random crops (scaled to ``--shortest_edge``), COCO mAP on the validation split every ``--eval_every_epochs``.
The processor saved with the model is the model type's (Deformable DETR's scores with a sigmoid and keeps the top
100 (query, class) pairs, as its original; DETR's takes a softmax, one detection per query), and the mAP of the run
is measured through it. Checkpoints are atomic and ``--resume_from_checkpoint latest`` continues exactly; the final
folder (model, processor, model card with the measured mAP, ``detections.png`` with predicted and true boxes of a
few test images) is ready for the Hub.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from datasets import DatasetDict
from huggingface_hub import ModelCard
from torch.utils.data import DataLoader
from transformers import HfArgumentParser

import hf_xcv
from hf_xcv.configuration_utils import check_known_fields
from hf_xcv.conversion import load_config_dict
from hf_xcv.data import detection_label_names, load_shapes_dataset
from hf_xcv.data.checks import DataProblem, DataReport, card_line
from hf_xcv.data.coco import find_split, load_detection_dataset
from hf_xcv.data.detection import (
    DROP_OPTION,
    DetectionCollator,
    check_detection_dataset,
    detection_transform,
    row_annotations,
)
from hf_xcv.data.shapes import detection_label_maps
from hf_xcv.losses import box_cxcywh_to_xyxy
from hf_xcv.metrics import MeanAveragePrecision
from hf_xcv.presets import PRESETS
from hf_xcv.processing.detection import DetectionImageProcessor
from hf_xcv.registry import MODEL_TYPES, TrainingRecipe, converted_types
from hf_xcv.training import TEMPLATES, TrainerState, runner
from hf_xcv.utils.errors import UsageError
from hf_xcv.visualization import detection_grid, draw_detections

TEMPLATE = TEMPLATES / "object_detection.md"
PICTURES = "detections.png"
DEFAULT_PRESET = "detr-shapes"


# The model types this script trains: those with an object detector, each with its paper's recipe (the defaults of
# the unset learning rates and lr drop, and what its card says of how it scores); a checkpoint's model_type -> the
# hf_xcv type it trains as (its own, or the one it converts to on load).
RECIPES: dict[str, TrainingRecipe] = {
    t: e.recipe for t, e in MODEL_TYPES.items() if "AutoModelForObjectDetection" in e.heads and e.recipe is not None
}
CHECKPOINT_TYPES = {source: target for source, target in converted_types().items() if target in RECIPES}


@dataclass
class ModelArguments:
    preset: str | None = field(
        default=None,
        metadata={
            "help": f"a DETR or Deformable DETR preset (its model type is the model's); {DEFAULT_PRESET} without it"
        },
    )
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "fine-tune this checkpoint instead of a preset: hf_xcv DETR / Deformable DETR, or transformers' "
            "detr / deformable_detr (converted on load); its config's model_type is the model's"
        },
    )
    backbone_checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "ImageNet weights for the backbone: a local transformers ResNet folder (the original recipe: "
            "frozen BatchNorm, stem and stage 1 frozen); without it the backbone trains from scratch"
        },
    )
    attention_type: str | None = field(
        default=None,
        metadata={"help": "attention_type: DETR's encoder core; Deformable DETR's decoder self-attention core"},
    )
    config_overrides: str | None = field(
        default=None, metadata={"help": "config fields: 'num_queries=50,auxiliary_loss=false' or a JSON object"}
    )
    attn_implementation: str = field(default="sdpa", metadata={"help": "sdpa, eager, flash_attention_2, ..."})


@dataclass
class DataArguments:
    dataset: str = field(
        default="shapes",
        metadata={
            "help": "'shapes' (built in), a Hub detection dataset id (cppe-5) or a save_to_disk folder of one, a COCO "
            "folder, or an image folder with a metadata.jsonl"
        },
    )
    shapes_train_size: int = field(default=2000, metadata={"help": "images of the built-in train split"})
    shortest_edge: int = field(default=96, metadata={"help": "resize: shortest side (the original: 800)"})
    longest_edge: int = field(default=128, metadata={"help": "resize: longest side at most (the original: 1333)"})
    augment: bool = field(default=True, metadata={"help": "the original's flips, multi-scale resizes and crops"})
    max_train_samples: int | None = None
    train_split: str | None = field(default=None, metadata={"help": "unset: the split named train (or train2017...)"})
    eval_split: str | None = field(
        default=None, metadata={"help": "the split mAP is measured on; unset: validation / val / valid, else test"}
    )
    test_split: str | None = field(
        default=None, metadata={"help": "the split the card reports; unset: test, else the evaluation split"}
    )
    pictures: int = field(default=8, metadata={"help": f"test images drawn into {PICTURES} (0: none)"})
    picture_threshold: float = field(default=0.5, metadata={"help": f"the score above which {PICTURES} draws a box"})
    drop_invalid_annotations: bool = field(
        default=False,
        metadata={
            "help": "drop the invalid annotations (bad, zero-area or out-of-image boxes, unknown categories) and the "
            "images that do not decode or whose size disagrees with the dataset's width/height, instead of refusing "
            "the dataset; the counts are logged, and recorded in all_results.json and the model card"
        },
    )


@dataclass
class TrainArguments(runner.RunArguments):
    learning_rate: float | None = field(
        default=None, metadata={"help": "learning rate; unset: the model type's recipe (DETR 1e-4, Deformable 2e-4)"}
    )
    lr_backbone: float | None = field(
        default=None,
        metadata={"help": "learning rate of the trained backbone stages; unset: DETR 1e-5, Deformable DETR 2e-5"},
    )
    lr_linear_proj_mult: float = field(
        default=0.1,
        metadata={
            "help": "Deformable DETR: the sampling offsets' and reference points' lr is this times --learning_rate "
            "(the original's lr_linear_proj_mult; DETR has no such parameters)"
        },
    )
    weight_decay: float = 1e-4
    max_grad_norm: float = 0.1
    lr_scheduler_type: str = field(default="step", metadata={"help": "'step' (the original) or a transformers name"})
    lr_drop: float | None = field(
        default=None,
        metadata={
            "help": "'step': fraction of the run after which lr /= 10; unset: DETR 2/3 (200 of 300 epochs), "
            "Deformable DETR 0.8 (40 of 50)"
        },
    )
    num_train_epochs: int = 50
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 32
    eval_every_epochs: int = 10


def parse_args(argv: list[str] | None = None) -> tuple[ModelArguments, DataArguments, TrainArguments]:
    return HfArgumentParser((ModelArguments, DataArguments, TrainArguments)).parse_args_into_dataclasses(args=argv)


def detection_presets() -> list[str]:
    return sorted(name for name, preset in PRESETS.items() if preset.model_type in RECIPES)


def model_type_of(args: ModelArguments) -> str:
    """The hf_xcv model type to train: the preset's, or what the checkpoint's config.json holds (a transformers
    type as the hf_xcv type it converts to)."""
    if args.model_name_or_path and args.preset:
        raise UsageError("pass either --preset or --model_name_or_path, not both")
    if args.model_name_or_path:
        source = load_config_dict(args.model_name_or_path).get("model_type")
        if source not in CHECKPOINT_TYPES:
            raise UsageError(
                f"{args.model_name_or_path} holds a checkpoint of model_type {source!r}; this script trains "
                f"{sorted(CHECKPOINT_TYPES)}"
            )
        return CHECKPOINT_TYPES[source]
    name = args.preset or DEFAULT_PRESET
    if name not in PRESETS or PRESETS[name].model_type not in RECIPES:
        made = f" makes a {PRESETS[name].model_type} model" if name in PRESETS else " is unknown"
        raise UsageError(f"preset {name!r}{made}; this script trains the detection presets {detection_presets()}")
    return PRESETS[name].model_type


def with_recipe(args: TrainArguments, model_type: str) -> TrainArguments:
    """``args`` with the unset learning rates and lr drop taken from ``model_type``'s original recipe."""
    defaults = RECIPES[model_type].defaults
    return replace(args, **{key: value for key, value in defaults.items() if getattr(args, key) is None})


def resolve_splits(data: DatasetDict, args: DataArguments) -> DataArguments:
    """``args`` with the splits the run trains, evaluates and tests on named: those given, else the ones whose names
    say so (``val`` / ``valid`` / ``validation``; evaluation falls back on the test split, the test on the evaluation
    split)."""
    name = args.dataset
    train = find_split(data, "train", args.train_split, name)
    if train is None:
        raise UsageError(f"dataset {name!r} has no train split; its splits: {list(data)} (name one: --train_split)")
    evaluation = find_split(data, "validation", args.eval_split, name) or find_split(data, "test", None, name)
    if evaluation is None:
        raise UsageError(
            f"dataset {name!r} has no validation or test split to measure mAP on; its splits: {list(data)} (name one: "
            "--eval_split)"
        )
    test = find_split(data, "test", args.test_split, name) or evaluation
    return replace(args, train_split=train, eval_split=evaluation, test_split=test)


def load_data(args: DataArguments, seed: int, progress: bool = True) -> tuple[DatasetDict, DataArguments, DataReport]:
    """The dataset (the train split cut to ``max_train_samples``), every row and image of the splits used checked
    (:func:`check_detection_dataset`: refused, or with ``--drop_invalid_annotations`` what is invalid dropped);
    ``args`` with those splits named (:func:`resolve_splits`); and what was dropped."""
    problems: list[DataProblem] = []  # a COCO folder's annotations the dataset cannot hold, checked with the rest
    if args.dataset == "shapes":
        data = load_shapes_dataset(num_train=args.shapes_train_size, seed=seed)
    else:
        data = load_detection_dataset(args.dataset, problems)
    args = resolve_splits(data, args)
    used = dict.fromkeys((args.train_split, args.eval_split, args.test_split))
    data = DatasetDict({split: data[split] for split in used})
    if args.max_train_samples is not None:
        train = data[args.train_split]
        data[args.train_split] = train.select(range(min(args.max_train_samples, len(train))))
    used_problems = [problem for problem in problems if problem.split in used]
    checked, report = check_detection_dataset(
        data, detection_label_names(data), args.dataset, drop_invalid=args.drop_invalid_annotations,
        progress=progress, found=used_problems,
    )  # fmt: skip
    if report.problems:
        print(report.summary(DROP_OPTION))
    return DatasetDict(checked), args, report


def splits_line(args: DataArguments, chosen: bool = False) -> str:
    """What the run says of its splits (``args`` resolved; ``chosen``: the evaluation split was named by the user)."""
    test = f", the card's results on {args.test_split!r}" if args.test_split != args.eval_split else ""
    fallback = not chosen and find_split({args.eval_split: 0}, "test") is not None
    reason = " (the dataset has no validation split)" if fallback else ""
    return f"training on split {args.train_split!r}, measuring mAP on {args.eval_split!r}{reason}{test}"


def build_processor(args: DataArguments, num_labels: int, model_type: str = "xcv_detr") -> DetectionImageProcessor:
    """The image processor of ``model_type`` (DETR's, or Deformable DETR's with its sigmoid top-k
    post-processing) with the original's resize and augmentations, scaled from 800 / 1333 to ``shortest_edge`` /
    ``longest_edge``."""
    short, long = args.shortest_edge, args.longest_edge
    scale = short / 800
    return MODEL_TYPES[model_type].image_processor(
        size={"shortest_edge": short, "longest_edge": long},
        num_labels=num_labels,
        augment_scales=sorted({max(1, round(s * scale)) for s in range(480, 801, 32)}),
        augment_max_size=long,
        augment_crop_scales=[max(1, round(s * scale)) for s in (400, 500, 600)],
        augment_crop_size=[max(1, round(384 * scale)), max(1, round(600 * scale))],
    )


def build_model(args: ModelArguments, labels: list[str]) -> torch.nn.Module:
    """A fresh DETR or Deformable DETR from a preset (with ImageNet backbone weights when given), or a checkpoint
    with a new class head for ``labels``."""
    model_type = model_type_of(args)
    entry = MODEL_TYPES[model_type]
    model_class = entry.heads["AutoModelForObjectDetection"]
    id2label, label2id = detection_label_maps(labels)  # class index = category id; label2id the real ones only
    overrides: dict[str, Any] = {"num_labels": len(labels), "id2label": id2label, "label2id": label2id}
    if args.attention_type:
        overrides["attention_type"] = args.attention_type
    overrides.update(runner.parse_overrides(args.config_overrides))
    check_known_fields(entry.config, overrides)
    if args.model_name_or_path:
        return model_class.from_pretrained(
            args.model_name_or_path,
            ignore_mismatched_sizes=True,
            attn_implementation=args.attn_implementation,
            **overrides,
        )
    if not args.backbone_checkpoint:  # from scratch: frozen random layers and un-normalised activations never learn
        overrides = {"freeze_batch_norm": False, "frozen_backbone_stages": 0, **overrides}
        print("no --backbone_checkpoint: the backbone trains from scratch (ordinary BatchNorm, every stage trained)")
    config = hf_xcv.preset_config(args.preset or DEFAULT_PRESET, model_type, **overrides)
    config._attn_implementation = args.attn_implementation
    model = model_class(config)
    if args.backbone_checkpoint:
        model.model.backbone.load_pretrained(args.backbone_checkpoint)
    return model


def parameter_group(name: str, linear_projections: tuple[str, ...] = ()) -> str:
    """Which learning rate a parameter trains at: "backbone", "linear_proj" (a name holding one of the recipe's
    ``linear_projections``: Deformable DETR's sampling offsets and reference points) or "transformer" (the rest)."""
    if ".backbone." in f".{name}":
        return "backbone"
    return "linear_proj" if any(part in name for part in linear_projections) else "transformer"


def build_optimizer(model: torch.nn.Module, args: TrainArguments, total_steps: int) -> tuple[Any, Any]:
    """AdamW with weight decay on every parameter and three learning rates (the originals): ``learning_rate``
    for the transformer and heads, ``lr_backbone`` for the backbone, ``lr_linear_proj_mult * learning_rate`` for
    Deformable DETR's sampling offsets and reference points (unset rates: the model type's recipe); a step decay
    (lr / 10 after ``lr_drop`` of the steps) or a transformers schedule. Groups without parameters are left out
    (DETR has no linear projections): transformer, backbone, linear projections, in this order."""
    args = with_recipe(args, model.config.model_type)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    lrs = {
        "transformer": args.learning_rate,
        "backbone": args.lr_backbone,
        "linear_proj": args.learning_rate * args.lr_linear_proj_mult,
    }
    linear = RECIPES[model.config.model_type].notes.get("linear_projections", ())
    groups = [
        {"params": [p for n, p in named if parameter_group(n, linear) == group], "lr": lr} for group, lr in lrs.items()
    ]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], weight_decay=args.weight_decay)
    if args.lr_scheduler_type != "step":
        return optimizer, runner.build_scheduler(optimizer, args.lr_scheduler_type, 0, total_steps)
    if not 0 < args.lr_drop <= 1:
        raise UsageError(f"--lr_drop must be a fraction of the run in (0, 1], got {args.lr_drop}")
    drop_at = int(args.lr_drop * total_steps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.1 if step >= drop_at else 1.0)


def build_dataloaders(
    data: DatasetDict, processor: Any, data_args: DataArguments, args: TrainArguments
) -> tuple[list[DataLoader], Any]:
    """Train (augmented, reproducibly per epoch), eval and test loaders; and the train transform."""
    train_transform = detection_transform(processor, augment=data_args.augment, seed=args.seed)
    plain = detection_transform(processor)
    splits = [data[data_args.train_split].with_transform(train_transform)]
    splits += [data[split].with_transform(plain) for split in (data_args.eval_split, data_args.test_split)]
    return runner.build_dataloaders(splits, args, DetectionCollator(processor)), train_transform


def references_of(labels: list[dict[str, torch.Tensor]]) -> list[dict[str, Any]]:
    """The processor's targets back in original-image pixels: xyxy boxes, labels, crowd flags and areas."""
    references = []
    for target in labels:
        height, width = target["orig_size"].tolist()
        scale = torch.tensor([width, height, width, height], dtype=torch.float32)
        resized_h, resized_w = target["size"].tolist()
        references.append(
            {
                "image_id": int(target["image_id"].reshape(-1)[0]),
                "boxes": (box_cxcywh_to_xyxy(target["boxes"].float().cpu()) * scale).tolist(),
                "labels": target["class_labels"].tolist(),
                "iscrowd": target["iscrowd"].tolist(),
                "area": (target["area"].float().cpu() * (height * width) / (resized_h * resized_w)).tolist(),
            }
        )
    return references


@torch.no_grad()
def predict(accelerator: Accelerator, model: torch.nn.Module, processor: Any, loader: DataLoader) -> tuple[list, list]:
    """Every image's detections (threshold 0: COCO keeps all) and references, gathered from every process and
    deduplicated by image id (a distributed sampler repeats images to even out the shards)."""
    model.eval()
    predictions, references = [], []
    for batch in loader:
        outputs = model(pixel_values=batch["pixel_values"], pixel_mask=batch["pixel_mask"])
        sizes = torch.stack([target["orig_size"] for target in batch["labels"]])
        found = processor.post_process_object_detection(outputs, threshold=0.0, target_sizes=sizes)
        references += references_of(batch["labels"])
        predictions += [{key: value.float().cpu().tolist() for key, value in item.items()} for item in found]
    pairs = gather_object(list(zip(predictions, references)))
    unique = {reference["image_id"]: (prediction, reference) for prediction, reference in pairs}
    return [p for p, _ in unique.values()], [r for _, r in unique.values()]


def evaluate_split(accelerator: Accelerator, model: torch.nn.Module, processor: Any, loader: DataLoader) -> dict:
    """COCO box mAP of a whole split (every process computes the same numbers from the gathered detections)."""
    predictions, references = predict(accelerator, model, processor, loader)
    results = MeanAveragePrecision().compute(predictions=predictions, references=references)
    results.pop("classes", None)
    results["num_images"] = len(references)
    return results


def reporter(
    accelerator: Accelerator, model: torch.nn.Module, evaluate: Callable[[], dict], every: int, transform: Any
) -> Callable[[TrainerState, bool], None]:
    """At the end of each epoch: the train augmentations' epoch (exact resume), and every ``every`` epochs the
    validation mAP."""

    def report(state: TrainerState, epoch_ended: bool) -> None:
        if not epoch_ended:
            return
        transform.set_epoch(state.epoch)
        if every and state.epoch % every == 0:
            results = evaluate()
            accelerator.print(f"epoch {state.epoch}: map {results['map']:.4f} map_50 {results['map_50']:.4f}")

    return report


def draw_pictures(
    model: torch.nn.Module, processor: Any, split: Any, count: int, path: Path, threshold: float = 0.5
) -> None:
    """Predicted (score > ``threshold``) and true boxes of the first ``count`` images of ``split``, in one PNG."""
    model.eval()
    names = detection_label_names(split)
    tiles = []
    for row in split.select(range(min(count, len(split)))):
        inputs = processor(row["image"], return_tensors="pt")
        with torch.no_grad():
            outputs = model(**{k: v.to(model.device) for k, v in inputs.items()})
        size = torch.tensor([row["image"].size[::-1]])  # (height, width) of the image as decoded
        found = processor.post_process_object_detection(outputs, threshold=threshold, target_sizes=size)[0]
        truth = row_annotations(row)
        boxes = [[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in truth)]
        ground_truth = {"boxes": np.array(boxes).reshape(-1, 4), "labels": [a["category_id"] for a in truth]}
        ground_truth["iscrowd"] = [a.get("iscrowd", 0) for a in truth]
        tiles.append(
            draw_detections(
                row["image"], found["boxes"], found["labels"], found["scores"], names, ground_truth=ground_truth
            )
        )
    detection_grid(tiles, columns=4).save(path)


def model_card(model, results, args: TrainArguments, model_args, data_args: DataArguments, argv) -> ModelCard:
    split = data_args.test_split
    metrics = {k: v for k, v in results[split].items() if k.startswith(("map", "mar")) and v >= 0}
    recipe = RECIPES[model.config.model_type]
    label2id = model.config.label2id
    classes = sorted(label2id, key=label2id.get)  # the real categories, in class-id order
    family = {"family": recipe.name, "paper": recipe.paper, "scores": recipe.notes["scores"], "classes": classes}
    family["dropped"] = card_line(results.get("data"), DROP_OPTION)
    return runner.run_model_card(
        TEMPLATE, model, args, results, argv, task="object-detection", split=split, metrics=metrics,
        dataset=data_args.dataset, built_in=("shapes", "hf-xcv-shapes"), base_model=model_args.model_name_or_path,
        task_type="object-detection", pipeline_tag="object-detection", template_vars=family,
    )  # fmt: skip


@runner.distributed_main
def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    model_args, data_args, args = parse_args(argv)
    chosen = data_args.eval_split is not None  # named by the user, or found by load_data
    model_type = model_type_of(model_args)  # these two before the run folder is claimed: a bad preset, checkpoint
    data, data_args, data_report = load_data(data_args, args.seed, not args.disable_tqdm)  # or dataset: nothing left
    args = with_recipe(args, model_type)  # the rates the run uses, as the run record and the card show them
    accelerator, out = runner.start_run(args, model=model_args, data=data_args)
    accelerator.print(splits_line(data_args, chosen))
    with runner.setting_up(accelerator, out):
        labels = detection_label_names(data)
        model = build_model(model_args, labels)
        processor = build_processor(data_args, len(labels), model_type)
        loaders, transform = build_dataloaders(data, processor, data_args, args)
        parts, state, (eval_dl, test_dl) = runner.prepare_loop(
            accelerator, out, args, model, loaders, lambda model, total: build_optimizer(model, args, total)
        )
    model = parts.model
    transform.set_epoch(state.epoch)  # a resumed run augments its epoch as the uninterrupted one did
    evaluate = functools.partial(evaluate_split, accelerator, model, processor)
    report = reporter(accelerator, model, functools.partial(evaluate, eval_dl), args.eval_every_epochs, transform)

    def loss_of(batch: dict) -> torch.Tensor:
        return model(pixel_values=batch["pixel_values"], pixel_mask=batch["pixel_mask"], labels=batch["labels"]).loss

    state, stopped = runner.train_loop(parts, state, args, loss_of, report)
    if stopped:
        return None
    scores = {
        split: functools.partial(evaluate, dl)
        for split, dl in ((data_args.eval_split, eval_dl), (data_args.test_split, test_dl))
    }
    card_for = functools.partial(model_card, args=args, model_args=model_args, data_args=data_args, argv=argv)
    if data_args.pictures:  # before the final folder is pushed: it goes along
        whole = runner.full_model(accelerator, model)  # every process: under FSDP each sends its shards
        if accelerator.is_main_process:
            test = data[data_args.test_split]
            draw_pictures(whole, processor, test, data_args.pictures, out / PICTURES, data_args.picture_threshold)
    dropped = data_report.as_dict() if data_args.drop_invalid_annotations else None
    return runner.finish(parts, state, args, scores, [processor], card_for, data_report=dropped)


if __name__ == "__main__":
    main()
