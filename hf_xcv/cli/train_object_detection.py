#!/usr/bin/env python
"""Train an hf_xcv object detector (DETR) with accelerate: one CPU, several processes, or several GPUs.

    hf-xcv-train object-detection --output_dir runs/shapes        (or python -m hf_xcv.train ...)
    hf-xcv-train object-detection --dataset path/to/coco --preset detr-resnet-50 \
        --backbone_checkpoint path/to/resnet-50 --shortest_edge 800 --longest_edge 1333 --output_dir runs/coco
    accelerate launch --num_processes 2 -m hf_xcv.train object-detection --output_dir runs/ddp

In a checkout, ``python training/train_object_detection.py ...`` runs the same script.

Data: the built-in shapes scenes (``--dataset shapes``), a COCO folder (``annotations/instances_<split>.json`` and
``<split>/`` images) or a ``save_to_disk`` DatasetDict in the same layout. The original recipe is the default:
AdamW at lr 1e-4 for the transformer and ``--lr_backbone`` 1e-5 for the backbone stages it trains, weight decay
1e-4 on every parameter, gradient clipping at 0.1, the learning rate divided by 10 after ``--lr_drop`` of the run
(200 of 300 epochs), the original's flips, multi-scale resizing and random crops (scaled to ``--shortest_edge``),
COCO mAP on the validation split every ``--eval_every_epochs``. Checkpoints are atomic and
``--resume_from_checkpoint latest`` continues exactly; the final folder (model, processor, model card with the
measured mAP, ``detections.png`` with predicted and true boxes of a few test images) is ready for the Hub.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from datasets import DatasetDict, load_from_disk
from huggingface_hub import ModelCard
from torch.utils.data import DataLoader
from transformers import HfArgumentParser

import hf_xcv
from hf_xcv.configuration_utils import check_known_fields
from hf_xcv.data import detection_label_names, load_coco_detection, load_shapes_dataset
from hf_xcv.data.detection import DetectionCollator, detection_transform
from hf_xcv.losses import box_cxcywh_to_xyxy
from hf_xcv.metrics import MeanAveragePrecision
from hf_xcv.training import TEMPLATES, MeasuredResult, TrainerState, build_model_card, runner
from hf_xcv.training.model_card import dataset_label, hub_id
from hf_xcv.visualization import detection_grid, draw_detections

TEMPLATE = TEMPLATES / "object_detection.md"
PICTURES = "detections.png"


@dataclass
class ModelArguments:
    preset: str | None = field(default=None, metadata={"help": "a DETR preset; detr-shapes without it"})
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "fine-tune this checkpoint (hf_xcv or transformers DETR) instead of a preset"}
    )
    backbone_checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "ImageNet weights for the backbone: a local transformers ResNet folder (the original recipe: "
            "frozen BatchNorm, stem and stage 1 frozen); without it the backbone trains from scratch"
        },
    )
    attention_type: str | None = field(default=None, metadata={"help": "the encoder's attention_type"})
    config_overrides: str | None = field(
        default=None, metadata={"help": "config fields: 'num_queries=50,auxiliary_loss=false' or a JSON object"}
    )
    attn_implementation: str = field(default="sdpa", metadata={"help": "sdpa, eager, flash_attention_2, ..."})


@dataclass
class DataArguments:
    dataset: str = field(
        default="shapes", metadata={"help": "'shapes' (built in), a COCO folder, or a save_to_disk DatasetDict"}
    )
    shapes_train_size: int = field(default=2000, metadata={"help": "images of the built-in train split"})
    shortest_edge: int = field(default=96, metadata={"help": "resize: shortest side (the original: 800)"})
    longest_edge: int = field(default=128, metadata={"help": "resize: longest side at most (the original: 1333)"})
    augment: bool = field(default=True, metadata={"help": "the original's flips, multi-scale resizes and crops"})
    max_train_samples: int | None = None
    eval_split: str = "validation"
    test_split: str = "test"
    pictures: int = field(default=8, metadata={"help": f"test images drawn into {PICTURES} (0: none)"})


@dataclass
class TrainArguments(runner.RunArguments):
    learning_rate: float = 1e-4
    lr_backbone: float = field(default=1e-5, metadata={"help": "learning rate of the trained backbone stages"})
    weight_decay: float = 1e-4
    max_grad_norm: float = 0.1
    lr_scheduler_type: str = field(default="step", metadata={"help": "'step' (the original) or a transformers name"})
    lr_drop: float = field(default=2 / 3, metadata={"help": "'step': fraction of the run after which lr /= 10"})
    num_train_epochs: int = 50
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 32
    eval_every_epochs: int = 10


def parse_args(argv: list[str] | None = None) -> tuple[ModelArguments, DataArguments, TrainArguments]:
    return HfArgumentParser((ModelArguments, DataArguments, TrainArguments)).parse_args_into_dataclasses(args=argv)


def load_data(args: DataArguments, seed: int) -> DatasetDict:
    if args.dataset == "shapes":
        data = load_shapes_dataset(num_train=args.shapes_train_size, seed=seed)
    elif Path(args.dataset, "dataset_dict.json").exists():
        data = load_from_disk(args.dataset)
    else:
        data = load_coco_detection(args.dataset)
    splits = ("train", args.eval_split, args.test_split)
    return runner.require_splits(data, args.dataset, splits, args.max_train_samples, {}, seed, None)


def build_processor(args: DataArguments, num_labels: int) -> hf_xcv.XcvDetrImageProcessor:
    """The original's resize and augmentations, scaled from 800 / 1333 to ``shortest_edge`` / ``longest_edge``."""
    short, long = args.shortest_edge, args.longest_edge
    scale = short / 800
    return hf_xcv.XcvDetrImageProcessor(
        size={"shortest_edge": short, "longest_edge": long},
        num_labels=num_labels,
        augment_scales=sorted({max(1, round(s * scale)) for s in range(480, 801, 32)}),
        augment_max_size=long,
        augment_crop_scales=[max(1, round(s * scale)) for s in (400, 500, 600)],
        augment_crop_size=[max(1, round(384 * scale)), max(1, round(600 * scale))],
    )


def build_model(args: ModelArguments, labels: list[str]) -> torch.nn.Module:
    """A fresh DETR from a preset (with ImageNet backbone weights when given), or a checkpoint with a new class
    head for ``labels``."""
    if args.model_name_or_path and args.preset:
        raise ValueError("pass either --preset or --model_name_or_path, not both")
    id2label = dict(enumerate(labels))
    overrides: dict[str, Any] = {"num_labels": len(labels), "id2label": id2label}
    overrides["label2id"] = {name: index for index, name in id2label.items()}
    if args.attention_type:
        overrides["attention_type"] = args.attention_type
    overrides.update(runner.parse_overrides(args.config_overrides))
    check_known_fields(hf_xcv.DetrConfig, overrides)
    if args.model_name_or_path:
        return hf_xcv.DetrForObjectDetection.from_pretrained(
            args.model_name_or_path,
            ignore_mismatched_sizes=True,
            attn_implementation=args.attn_implementation,
            **overrides,
        )
    if not args.backbone_checkpoint:  # from scratch: frozen random layers and un-normalised activations never learn
        overrides = {"freeze_batch_norm": False, "frozen_backbone_stages": 0, **overrides}
        print("no --backbone_checkpoint: the backbone trains from scratch (ordinary BatchNorm, every stage trained)")
    config = hf_xcv.preset_config(args.preset or "detr-shapes", "xcv_detr", **overrides)
    config._attn_implementation = args.attn_implementation
    model = hf_xcv.DetrForObjectDetection(config)
    if args.backbone_checkpoint:
        model.model.backbone.load_pretrained(args.backbone_checkpoint)
    return model


def build_optimizer(model: torch.nn.Module, args: TrainArguments, total_steps: int) -> tuple[Any, Any]:
    """AdamW with the backbone at ``lr_backbone`` and weight decay on every parameter (the original); a step decay
    (lr / 10 after ``lr_drop`` of the steps) or a transformers schedule."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in named if ".backbone." not in f".{n}"], "lr": args.learning_rate},
        {"params": [p for n, p in named if ".backbone." in f".{n}"], "lr": args.lr_backbone},
    ]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], weight_decay=args.weight_decay)
    if args.lr_scheduler_type != "step":
        return optimizer, runner.build_scheduler(optimizer, args.lr_scheduler_type, 0, total_steps)
    if not 0 < args.lr_drop <= 1:
        raise ValueError(f"--lr_drop must be a fraction of the run in (0, 1], got {args.lr_drop}")
    drop_at = int(args.lr_drop * total_steps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.1 if step >= drop_at else 1.0)


def build_dataloaders(
    data: DatasetDict, processor: Any, data_args: DataArguments, args: TrainArguments
) -> tuple[list[DataLoader], Any]:
    """Train (augmented, reproducibly per epoch), eval and test loaders; and the train transform."""
    train_transform = detection_transform(processor, augment=data_args.augment, seed=args.seed)
    plain = detection_transform(processor)
    splits = [data["train"].with_transform(train_transform)]
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


def draw_pictures(model: torch.nn.Module, processor: Any, split: Any, count: int, path: Path) -> None:
    """Predicted (score > 0.5) and true boxes of the first ``count`` images of ``split``, in one PNG."""
    model.eval()
    names = detection_label_names(split)
    tiles = []
    for row in split.select(range(min(count, len(split)))):
        inputs = processor(row["image"], return_tensors="pt")
        with torch.no_grad():
            outputs = model(**{k: v.to(model.device) for k, v in inputs.items()})
        size = torch.tensor([[row["height"], row["width"]]])
        found = processor.post_process_object_detection(outputs, threshold=0.5, target_sizes=size)[0]
        truth = [a for a in row["annotations"]]
        boxes = [[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in truth)]
        ground_truth = {"boxes": np.array(boxes).reshape(-1, 4), "labels": [a["category_id"] for a in truth]}
        ground_truth["iscrowd"] = [a["iscrowd"] for a in truth]
        tiles.append(
            draw_detections(
                row["image"], found["boxes"], found["labels"], found["scores"], names, ground_truth=ground_truth
            )
        )
    detection_grid(tiles, columns=4).save(path)


def model_card(model, results, args: TrainArguments, model_args, data_args: DataArguments, argv) -> ModelCard:
    split = data_args.test_split
    dataset_id = "hf-xcv-shapes" if data_args.dataset == "shapes" else dataset_label(data_args.dataset)
    metrics = {k: v for k, v in results[split].items() if k.startswith(("map", "mar")) and v >= 0}
    return build_model_card(
        TEMPLATE, model, repo_id=args.hub_model_id or Path(args.output_dir).name, dataset_id=dataset_id,
        dataset_name=dataset_id, results=[MeasuredResult(k, v, split) for k, v in metrics.items()],
        hyperparameters=runner.card_hyperparameters(args, results["world_size"]),
        command=runner.script_command("hf-xcv-train object-detection", argv), task_type="object-detection",
        pipeline_tag="object-detection", base_model=model_args.model_name_or_path,
        dataset_on_hub=data_args.dataset != "shapes" and hub_id(data_args.dataset) is not None,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    model_args, data_args, args = parse_args(argv)
    data = load_data(data_args, args.seed)  # before the run folder is claimed: a bad dataset leaves nothing behind
    accelerator, out = runner.start_run(args, model=model_args, data=data_args)
    with runner.setting_up(accelerator, out):
        labels = detection_label_names(data)
        model = build_model(model_args, labels)
        processor = build_processor(data_args, len(labels))
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
    results = runner.finish(parts, state, args, scores, [processor], card_for)
    if data_args.pictures and accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        draw_pictures(unwrapped, processor, data[data_args.test_split], data_args.pictures, out / PICTURES)
    return results


if __name__ == "__main__":
    main()
