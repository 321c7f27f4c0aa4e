#!/usr/bin/env python
"""Train an hf_xcv image classifier with accelerate: one CPU, several processes, or several GPUs.

    python training/train_image_classification.py --output_dir runs/digits
    accelerate launch --multi_gpu --num_processes 2 training/train_image_classification.py --output_dir runs/ddp
    torchrun --nproc_per_node 2 training/train_image_classification.py --output_dir runs/ddp

Checkpoints are atomic (see hf_xcv.training.checkpointing); ``--resume_from_checkpoint latest``
continues a stopped run exactly where it stopped. The final folder (model, processor, README.md
model card with the measured results) is ready for the Hub; ``--push_to_hub`` uploads it.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed
from datasets import DatasetDict, load_dataset, load_from_disk
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import AutoImageProcessor, HfArgumentParser, get_scheduler

import hf_xcv
from hf_xcv.configuration_utils import check_known_fields
from hf_xcv.data import (
    ImageClassificationCollator,
    encode_labels,
    image_classification_transform,
    load_digits_dataset,
    random_shift,
)
from hf_xcv.layers import to_pair
from hf_xcv.metrics import Accuracy, TopKAccuracy
from hf_xcv.training import (
    CheckpointManager,
    MeasuredResult,
    TrainerState,
    build_model_card,
    check_output_dir,
    prepare_output_dir,
    push_folder_to_hub,
    write_model_card,
)

TEMPLATE = Path(__file__).resolve().parents[1] / "model_cards" / "image_classification.md"


@dataclass
class ModelArguments:
    preset: str | None = field(
        default=None, metadata={"help": "named configuration from hf_xcv.PRESETS (default: vit-digits)"}
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "fine-tune this checkpoint (hf_xcv or transformers ViT) instead of a preset"}
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


@dataclass
class TrainArguments:
    output_dir: str = field(metadata={"help": "run folder: checkpoints and the final Hub-ready model"})
    overwrite_output_dir: bool = False
    resume_from_checkpoint: str | None = field(default=None, metadata={"help": "'latest' or a checkpoint folder"})
    seed: int = 0
    num_train_epochs: int = 100
    max_train_steps: int | None = field(default=None, metadata={"help": "overrides num_train_epochs"})
    per_device_train_batch_size: int = 64
    per_device_eval_batch_size: int = 256
    gradient_accumulation_steps: int = 1
    learning_rate: float = 1e-3
    weight_decay: float = 0.05
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    mixed_precision: str = field(default="no", metadata={"help": "no, fp16 or bf16"})
    checkpointing_steps: int = field(default=500, metadata={"help": "save a checkpoint every N optimizer steps"})
    checkpoints_total_limit: int = 2
    eval_every_epochs: int = 25
    stop_after_steps: int | None = field(
        default=None, metadata={"help": "stop after N steps as an interrupted run would (no final save)"}
    )
    use_cpu: bool = field(default=False, metadata={"help": "train on the CPU even where a GPU is present"})
    disable_tqdm: bool = False
    push_to_hub: bool = False
    hub_model_id: str | None = None
    hub_private: bool = False


@dataclass
class Loop:
    """What the training loop works on (built once in ``main``)."""

    accelerator: Accelerator
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train_dl: DataLoader
    eval_dl: DataLoader
    ckpt: CheckpointManager
    fill: list[float]  # normalised value of a black pixel, per channel (padding of the random shift)
    total_steps: int


def has_accelerator_device() -> bool:
    if hasattr(torch, "accelerator"):
        return torch.accelerator.is_available()
    return torch.cuda.is_available()


def parse_args(argv: list[str] | None = None) -> tuple[ModelArguments, DataArguments, TrainArguments]:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainArguments))
    return parser.parse_args_into_dataclasses(args=argv)


def load_data(args: DataArguments, seed: int) -> DatasetDict:
    if args.dataset == "digits":
        data = load_digits_dataset(seed=seed)
    elif Path(args.dataset, "dataset_dict.json").exists():
        data = load_from_disk(args.dataset)
    else:
        data = load_dataset("imagefolder", data_dir=args.dataset)
    for split in ("train", args.eval_split, args.test_split):
        if split not in data:
            raise ValueError(f"dataset {args.dataset!r} has no {split!r} split; splits: {list(data)}")
    if args.max_train_samples is not None:
        data["train"] = data["train"].select(range(min(args.max_train_samples, len(data["train"]))))
    return encode_labels(data, args.label_column)  # one id per class over all splits


def parse_overrides(text: str | None) -> dict[str, Any]:
    """'a=1,b=0.1,c=mean' or '{"a": 1, "image_size": [32, 32]}' -> dict (JSON values, else strings)."""
    text = (text or "").strip()
    if text.startswith("{"):
        return json.loads(text)
    overrides: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config_overrides expects key=value pairs or a JSON object, got {item!r}")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value.strip()
    return overrides


def build_model_and_processor(args: ModelArguments, labels: list[str]) -> tuple[torch.nn.Module, Any]:
    """A fresh model from a preset, or a checkpoint with a new head for ``labels``; and its processor."""
    id2label = dict(enumerate(labels))
    overrides: dict[str, Any] = {
        "num_labels": len(labels),
        "id2label": id2label,
        "label2id": {v: k for k, v in id2label.items()},
    }
    if args.attention_type:
        overrides["attention_type"] = args.attention_type
    overrides.update(parse_overrides(args.config_overrides))
    check_known_fields(hf_xcv.ViTConfig, overrides)
    if args.model_name_or_path:
        if args.preset:
            raise ValueError("pass either --preset or --model_name_or_path, not both")
        processor = AutoImageProcessor.from_pretrained(args.model_name_or_path)
        model = hf_xcv.ViTForImageClassification.from_pretrained(
            args.model_name_or_path,
            ignore_mismatched_sizes=True,  # only the task head may be re-initialised (checked on load)
            attn_implementation=args.attn_implementation,
            **overrides,
        )
        return model, processor
    config = hf_xcv.preset_config(args.preset or "vit-digits", **overrides)
    config._attn_implementation = args.attn_implementation
    size = to_pair(config.image_size)
    processor = hf_xcv.ViTImageProcessor(size={"height": size[0], "width": size[1]})
    return hf_xcv.ViTForImageClassification(config), processor


def build_dataloaders(
    data: DatasetDict, processor: Any, data_args: DataArguments, args: TrainArguments
) -> tuple[DataLoader, DataLoader, DataLoader]:
    transform = image_classification_transform(processor, data_args.image_column, data_args.label_column)
    collator = ImageClassificationCollator()

    def loader(split: str, batch_size: int, shuffle: bool) -> DataLoader:
        return DataLoader(data[split].with_transform(transform), batch_size, shuffle=shuffle, collate_fn=collator)

    return (
        loader("train", args.per_device_train_batch_size, True),
        loader(data_args.eval_split, args.per_device_eval_batch_size, False),
        loader(data_args.test_split, args.per_device_eval_batch_size, False),
    )


def build_optimizer(
    model: torch.nn.Module, args: TrainArguments, total_steps: int, num_processes: int
) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW without decay on biases, norms, [CLS] and positions; warm-up + schedule."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        skip = param.ndim <= 1 or name.endswith(("cls_token", "position_embeddings"))
        (no_decay if skip else decay).append(param)
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate)
    # accelerate steps a prepared scheduler once per process per optimizer step.
    scheduler = get_scheduler(
        args.lr_scheduler_type,
        optimizer,
        num_warmup_steps=int(args.warmup_ratio * total_steps) * num_processes,
        num_training_steps=total_steps * num_processes,
    )
    return optimizer, scheduler


def step_seed(seed: int, micro_step: int, rank: int, world: int) -> int:
    """One seed per (micro-batch, process): dropout and augmentation replay exactly after a resume."""
    return (seed * 1_000_003 + micro_step * world + rank) % (2**63)


def train(loop: Loop, state: TrainerState, args: TrainArguments, data_args: DataArguments) -> tuple[TrainerState, bool]:
    """The loop; returns the state it ended in and whether ``--stop_after_steps`` stopped it."""
    acc, model = loop.accelerator, loop.model
    progress = tqdm(
        total=loop.total_steps, initial=state.completed_steps, disable=args.disable_tqdm or not acc.is_main_process
    )
    while state.completed_steps < loop.total_steps:
        loop.train_dl.set_epoch(state.epoch)
        skip = state.batches_in_epoch
        batches = acc.skip_first_batches(loop.train_dl, skip) if skip else loop.train_dl
        model.train()
        for batch in batches:
            micro_step = state.epoch * len(loop.train_dl) + state.batches_in_epoch
            torch.manual_seed(step_seed(args.seed, micro_step, acc.process_index, acc.num_processes))
            pixels = random_shift(batch["pixel_values"], data_args.max_shift, loop.fill)
            with acc.accumulate(model):
                loss = model(pixel_values=pixels, labels=batch["labels"]).loss
                acc.backward(loss)
                if acc.sync_gradients and args.max_grad_norm:
                    acc.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                loop.optimizer.step()
                loop.scheduler.step()
                loop.optimizer.zero_grad()
            state.batches_in_epoch += 1
            if not acc.sync_gradients:
                continue
            state.completed_steps += 1
            progress.update(1)
            progress.set_postfix(loss=f"{loss.item():.4f}", epoch=state.epoch)
            if state.batches_in_epoch == len(loop.train_dl):
                state.epoch, state.batches_in_epoch = state.epoch + 1, 0
                maybe_report(loop, state, args, data_args)
            if state.completed_steps % args.checkpointing_steps == 0:
                loop.ckpt.save(state)
            if args.stop_after_steps is not None and state.completed_steps >= args.stop_after_steps:
                return state, True
            if state.completed_steps >= loop.total_steps:
                break
    progress.close()
    return state, False


def maybe_report(loop: Loop, state: TrainerState, args: TrainArguments, data_args: DataArguments) -> None:
    """Validation accuracy every ``eval_every_epochs`` epochs (the loop reseeds per step: this changes nothing)."""
    if args.eval_every_epochs and state.epoch % args.eval_every_epochs == 0:
        results = evaluate_split(loop.accelerator, loop.model, loop.eval_dl)
        loop.accelerator.print(f"epoch {state.epoch} step {state.completed_steps}: {data_args.eval_split} {results}")
        loop.model.train()


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


def save_final(
    accelerator: Accelerator,
    model: torch.nn.Module,
    processor: Any,
    out: Path,
    results: dict[str, Any],
    args: TrainArguments,
    data_args: DataArguments,
    argv: list[str],
) -> None:
    """Model, processor, model card and results into ``out``, each file moved in only when complete."""
    if not accelerator.is_main_process:
        return
    staging = out / ".final-staging"
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained(staging)
    processor.save_pretrained(staging)
    repo_id = args.hub_model_id or out.name
    split = data_args.test_split
    measured = [MeasuredResult(k, v, split) for k, v in results[split].items() if k != "num_samples"]
    hyper = {k: v for k, v in asdict(args).items() if k not in ("output_dir", "hub_model_id", "push_to_hub")}
    hyper["world_size"] = accelerator.num_processes
    dataset_id = "sklearn-digits" if data_args.dataset == "digits" else data_args.dataset
    command = "python training/train_image_classification.py " + shlex.join(argv)
    card = build_model_card(
        TEMPLATE, unwrapped, repo_id=repo_id, dataset_id=dataset_id, dataset_name=dataset_id,
        results=measured, hyperparameters=hyper, command=command,
    )  # fmt: skip
    write_model_card(card, staging)
    (staging / "all_results.json").write_text(json.dumps(results, indent=2))
    for file in staging.iterdir():
        os.replace(file, out / file.name)
    staging.rmdir()


def prepare_run(accelerator: Accelerator, out: Path, run_args: dict[str, Any], args: TrainArguments) -> None:
    """Every process checks the folder (so all fail alike), then the main process prepares it."""
    resume = args.resume_from_checkpoint is not None
    check_output_dir(out, args.overwrite_output_dir, resume)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        prepare_output_dir(out, args.overwrite_output_dir, resume, run_args)
    accelerator.wait_for_everyone()


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    model_args, data_args, args = parse_args(argv)
    accelerator = Accelerator(
        cpu=args.use_cpu or not has_accelerator_device(),  # multi-process CPU runs need cpu=True (gloo)
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
    )
    out = Path(args.output_dir)
    prepare_run(accelerator, out, {"model": asdict(model_args), "data": asdict(data_args), "train": asdict(args)}, args)
    set_seed(args.seed)
    data = load_data(data_args, args.seed)
    model, processor = build_model_and_processor(model_args, data["train"].features[data_args.label_column].names)
    train_dl, eval_dl, test_dl = build_dataloaders(data, processor, data_args, args)
    steps_per_epoch = math.ceil(math.ceil(len(train_dl) / accelerator.num_processes) / args.gradient_accumulation_steps)
    total_steps = args.max_train_steps or args.num_train_epochs * steps_per_epoch
    optimizer, scheduler = build_optimizer(model, args, total_steps, accelerator.num_processes)
    model, optimizer, train_dl, eval_dl, test_dl, scheduler = accelerator.prepare(
        model, optimizer, train_dl, eval_dl, test_dl, scheduler
    )
    ckpt = CheckpointManager(out, accelerator, args.checkpoints_total_limit)
    ckpt.clean_staging()
    state = TrainerState()
    if args.resume_from_checkpoint:
        path = ckpt.resolve(args.resume_from_checkpoint)
        state = ckpt.load(path)
        accelerator.print(f"resumed from {path} at step {state.completed_steps}")
    fill = [-m / s for m, s in zip(processor.image_mean, processor.image_std)]  # a black pixel, normalised
    loop = Loop(accelerator, model, optimizer, scheduler, train_dl, eval_dl, ckpt, fill, total_steps)
    state, stopped = train(loop, state, args, data_args)
    if stopped:
        accelerator.print(f"stopped after step {state.completed_steps} (--stop_after_steps)")
        return None
    results = {
        data_args.eval_split: evaluate_split(accelerator, model, eval_dl),
        data_args.test_split: evaluate_split(accelerator, model, test_dl),
        "world_size": accelerator.num_processes,
        "completed_steps": state.completed_steps,
    }
    accelerator.print(json.dumps(results, indent=2))
    save_final(accelerator, model, processor, out, results, args, data_args, argv)
    accelerator.wait_for_everyone()
    if args.push_to_hub and accelerator.is_main_process:
        url = push_folder_to_hub(out, args.hub_model_id or out.name, private=args.hub_private)
        accelerator.print(f"pushed to {url}")
    accelerator.end_training()
    return results


if __name__ == "__main__":
    main()
