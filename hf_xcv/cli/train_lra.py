#!/usr/bin/env python
"""Train an X-former sequence classifier on a Long Range Arena–style task with accelerate.

    hf-xcv-train lra --task listops --attention_type performer --output_dir runs/lra-listops-performer
    hf-xcv-train lra --task pathfinder --attention_type full --attn_implementation eager --output_dir runs/pf-full
    accelerate launch --multi_gpu --num_processes 2 -m hf_xcv.train lra --task image --output_dir runs/ddp

In a checkout, ``python training/train_lra.py ...`` runs the same script.

Tasks (``hf_xcv.data.lra``, generated offline and deterministic by ``--data_seed``): ``listops`` (10 classes,
expressions up to 512 tokens by default), ``pathfinder`` (2 classes, 32 x 32 = 1,024 pixel tokens), ``image``
(digits at 32 x 32, 1,024 pixel tokens). ``--task_settings`` changes the generator's settings
('max_length=1024,num_train=20000'); ``--dataset`` reads a task saved with ``save_to_disk`` instead (what
``benchmarks/bench_lra.py`` does, so that its cells share one copy).

One model configuration per task (the presets ``xformer-lra-listops``, ``-pathfinder``, ``-image``) and one
training recipe per task (each preset's ``recipe``: batch size, weight decay and length where no flag sets them), the
same for every attention entry; ``--attention_type`` picks the entry, with its settings at the task's sequence length
(``hf_xcv.attention.attention_kwargs_at_length``; ``--attention_kwargs`` changes them). For ``full``,
``--attn_implementation`` picks eager (materialised scores) or sdpa (PyTorch's fused kernel).

Checkpoints are atomic; ``--resume_from_checkpoint latest`` continues a stopped run exactly. The final folder
(model, model card with the measured accuracy, ``all_results.json``) is ready for the Hub. Besides the
validation and test accuracy, the results hold ``training``: the optimizer steps per second of this process's
training steps after ``--timing_warmup_steps`` (evaluation during training left out; checkpoint saves included).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import torch
from accelerate import Accelerator
from datasets import ClassLabel, DatasetDict, load_from_disk
from huggingface_hub import ModelCard
from torch.utils.data import DataLoader
from transformers import HfArgumentParser

import hf_xcv
from hf_xcv.attention import attention_kwargs_at_length, available_attention_types, get_attention_class
from hf_xcv.configuration_utils import check_known_fields
from hf_xcv.data.lra import LRA_TASKS, collate, load_lra_dataset
from hf_xcv.metrics import Accuracy
from hf_xcv.models.xformer import XFormerConfig, XFormerForSequenceClassification
from hf_xcv.presets import PRESETS
from hf_xcv.training import TEMPLATES, TrainerState, parameter_groups, runner

from ..utils.errors import UsageError

TEMPLATE = TEMPLATES / "sequence_classification.md"
TASK_PRESETS = {task: f"xformer-lra-{task}" for task in LRA_TASKS}


@dataclass
class ModelArguments:
    attention_type: str = field(default="full", metadata={"help": "the attention entry (hf_xcv.attention registry)"})
    attn_implementation: str = field(
        default="sdpa", metadata={"help": "backend of full attention: sdpa (fused) or eager (materialised scores)"}
    )
    attention_kwargs: str | None = field(
        default=None,
        metadata={"help": "the entry's settings over those at the task length: 'k=64' or a JSON object"},
    )
    preset: str | None = field(default=None, metadata={"help": "model configuration; xformer-lra-<task> without it"})
    config_overrides: str | None = field(
        default=None, metadata={"help": "config fields: 'num_hidden_layers=4,hidden_dropout_prob=0.0' or JSON"}
    )


@dataclass
class DataArguments:
    task: str = field(default="listops", metadata={"help": f"one of {sorted(LRA_TASKS)}"})
    dataset: str | None = field(
        default=None, metadata={"help": "a save_to_disk DatasetDict of the task instead of generating it"}
    )
    task_settings: str | None = field(
        default=None, metadata={"help": "generator settings: 'max_length=1024,num_train=20000' or JSON"}
    )
    data_seed: int = field(default=0, metadata={"help": "seed of the generated data (--seed seeds the training)"})


@dataclass
class TrainArguments(runner.RunArguments):
    num_train_epochs: int | None = field(default=None, metadata={"help": "the task's recipe without it"})
    per_device_train_batch_size: int | None = field(default=None, metadata={"help": "the task's recipe without it"})
    per_device_eval_batch_size: int = 64
    learning_rate: float = 1e-3
    weight_decay: float | None = field(default=None, metadata={"help": "the task's recipe without it"})
    warmup_ratio: float = 0.1
    eval_every_steps: int = field(default=0, metadata={"help": "validation accuracy every N steps (0: at the end)"})
    timing_warmup_steps: int = field(default=3, metadata={"help": "first steps left out of steps per second"})


def parse_args(argv: list[str] | None = None) -> tuple[ModelArguments, DataArguments, TrainArguments]:
    """The three argument groups, with what the flags leave unset taken from the task's recipe."""
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainArguments))
    model_args, data_args, args = parser.parse_args_into_dataclasses(args=argv)
    apply_recipe(args, data_args.task)
    return model_args, data_args, args


def task_recipe(task: str) -> dict[str, Any]:
    """The training settings of ``task``: the recipe of its preset (``xformer-lra-<task>``)."""
    if task not in LRA_TASKS:
        raise UsageError(f"--task must be one of {sorted(LRA_TASKS)}, got {task!r}")
    return PRESETS[TASK_PRESETS[task]].recipe.defaults


def apply_recipe(args: TrainArguments, task: str) -> None:
    """Fill the unset training settings from the recipe of the task's preset (:func:`task_recipe`); a recipe's step
    budget applies only when neither ``--max_train_steps`` nor ``--num_train_epochs`` was given."""
    recipe = task_recipe(task)
    length_given = args.max_train_steps is not None or args.num_train_epochs is not None
    for name in ("per_device_train_batch_size", "weight_decay"):
        if getattr(args, name) is None:
            setattr(args, name, recipe[name])
    if not length_given:
        args.max_train_steps = recipe.get("max_train_steps")
    if args.num_train_epochs is None:
        args.num_train_epochs = recipe.get("num_train_epochs", 1)  # unused when max_train_steps is set


def load_data(args: DataArguments) -> DatasetDict:
    """The task's splits: generated (``--task_settings``, ``--data_seed``) or read from ``--dataset``."""
    if args.task not in LRA_TASKS:
        raise UsageError(f"--task must be one of {sorted(LRA_TASKS)}, got {args.task!r}")
    if args.dataset:
        if not Path(args.dataset, "dataset_dict.json").exists():
            raise UsageError(f"--dataset {args.dataset} is not a DatasetDict saved with save_to_disk")
        if args.task_settings:
            raise UsageError("--task_settings changes generated data; a --dataset from disk has its own")
        data = load_from_disk(args.dataset)
    else:
        data = load_lra_dataset(args.task, seed=args.data_seed, **runner.parse_overrides(args.task_settings))
    missing = [name for name in ("train", "validation", "test") if name not in data]
    if missing:
        raise UsageError(f"the {args.task} data has no {missing} split(s); it has {sorted(data)}")
    for name, split in data.items():
        if not {"input_ids", "attention_mask", "label"} <= set(split.column_names):
            raise UsageError(f"split {name!r} needs input_ids, attention_mask and label; it has {split.column_names}")
        if len(split) == 0:
            raise UsageError(f"split {name!r} is empty")
        if not isinstance(split.features["label"], ClassLabel):
            raise UsageError(f"split {name!r}: label must be a ClassLabel (class names), got {split.features['label']}")
    return data


def sequence_shape(data: DatasetDict) -> tuple[int, int]:
    """(the task's length, the vocabulary its ids need): every sequence of every split has that length
    (ListOps is padded to its maximum)."""
    lengths, vocab = set(), 0
    for split in data.values():
        ids = split.data.column("input_ids")  # pyarrow: no Python loop over the tokens
        lengths |= set(pc.unique(pc.list_value_length(ids)).to_pylist())
        vocab = max(vocab, pc.max(pc.list_flatten(ids)).as_py() + 1)
    if len(lengths) != 1:
        raise UsageError(f"every sequence must have one length (pad to the maximum); found lengths {sorted(lengths)}")
    return lengths.pop(), vocab


def bidirectional_entries() -> list[str]:
    """The registry entries a sequence classifier can use: not causal-only, no 2-D grid."""
    names = []
    for name in available_attention_types():
        caps = get_attention_class(name).capabilities
        if not caps.requires_causal and not caps.needs_grid:
            names.append(name)
    return names


def build_config(model_args: ModelArguments, task: str, length: int, labels: list[str], vocab_size: int) -> Any:
    """The task's configuration with the entry at ``length``: its settings tied to the length, then
    ``--attention_kwargs``; the position table covers ``length``."""
    if get_attention_class(model_args.attention_type).capabilities.requires_causal:
        raise UsageError(
            f"attention_type={model_args.attention_type!r} only attends causally; classifying a whole sequence needs "
            f"a bidirectional entry: {bidirectional_entries()}"
        )
    attention_kwargs = runner.parse_overrides(model_args.attention_kwargs)
    if model_args.attention_type != "full":
        attention_kwargs = attention_kwargs_at_length(model_args.attention_type, length, attention_kwargs)
    overrides: dict[str, Any] = {
        "attention_type": model_args.attention_type,
        "attention_kwargs": attention_kwargs,
        "max_position_embeddings": length,
        "num_labels": len(labels),
        "id2label": dict(enumerate(labels)),
        "label2id": {name: i for i, name in enumerate(labels)},
    }
    overrides.update(runner.parse_overrides(model_args.config_overrides))
    check_known_fields(XFormerConfig, overrides)
    config = hf_xcv.preset_config(model_args.preset or TASK_PRESETS[task], "xcv_xformer", **overrides)
    if config.vocab_size < vocab_size:
        raise UsageError(
            f"the task's tokens need vocab_size >= {vocab_size}; the configuration has {config.vocab_size}"
        )
    config._attn_implementation = model_args.attn_implementation
    return config


@torch.no_grad()
def evaluate_split(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader) -> dict[str, float]:
    """Accuracy over the whole split, gathered from every process."""
    model.eval()
    predictions, labels = [], []
    for batch in loader:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        predicted, reference = accelerator.gather_for_metrics((logits.argmax(-1), batch["labels"]))
        predictions += predicted.tolist()
        labels += reference.tolist()
    results = Accuracy().compute(predictions=predictions, references=labels)
    results["num_samples"] = len(labels)
    return results


class StepTimer:
    """Times the optimizer steps (everything between two reports, evaluation left out) after ``warmup`` steps."""

    def __init__(self, warmup: int):
        self.warmup, self.steps, self.seconds = warmup, 0, 0.0
        self.last: float | None = None
        self.seen = 0

    def step_done(self) -> None:
        now = time.perf_counter()
        if self.last is not None and self.seen >= self.warmup:
            self.steps += 1
            self.seconds += now - self.last
        self.seen += 1
        self.last = now

    def restart(self) -> None:
        """After work that is not a training step (evaluation): the next step is timed from here."""
        self.last = time.perf_counter()

    def summary(self) -> dict[str, Any]:
        rate = self.steps / self.seconds if self.seconds else None
        return {"steps_per_second": rate, "timed_steps": self.steps, "seconds": self.seconds}


def recipe_of(args: TrainArguments) -> dict[str, Any]:
    """The training settings the recipe may have filled in, as the run used them."""
    names = ("per_device_train_batch_size", "weight_decay", "learning_rate", "max_train_steps", "num_train_epochs")
    return {name: getattr(args, name) for name in names}


def reporter(
    accelerator: Accelerator, model: torch.nn.Module, eval_dl: DataLoader, every: int, timer: StepTimer
) -> Callable[[TrainerState, bool], None]:
    def report(state: TrainerState, epoch_ended: bool) -> None:
        timer.step_done()
        if every and state.completed_steps % every == 0:
            accelerator.print(f"step {state.completed_steps}: validation {evaluate_split(accelerator, model, eval_dl)}")
            timer.restart()

    return report


def data_call(args: DataArguments) -> str:
    """The Python call that gives the run's data again (generated by seed and settings, or read from disk)."""
    if args.dataset:
        return f"load_from_disk({str(args.dataset)!r})"
    settings = {"seed": args.data_seed, **runner.parse_overrides(args.task_settings)}
    return f"load_lra_dataset({args.task!r}, " + ", ".join(f"{k}={v!r}" for k, v in settings.items()) + ")"


def model_card(
    model: torch.nn.Module,
    results: dict[str, Any],
    args: TrainArguments,
    data_args: DataArguments,
    argv: list[str],
    length: int,
) -> ModelCard:
    return runner.run_model_card(
        TEMPLATE, model, args, results, argv, task="lra", split="test",
        metrics={"accuracy": results["test"]["accuracy"]}, dataset=data_args.dataset or data_args.task,
        built_in=(data_args.task, f"hf_xcv-lra-{data_args.task}") if not data_args.dataset else None,
        task_type="text-classification", pipeline_tag="text-classification", tags=("long-range-arena",),
        template_vars={"attention_type": model.config.attention_type, "task": data_args.task,
                       "sequence_length": length, "data_call": data_call(data_args)},
    )  # fmt: skip


@runner.distributed_main
def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    model_args, data_args, args = parse_args(argv)
    data = load_data(data_args)  # before the run folder is claimed: bad settings leave nothing behind
    length, vocab = sequence_shape(data)
    labels = data["train"].features["label"].names
    config = build_config(model_args, data_args.task, length, labels, vocab)
    accelerator, out = runner.start_run(args, model=model_args, data=data_args)
    with runner.setting_up(accelerator, out):
        model = XFormerForSequenceClassification(config)
        splits = [data[name].with_format("numpy") for name in ("train", "validation", "test")]
        loaders = runner.build_dataloaders(splits, args, collate)

        def optimizer_for(model: torch.nn.Module, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
            optimizer = torch.optim.AdamW(parameter_groups(model, args.weight_decay), lr=args.learning_rate)
            warmup = int(args.warmup_ratio * total_steps)
            return optimizer, runner.build_scheduler(optimizer, args.lr_scheduler_type, warmup, total_steps)

        parts, state, (eval_dl, test_dl) = runner.prepare_loop(accelerator, out, args, model, loaders, optimizer_for)
    model = parts.model
    timer = StepTimer(args.timing_warmup_steps)
    report = reporter(accelerator, model, eval_dl, args.eval_every_steps, timer)
    timer.restart()
    state, stopped = runner.train_loop(parts, state, args, lambda batch: model(**batch).loss, report)
    if stopped:
        return None
    scores = {
        "validation": functools.partial(evaluate_split, accelerator, model, eval_dl),
        "test": functools.partial(evaluate_split, accelerator, model, test_dl),
        "training": lambda: timer.summary() | recipe_of(args),  # measured above; not a split
    }
    card_for = functools.partial(model_card, args=args, data_args=data_args, argv=argv, length=length)
    return runner.finish(parts, state, args, scores, [], card_for)


if __name__ == "__main__":
    main()
