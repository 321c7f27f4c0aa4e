"""What every accelerate training script does the same way: arguments, the run folder, the loop, the final folder.

A script supplies what its task owns (data, model, optimizer, how a batch becomes a loss, how a split is scored)
and calls, in order::

    data = ...  # loaded and checked before the run folder is claimed
    accelerator, out = start_run(args, model=model_args, data=data_args)
    with setting_up(accelerator, out):  # a failure here gives the folder back
        ...  # model, dataloaders (build_dataloaders)
        parts, state, (eval_dl, test_dl) = prepare_loop(accelerator, out, args, model, loaders, optimizer_for)
    state, stopped = train_loop(parts, state, args, loss_of, report)
    if not stopped:
        results = finish(parts, state, args, {"validation": score_eval, "test": score_test}, [tokenizer], card_for)

Exact resume rests on two things: the dataloader order comes from accelerate's seedable sampler (epoch-seeded, and
``skip_first_batches`` on resume), and the global RNG is reseeded before every micro-batch from
:func:`step_seed`, so dropout and augmentation do not depend on what ran before in the process.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, DistributedDataParallelKwargs, set_seed
from huggingface_hub import ModelCard
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import get_scheduler

from ..model_card import MeasuredResult, build_model_card, dataset_label, hub_id, write_model_card
from .checkpointing import (
    FINAL_RESULTS,
    CheckpointManager,
    TrainerState,
    check_output_dir,
    prepare_output_dir,
    release_output_dir,
)
from .hub import push_folder_to_hub
from .schedules import get_noam_schedule

FINAL_STAGING = ".final-staging"


@dataclass
class RunArguments:
    """Arguments every training script takes; a script subclasses it to add its own and change defaults."""

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
    lr_scheduler_type: str = "cosine"
    max_grad_norm: float = 1.0
    mixed_precision: str = field(default="no", metadata={"help": "no, fp16 or bf16"})
    checkpointing_steps: int = field(default=500, metadata={"help": "save a checkpoint every N optimizer steps"})
    checkpoints_total_limit: int = 2
    stop_after_steps: int | None = field(
        default=None, metadata={"help": "stop after N steps as an interrupted run would (no final save)"}
    )
    use_cpu: bool = field(default=False, metadata={"help": "train on the CPU even where a GPU is present"})
    disable_tqdm: bool = False
    push_to_hub: bool = False
    hub_model_id: str | None = None
    hub_private: bool = False


@dataclass
class LoopParts:
    """What the training loop works on, after ``accelerator.prepare``."""

    accelerator: Accelerator
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train_dl: DataLoader
    ckpt: CheckpointManager
    total_steps: int


def has_accelerator_device() -> bool:
    if hasattr(torch, "accelerator"):
        return torch.accelerator.is_available()
    return torch.cuda.is_available()


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


def step_seed(seed: int, micro_step: int, rank: int, world: int) -> int:
    """One seed per (micro-batch, process): dropout and augmentation replay exactly after a resume."""
    return (seed * 1_000_003 + micro_step * world + rank) % (2**63)


def build_accelerator(args: RunArguments, find_unused_parameters: bool = False) -> Accelerator:
    """``find_unused_parameters``: parts of the model may get no gradient in a step (a multi-task model trains one
    task's head per batch), which DDP must be told."""
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=True)] if find_unused_parameters else []
    return Accelerator(
        kwargs_handlers=handlers,
        cpu=args.use_cpu or not has_accelerator_device(),  # multi-process CPU runs need cpu=True (gloo)
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
        # The loop steps the scheduler once per optimizer step, so schedules count optimizer steps whatever the
        # number of processes (accelerate would otherwise step it once per process).
        step_scheduler_with_optimizer=False,
    )


def prepare_run(accelerator: Accelerator, args: RunArguments, **more_args: Any) -> Path:
    """Every process checks the folder (so all fail alike), then the main process prepares it.

    The run's arguments (``args`` as "train", and each dataclass of ``more_args`` under its name) are recorded.
    """
    out = Path(args.output_dir)
    resume = args.resume_from_checkpoint is not None
    check_output_dir(out, args.overwrite_output_dir, resume)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        run_args = {name: asdict(value) for name, value in more_args.items()} | {"train": asdict(args)}
        prepare_output_dir(out, args.overwrite_output_dir, resume, run_args)
    accelerator.wait_for_everyone()
    return out


def start_run(
    args: RunArguments, *, find_unused_parameters: bool = False, **more_args: Any
) -> tuple[Accelerator, Path]:
    """The accelerator (see :func:`build_accelerator`) and the prepared run folder (see :func:`prepare_run`); seeds
    every RNG with ``args.seed``."""
    accelerator = build_accelerator(args, find_unused_parameters)
    out = prepare_run(accelerator, args, **more_args)
    set_seed(args.seed)
    return accelerator, out


@contextlib.contextmanager
def setting_up(accelerator: Accelerator, out: Path) -> Iterator[None]:
    """The steps between claiming the run folder and training (model, tokenizer, dataloaders, preparation). If
    one fails while the folder holds neither a complete checkpoint nor a final model (nothing a retry could
    resume or would lose), the main process empties it again, so that the retry is not refused as "already
    holds a run"."""
    try:
        yield
    except BaseException:
        if accelerator.is_main_process:
            release_output_dir(out)
        raise


def require_splits(
    data: Any,
    name: str,
    splits: Sequence[str],
    max_train_samples: int | None = None,
    held_out: dict[str, float | None] | None = None,
    seed: int = 0,
    stratify_by: str | None = None,
) -> Any:
    """``data`` (a DatasetDict called ``name``) after checking it has ``splits``; the train split cut to
    ``max_train_samples``.

    ``held_out`` maps a split the dataset lacks (an imagefolder of class folders has only ``train``) to the
    fraction of the (whole) train split to hold out as it, drawn with ``seed`` and stratified by the ``stratify_by``
    column (every class in each part). Asking for a split the dataset already has is an error, as is a missing
    split with no fraction for it: the message names the option that makes it.
    """
    total = len(data["train"]) if "train" in data else 0  # fractions are of the train split as it comes
    for split, fraction in (held_out or {}).items():
        if fraction is None:
            continue
        if split in data:
            raise ValueError(f"dataset {name!r} already has a {split!r} split; drop the option that holds one out")
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"the fraction held out as {split!r} must lie in (0, 1), got {fraction}")
        count = max(1, round(fraction * total))
        parts = data["train"].train_test_split(test_size=count, seed=seed, stratify_by_column=stratify_by)
        data["train"], data[split] = parts["train"], parts["test"]
    for split in splits:
        if split not in data:
            hint = f" (hold part of train out as it: --train_{split}_split 0.1)" if held_out is not None else ""
            raise ValueError(f"dataset {name!r} has no {split!r} split{hint}; splits: {list(data)}")
    if max_train_samples is not None:
        data["train"] = data["train"].select(range(min(max_train_samples, len(data["train"]))))
    return data


def build_dataloaders(splits: Sequence[Dataset], args: RunArguments, collate_fn: Callable) -> list[DataLoader]:
    """Loaders of the train split (shuffled, training batch size) and of the others (in order, evaluation size)."""
    train, *others = splits
    loaders = [DataLoader(train, args.per_device_train_batch_size, shuffle=True, collate_fn=collate_fn)]
    return loaders + [DataLoader(split, args.per_device_eval_batch_size, collate_fn=collate_fn) for split in others]


def count_total_steps(args: RunArguments, batches_per_epoch: int, num_processes: int) -> int:
    """Optimizer steps of the run: ``max_train_steps``, else the epochs' worth of this process's batches.

    ``batches_per_epoch`` is the length of the dataloader before ``accelerator.prepare`` (all processes).
    """
    per_process = math.ceil(batches_per_epoch / num_processes)
    return args.max_train_steps or args.num_train_epochs * math.ceil(per_process / args.gradient_accumulation_steps)


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    name: str,
    warmup_steps: int,
    total_steps: int,
    d_model: int | None = None,
    lr_factor: float = 1.0,
) -> Any:
    """``"noam"`` (the Transformer paper's schedule, see :mod:`.schedules`) or a ``get_scheduler`` name of
    transformers (``linear``, ``cosine``, ...); steps are optimizer steps (see :func:`build_accelerator`)."""
    if name == "noam":
        if d_model is None:
            raise ValueError("lr_scheduler_type='noam' needs the model's d_model")
        return get_noam_schedule(optimizer, d_model, warmup_steps, factor=lr_factor)
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps)


def resume_state(ckpt: CheckpointManager, args: RunArguments) -> TrainerState:
    """A fresh state, or the one of ``--resume_from_checkpoint`` with model, optimizer and RNGs restored."""
    ckpt.clean_staging()
    if not args.resume_from_checkpoint:
        return TrainerState()
    path = ckpt.resolve(args.resume_from_checkpoint)
    state = ckpt.load(path)
    ckpt.accelerator.print(f"resumed from {path} at step {state.completed_steps}")
    return state


def prepare_loop(
    accelerator: Accelerator,
    out: Path,
    args: RunArguments,
    model: torch.nn.Module,
    loaders: Sequence[DataLoader],
    optimizer_for: Callable[[torch.nn.Module, int], tuple[torch.optim.Optimizer, Any]],
) -> tuple[LoopParts, TrainerState, list[DataLoader]]:
    """Optimizer and scheduler (``optimizer_for(model, total_steps)``), all prepared by accelerate, and the state to
    start from (restored from ``--resume_from_checkpoint``).

    Returns:
        The loop's parts (the prepared model is ``parts.model``), the state, and the prepared ``loaders[1:]``.
    """
    total_steps = count_total_steps(args, len(loaders[0]), accelerator.num_processes)
    optimizer, scheduler = optimizer_for(model, total_steps)
    model, optimizer, scheduler, *loaders = accelerator.prepare(model, optimizer, scheduler, *loaders)
    ckpt = CheckpointManager(out, accelerator, args.checkpoints_total_limit)
    parts = LoopParts(accelerator, model, optimizer, scheduler, loaders[0], ckpt, total_steps)
    return parts, resume_state(ckpt, args), loaders[1:]


def _optimizer_step(parts: LoopParts, loss_of: Callable[[Any], torch.Tensor], batch: Any, max_grad_norm: float):
    acc, model = parts.accelerator, parts.model
    with acc.accumulate(model):
        loss = loss_of(batch)
        acc.backward(loss)
        if acc.sync_gradients and max_grad_norm:
            acc.clip_grad_norm_(model.parameters(), max_grad_norm)
        parts.optimizer.step()  # a no-op until the last micro-batch of an accumulation
        if acc.sync_gradients:
            parts.scheduler.step()
        parts.optimizer.zero_grad()
    return loss


def train_loop(
    parts: LoopParts,
    state: TrainerState,
    args: RunArguments,
    loss_of: Callable[[Any], torch.Tensor],
    report: Callable[[TrainerState, bool], None] | None = None,
) -> tuple[TrainerState, bool]:
    """Train from ``state`` to ``parts.total_steps``, checkpointing every ``args.checkpointing_steps``.

    Args:
        loss_of: batch -> loss (the task's forward pass; random draws in it replay exactly on resume).
        report: called after every optimizer step with the state and whether an epoch just ended (evaluation);
            the model is put back in training mode afterwards.

    Returns:
        The state it ended in and whether ``--stop_after_steps`` stopped it.
    """
    acc, model = parts.accelerator, parts.model
    progress = tqdm(
        total=parts.total_steps, initial=state.completed_steps, disable=args.disable_tqdm or not acc.is_main_process
    )
    while state.completed_steps < parts.total_steps:
        parts.train_dl.set_epoch(state.epoch)
        skip = state.batches_in_epoch
        batches = acc.skip_first_batches(parts.train_dl, skip) if skip else parts.train_dl
        model.train()
        for batch in batches:
            micro_step = state.epoch * len(parts.train_dl) + state.batches_in_epoch
            torch.manual_seed(step_seed(args.seed, micro_step, acc.process_index, acc.num_processes))
            loss = _optimizer_step(parts, loss_of, batch, args.max_grad_norm)
            state.batches_in_epoch += 1
            if not acc.sync_gradients:
                continue
            state.completed_steps += 1
            progress.update(1)
            progress.set_postfix(loss=f"{loss.item():.4f}", epoch=state.epoch)
            epoch_ended = state.batches_in_epoch == len(parts.train_dl)
            if epoch_ended:
                state.epoch, state.batches_in_epoch = state.epoch + 1, 0
            if report is not None:
                report(state, epoch_ended)
                model.train()
            if state.completed_steps % args.checkpointing_steps == 0:
                parts.ckpt.save(state)
            if args.stop_after_steps is not None and state.completed_steps >= args.stop_after_steps:
                acc.print(f"stopped after step {state.completed_steps} (--stop_after_steps)")
                release_process_group()
                return state, True
            if state.completed_steps >= parts.total_steps:
                break
    progress.close()
    return state, False


def card_hyperparameters(args: RunArguments, results: dict[str, Any], left_out: Sequence[str] = ()) -> dict[str, Any]:
    """The training arguments worth a line of the model card, as the run used them (``left_out``: those that do not
    apply to the run), and how long it ran (``results``' ``completed_steps`` and ``epochs``).

    The run's length is what bounded it: ``max_train_steps`` when given (which overrides the epochs, so
    ``num_train_epochs`` is left out: a 60-step run was no 50-epoch run), else ``num_train_epochs``.
    """
    by_steps = bool(args.max_train_steps)  # count_total_steps' rule
    skipped = ("output_dir", "hub_model_id", "push_to_hub", "num_train_epochs" if by_steps else "max_train_steps")
    hyper = {k: v for k, v in asdict(args).items() if k not in (*skipped, *left_out)}
    hyper |= {key: results[key] for key in ("completed_steps", "epochs") if key in results}
    hyper["world_size"] = results["world_size"]
    return hyper


def run_model_card(
    template: str | os.PathLike,
    model: torch.nn.Module,
    args: RunArguments,
    results: dict[str, Any],
    argv: Sequence[str],
    *,
    task: str,
    split: str,
    metrics: dict[str, float],
    dataset: str,
    built_in: tuple[str, str] | None = None,
    base_model: str | None = None,
    left_out: Sequence[str] = (),
    **card_kwargs: Any,
) -> ModelCard:
    """The model card of a finished run of ``hf-xcv-train <task>``: ``metrics`` measured on ``split`` as its
    model-index, the run's hyperparameters and command line.

    Args:
        dataset: the ``--dataset`` the run read; ``built_in`` = (that option's value for the built-in data, the id a
            card names it by). Any other dataset is named by its Hub id or folder name, and listed as a Hub dataset
            when it is one.
        card_kwargs: further arguments of :func:`~hf_xcv.model_card.build_model_card` (task type, tags,
            template variables, ...).
    """
    own = built_in is not None and dataset == built_in[0]
    dataset_id = built_in[1] if own else dataset_label(dataset)
    card_kwargs.setdefault("dataset_name", dataset_id)
    return build_model_card(
        template, model, repo_id=args.hub_model_id or Path(args.output_dir).name, dataset_id=dataset_id,
        results=[MeasuredResult(metric, value, split) for metric, value in metrics.items()],
        hyperparameters=card_hyperparameters(args, results, left_out),
        command=script_command(f"hf-xcv-train {task}", argv), base_model=base_model,
        dataset_on_hub=not own and hub_id(dataset) is not None, **card_kwargs,
    )  # fmt: skip


def script_command(command: str, argv: Sequence[str]) -> str:
    """The command line that reproduces a run: the installed command (``hf-xcv-train <task>``) and its arguments."""
    return f"{command} {shlex.join(argv)}".rstrip()


def save_final(
    accelerator: Accelerator,
    model: torch.nn.Module,
    components: Sequence[Any],
    out: Path,
    results: dict[str, Any],
    card_for: Callable[[Any], ModelCard],
) -> None:
    """Model, ``components`` (processor, tokenizer), model card and results into ``out``, each file moved in only
    when complete. ``card_for`` builds the card from the unwrapped model. Main process only."""
    if not accelerator.is_main_process:
        return
    staging = out / FINAL_STAGING
    shutil.rmtree(staging, ignore_errors=True)  # left by a run killed while saving
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained(staging)
    for component in components:
        component.save_pretrained(staging)
    write_model_card(card_for(unwrapped), staging)
    (staging / FINAL_RESULTS).write_text(json.dumps(results, indent=2))
    for file in staging.iterdir():
        os.replace(file, out / file.name)
    staging.rmdir()


def finish(
    parts: LoopParts,
    state: TrainerState,
    args: RunArguments,
    scores: dict[str, Callable[[], dict[str, Any]]],
    components: Sequence[Any],
    card_for: Callable[..., ModelCard],
) -> dict[str, Any]:
    """Score the splits, save the final folder (:func:`save_final`), push it when asked, and end the run.

    Args:
        scores: split name -> a function scoring it (every process calls it).
        components: what is saved beside the model (processor, tokenizer).
        card_for: ``card_for(model, results=results)`` -> the model card.

    Returns:
        ``results``: each split's scores, ``world_size``, ``completed_steps`` and ``epochs`` (the epochs run, a
        fraction where the steps ended one part-way; also in all_results.json).
    """
    acc, out = parts.accelerator, Path(args.output_dir)
    results = {split: score() for split, score in scores.items()}
    epochs = state.epoch + state.batches_in_epoch / len(parts.train_dl)
    results |= {"world_size": acc.num_processes, "completed_steps": state.completed_steps, "epochs": round(epochs, 4)}
    acc.print(json.dumps(results, indent=2, ensure_ascii=False))
    save_final(acc, parts.model, components, out, results, lambda model: card_for(model, results=results))
    acc.wait_for_everyone()
    if args.push_to_hub and acc.is_main_process:
        url = push_folder_to_hub(out, args.hub_model_id or out.name, private=args.hub_private)
        acc.print(f"pushed to {url}")
    acc.end_training()
    release_process_group()
    return results


def release_process_group() -> None:
    """Destroy the default process group (multi-process runs) while the script still runs Python code.

    Left to the garbage collector (when the script's DDP model is freed), gloo's destructor joins its worker thread
    while holding the GIL, and that thread may be waiting for the GIL to free a tensor of the last barrier: a
    deadlock after the run ended, seen once in a loaded CI run (torch 2.13). ``destroy_process_group`` shuts the
    workers down first.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
