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

The same calls train one process, DDP or FSDP2 (``accelerate launch --config_file examples/accelerate/fsdp2.yaml``,
also on CPU processes: :func:`shard_on_cpu`). Under FSDP2 a process holds shards only: :func:`prepare_loop` shards
what accelerate's own units get wrong for these models, scoring runs with the weights gathered (:func:`unsharded`),
and a script that runs the model on the main process alone (pictures) asks for :func:`full_model` on every process.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import math
import os
import shlex
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.state import PartialState
from accelerate.utils import (
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    DistributedType,
    FullyShardedDataParallelPlugin,
    set_seed,
)
from huggingface_hub import ModelCard
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import get_scheduler

from ..model_card import MeasuredResult, build_model_card, dataset_label, hub_id, write_model_card
from ..utils.errors import UsageError
from .checkpointing import (
    FINAL_RESULTS,
    TRAIN_LOG,
    CheckpointManager,
    TrainerState,
    changes_made,
    check_output_dir,
    commit_final,
    describe_changes,
    prepare_output_dir,
    record_changes,
    refuse_changed_arguments,
    release_output_dir,
    settle_changes,
    write_final_staging,
    write_text_atomic,
)
from .ema import ModelEma, mark_weights
from .hub import push_folder_to_hub
from .schedules import get_noam_schedule

FINAL_STAGING = ".final-staging"
RAW_WEIGHTS_DIR = "raw_weights"  # the final folder's raw weights, beside the EMA ones (--model_ema)
MIXED_PRECISIONS = ("no", "fp16", "bf16")


@dataclass
class RunArguments:
    """Arguments every training script takes; a script subclasses it to add its own and change defaults."""

    output_dir: str = field(metadata={"help": "run folder: checkpoints and the final Hub-ready model"})
    overwrite_output_dir: bool = False
    resume_from_checkpoint: str | None = field(default=None, metadata={"help": "'latest' or a checkpoint folder"})
    allow_changed_args: bool = field(
        default=False,
        metadata={"help": "resume with arguments that change the run (batch size, learning rate, ...); recorded"},
    )
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
    logging_steps: int = field(
        default=10, metadata={"help": f"append the training loss to {TRAIN_LOG} every N optimizer steps (0: never)"}
    )
    checkpoints_total_limit: int = 2
    stop_after_steps: int | None = field(
        default=None, metadata={"help": "stop after N steps as an interrupted run would (no final save)"}
    )
    model_ema: bool = field(
        default=False,
        metadata={
            "help": "keep an exponential moving average of the weights (timm's ModelEmaV3), updated after every "
            "optimizer step and checkpointed; scored and saved as the final model, the raw weights in "
            f"{RAW_WEIGHTS_DIR}/"
        },
    )
    model_ema_decay: float = field(default=0.9998, metadata={"help": "the EMA's decay (timm's default)"})
    model_ema_warmup: bool = field(
        default=False, metadata={"help": "ramp the EMA's decay up as 1 - (1 + step) ** (-2/3) (timm's warm-up)"}
    )
    use_cpu: bool = field(default=False, metadata={"help": "train on the CPU even where a GPU is present"})
    disable_tqdm: bool = False
    push_to_hub: bool = False
    hub_model_id: str | None = None
    hub_private: bool = False

    def __post_init__(self) -> None:
        """Refuse settings no run can use before anything is written (a recipe fills the ones left None later)."""
        least = {
            "num_train_epochs": 1,
            "max_train_steps": 1,
            "per_device_train_batch_size": 1,
            "per_device_eval_batch_size": 1,
            "gradient_accumulation_steps": 1,
            "checkpointing_steps": 1,
            "logging_steps": 0,
            "checkpoints_total_limit": 1,
            "stop_after_steps": 1,
        }
        for name, minimum in least.items():
            value = getattr(self, name, None)
            if value is not None and value < minimum:
                raise UsageError(f"--{name} must be an integer >= {minimum}, got {value}")
        if self.mixed_precision not in MIXED_PRECISIONS:
            raise UsageError(f"--mixed_precision must be one of {list(MIXED_PRECISIONS)}, got {self.mixed_precision!r}")
        for name in ("learning_rate", "max_grad_norm"):
            value = getattr(self, name, None)
            if value is not None and not value >= 0:
                raise UsageError(f"--{name} must be a number >= 0, got {value}")
        if self.model_ema_decay is not None and not 0.0 <= self.model_ema_decay <= 1.0:
            raise UsageError(f"--model_ema_decay must lie in [0, 1], got {self.model_ema_decay}")


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
    ema: ModelEma | None = None  # --model_ema: the average of the weights (see :func:`track_ema`)


def has_accelerator_device() -> bool:
    if hasattr(torch, "accelerator"):
        return torch.accelerator.is_available()
    return torch.cuda.is_available()


def parse_overrides(text: str | None) -> dict[str, Any]:
    """'a=1,b=0.1,c=mean' or '{"a": 1, "image_size": [32, 32]}' -> dict (JSON values, else strings)."""
    text = (text or "").strip()
    if text.startswith("{"):
        try:
            overrides = json.loads(text)
        except json.JSONDecodeError as err:
            raise UsageError(f"--config_overrides is not a valid JSON object ({err}): {text!r}") from None
        if not isinstance(overrides, dict):
            raise UsageError(f"--config_overrides must be a JSON object, got {text!r}")
        return overrides
    overrides: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--config_overrides expects key=value pairs or a JSON object, got {item!r}")
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
    accelerator = Accelerator(
        kwargs_handlers=handlers,
        cpu=args.use_cpu or not has_accelerator_device(),  # multi-process CPU runs need cpu=True (gloo)
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
        # The loop steps the scheduler once per optimizer step, so schedules count optimizer steps whatever the
        # number of processes (accelerate would otherwise step it once per process).
        step_scheduler_with_optimizer=False,
    )
    shard_on_cpu(accelerator)
    return accelerator


def shard_on_cpu(accelerator: Accelerator) -> None:
    """Train with FSDP where ``accelerate launch`` was asked for it (an FSDP config) on CPU processes too.

    accelerate turns an FSDP config into ``DistributedType.FSDP`` only on accelerator devices (GPU, XPU, ...); on
    the CPU it sets ``MULTI_CPU`` and keeps quiet, so the run would train with DDP. FSDP2's ``fully_shard`` works on
    a CPU mesh over gloo, so the run's state is given the distributed type and plugin the config asks for, and
    accelerate's own FSDP code then shards the model, clips, checkpoints and gathers the final weights as on GPUs.
    """
    asked = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"  # how accelerate reads it
    if not asked or accelerator.distributed_type != DistributedType.MULTI_CPU:
        return
    plugin = FullyShardedDataParallelPlugin()  # read from the FSDP_* variables accelerate launch sets
    if plugin.fsdp_version != 2:
        raise UsageError("FSDP on CPU processes needs FSDP2: fsdp_version: 2 in the accelerate config")
    if accelerator.mixed_precision != "no":
        plugin.set_mixed_precision(accelerator.mixed_precision)
    accelerator.state.fsdp_plugin = plugin
    accelerator.state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP


def prepare_run(accelerator: Accelerator, args: RunArguments, **more_args: Any) -> Path:
    """Every process checks the folder (so all fail alike), then the main process prepares it.

    The run's arguments (``args`` as "train", and each dataclass of ``more_args`` under its name) are recorded at the
    first start. A resume whose arguments would change the run is refused with the differences listed, unless
    ``--allow_changed_args``: then the changes are recorded, with the step they apply from (:func:`resume_state`).
    """
    out = Path(args.output_dir)
    resume = args.resume_from_checkpoint is not None
    run_args = {name: asdict(value) for name, value in more_args.items()} | {"train": asdict(args)}
    resuming = check_output_dir(out, args.overwrite_output_dir, resume) == "resume"
    changed = refuse_changed_arguments(out, run_args, args.allow_changed_args) if resuming else {}
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        prepare_output_dir(out, args.overwrite_output_dir, resume, run_args)
        if resuming:
            record_changes(out, changed)
    if changed:
        accelerator.print(f"resuming with changed arguments (--allow_changed_args): {describe_changes(changed)}")
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
            raise UsageError(f"dataset {name!r} already has a {split!r} split; drop the option that holds one out")
        if not 0.0 < fraction < 1.0:
            raise UsageError(f"the fraction held out as {split!r} must lie in (0, 1), got {fraction}")
        count = max(1, round(fraction * total))
        parts = data["train"].train_test_split(test_size=count, seed=seed, stratify_by_column=stratify_by)
        data["train"], data[split] = parts["train"], parts["test"]
    for split in splits:
        if split not in data:
            hint = f" (hold part of train out as it: --train_{split}_split 0.1)" if held_out is not None else ""
            raise UsageError(f"dataset {name!r} has no {split!r} split{hint}; splits: {list(data)}")
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
            raise UsageError("lr_scheduler_type='noam' needs the model's d_model")
        return get_noam_schedule(optimizer, d_model, warmup_steps, factor=lr_factor)
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps)


def resume_state(ckpt: CheckpointManager, args: RunArguments) -> TrainerState:
    """A fresh state, or the one of ``--resume_from_checkpoint`` with model, optimizer and RNGs restored."""
    ckpt.clean_staging()
    if not args.resume_from_checkpoint:
        return TrainerState()
    path, state = ckpt.resume(args.resume_from_checkpoint)
    if ckpt.accelerator.is_main_process:
        settle_changes(ckpt.root.parent, state.completed_steps)  # the changes the resume may make start here
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

    Under FSDP2 the units are chosen (:func:`choose_shard_units`) and the embeddings sharded
    (:func:`shard_embeddings`) before the optimizer is made, and accelerate shards the rest.

    Returns:
        The loop's parts (the prepared model is ``parts.model``), the state, and the prepared ``loaders[1:]``.
    """
    total_steps = count_total_steps(args, len(loaders[0]), accelerator.num_processes)
    if accelerator.is_fsdp2:
        if accelerator.state.fsdp_plugin.cpu_ram_efficient_loading:
            raise UsageError(
                "fsdp_cpu_ram_efficient_loading: true is not supported: every process builds the whole model (from "
                "a preset or a checkpoint) before it is sharded; set it to false in the accelerate config"
            )
        choose_shard_units(accelerator.state.fsdp_plugin, model)
        shard_embeddings(accelerator, model)  # before the optimizer is made: it holds the sharded parameters
    optimizer, scheduler = optimizer_for(model, total_steps)
    with _input_embeddings_or_none(model):
        model, optimizer, scheduler, *loaders = accelerator.prepare(model, optimizer, scheduler, *loaders)
    if accelerator.is_fsdp2:
        # transformers' generate then keeps every process decoding until all are done (synced_gpus): each step
        # gathers the shards of every process, so one that stopped early would leave the others waiting
        accelerator.unwrap_model(model)._is_fsdp_managed_module = True
    mark_weights(accelerator.unwrap_model(model), None)  # trained from here: no longer a checkpoint's EMA weights
    ckpt = CheckpointManager(out, accelerator, args.checkpoints_total_limit)
    ema = track_ema(accelerator, model, args) if args.model_ema else None
    parts = LoopParts(accelerator, model, optimizer, scheduler, loaders[0], ckpt, total_steps, ema)
    return parts, resume_state(ckpt, args), loaders[1:]


def track_ema(accelerator: Accelerator, model: torch.nn.Module, args: RunArguments) -> ModelEma:
    """The EMA of the prepared ``model``'s weights (``--model_ema``; under FSDP2 of its shards), saved into every
    checkpoint as ``ema.safetensors`` and restored from it on resume (accelerate's save / load hooks), bit for bit.

    A checkpoint without one (a run resumed with ``--model_ema`` added, ``--allow_changed_args``) restarts the
    average from the resumed weights at the next step."""
    ema = ModelEma(accelerator.unwrap_model(model), decay=args.model_ema_decay, use_warmup=args.model_ema_warmup)

    def save(_models: Any, _weights: Any, folder: str) -> None:
        ema.save(folder, main_process=accelerator.is_main_process)

    def load(_models: Any, folder: str) -> None:
        try:
            ema.load(folder)
        except FileNotFoundError as missing:
            accelerator.print(f"{missing}; the EMA restarts from the resumed weights")
            ema.restart()

    accelerator.register_save_state_pre_hook(save)
    accelerator.register_load_state_pre_hook(load)
    return ema


@contextlib.contextmanager
def ema_weights(parts: LoopParts, lazily: bool = False) -> Iterator[None]:
    """Within: the prepared model holds the EMA weights where the run keeps them (``--model_ema``; else nothing
    changes). ``lazily``: from its first forward pass only (see :meth:`~.ema.ModelEma.swapped_in`); under FSDP2
    enter it inside :func:`unsharded`."""
    if parts.ema is None:
        yield
        return
    with parts.ema.swapped_in(parts.accelerator.unwrap_model(parts.model), lazily=lazily):
        yield


def choose_shard_units(plugin: FullyShardedDataParallelPlugin, model: torch.nn.Module) -> None:
    """The blocks FSDP2 shards one by one, where the config's ``TRANSFORMER_BASED_WRAP`` names none: the model's
    ``_no_split_modules``, and the encoder of a model that generates (``generate`` runs it alone, and a module
    whose parameters sit in the root's unit cannot run outside the whole model's forward pass)."""
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    if plugin.auto_wrap_policy is not transformer_auto_wrap_policy or plugin.transformer_cls_names_to_wrap:
        return
    names = set(getattr(model, "_no_split_modules", None) or ())
    if getattr(model, "can_generate", lambda: False)() and model.get_encoder() is not model:
        names.add(type(model.get_encoder()).__name__)
    plugin.transformer_cls_names_to_wrap = sorted(names & {type(module).__name__ for module in model.modules()})


def shard_embeddings(accelerator: Accelerator, model: torch.nn.Module) -> None:
    """Shard the input embeddings, with every module that shares a parameter with them, before accelerate shards
    the rest: accelerate's own embedding units fail for the models here.

    FSDP2 refuses a parameter seen by two units, and accelerate puts only the input and output embeddings into
    one, while the Transformer's shared vocabulary ties three modules (source and target embeddings, output
    projection); and accelerate shards the input embeddings after the blocks, which fails where a block holds
    them (ViT's and Swin's patch embeddings sit in their ``*Embeddings`` block). Tied modules are one unit kept
    gathered from the forward pass to the backward one, as accelerate keeps its tied embeddings.
    """
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    plugin, mesh = accelerator.state.fsdp_plugin, accelerator.torch_device_mesh
    kwargs = {
        "mesh": mesh[tuple(accelerator.parallelism_config.fsdp_dim_names)] if mesh is not None else None,
        "offload_policy": plugin.cpu_offload,
        "mp_policy": plugin.mixed_precision_policy or MixedPrecisionPolicy(),
    }
    tied = _tied_modules(model)
    if tied:
        fully_shard(tied, reshard_after_forward=False, **kwargs)
    embeddings = _input_embeddings(model)
    if isinstance(embeddings, torch.nn.Module) and not isinstance(embeddings, FSDPModule):
        fully_shard(embeddings, reshard_after_forward=plugin.reshard_after_forward, **kwargs)


def _input_embeddings(model: torch.nn.Module) -> torch.nn.Module | None:
    try:
        return model.get_input_embeddings()
    except (AttributeError, NotImplementedError):  # transformers' getter raises for a model without any (TTSR, IPT)
        return None


@contextlib.contextmanager
def _input_embeddings_or_none(model: torch.nn.Module) -> Iterator[None]:
    """Within: ``model.get_input_embeddings()`` answers None where it would raise. accelerate's FSDP2 preparation
    asks every model for its input embeddings and does not expect transformers' NotImplementedError of a model
    that has none (an image-to-image model)."""
    if _input_embeddings(model) is not None or not hasattr(model, "get_input_embeddings"):
        yield
        return
    model.get_input_embeddings = lambda: None  # an instance attribute, over the class's method
    try:
        yield
    finally:
        del model.get_input_embeddings


def _tied_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules that hold a parameter which another module holds too."""
    holders: dict[int, list[torch.nn.Module]] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            holders.setdefault(id(param), []).append(module)
    return list({id(m): m for group in holders.values() if len(group) > 1 for m in group}.values())


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


class LossLog:
    """The training loss of every ``every``-th optimizer step, averaged over its micro-batches and over the
    processes, with the learning rate, as JSON lines in ``path`` (main process); ``echo`` prints them too."""

    def __init__(self, accelerator: Accelerator, path: Path, every: int, echo: bool = False):
        self.accelerator, self.path, self.every, self.echo = accelerator, path, every, echo
        self.total, self.count = 0.0, 0

    def add(self, loss: torch.Tensor) -> None:
        """One micro-batch's loss."""
        self.total, self.count = self.total + loss.detach().float(), self.count + 1

    def step(self, step: int, learning_rate: float) -> None:
        """An optimizer step ended (every process calls it: the mean over processes is a collective)."""
        mean, self.total, self.count = self.total / max(self.count, 1), 0.0, 0
        if not self.every or step % self.every:
            return
        loss = self.accelerator.reduce(torch.as_tensor(mean, device=self.accelerator.device), "mean").item()
        if self.accelerator.is_main_process:
            with self.path.open("a") as file:
                file.write(json.dumps({"step": step, "loss": loss, "learning_rate": learning_rate}) + "\n")
        if self.echo:
            self.accelerator.print(f"step {step}: loss {loss:.4f} learning_rate {learning_rate:.3g}")

    def keep_until(self, step: int) -> None:
        """Drop the lines of steps after ``step`` (those of a run stopped after its last checkpoint)."""
        if self.accelerator.is_main_process and self.path.exists():
            lines = [line for line in self.path.read_text().splitlines() if json.loads(line)["step"] <= step]
            write_text_atomic(self.path, "".join(f"{line}\n" for line in lines))


def set_epoch(loader: DataLoader, epoch: int) -> None:
    """Start ``epoch`` in the prepared ``loader``: its sampler's order and its dataset's per-epoch draws (a dataset
    with ``set_epoch``, such as a seeded augmentation). accelerate's own ``set_epoch`` reaches the dataset only when
    no sharded sampler takes the call first, which is never the case with several processes."""
    loader.set_epoch(epoch)
    dataset = getattr(loader, "dataset", None)
    if hasattr(dataset, "set_epoch"):
        dataset.set_epoch(epoch)


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
            the model is put back in training mode afterwards. With ``--model_ema`` it runs the model with the EMA
            weights (swapped in at its first forward pass, and out afterwards).

    Returns:
        The state it ended in and whether ``--stop_after_steps`` stopped it.
    """
    acc, model = parts.accelerator, parts.model
    progress = tqdm(
        total=parts.total_steps, initial=state.completed_steps, disable=args.disable_tqdm or not acc.is_main_process
    )
    log = LossLog(acc, Path(args.output_dir) / TRAIN_LOG, args.logging_steps, echo=args.disable_tqdm)
    log.keep_until(state.completed_steps)  # a resumed run logs the steps after its checkpoint again
    while state.completed_steps < parts.total_steps:
        set_epoch(parts.train_dl, state.epoch)
        skip = state.batches_in_epoch
        batches = acc.skip_first_batches(parts.train_dl, skip) if skip else parts.train_dl
        model.train()
        for batch in batches:
            micro_step = state.epoch * len(parts.train_dl) + state.batches_in_epoch
            torch.manual_seed(step_seed(args.seed, micro_step, acc.process_index, acc.num_processes))
            loss = _optimizer_step(parts, loss_of, batch, args.max_grad_norm)
            log.add(loss)
            state.batches_in_epoch += 1
            if not acc.sync_gradients:
                continue
            state.completed_steps += 1
            if parts.ema is not None:
                parts.ema.update(acc.unwrap_model(model), state.completed_steps)
            log.step(state.completed_steps, parts.optimizer.param_groups[0]["lr"])
            progress.update(1)
            progress.set_postfix(loss=f"{loss.item():.4f}", epoch=state.epoch)
            epoch_ended = state.batches_in_epoch == len(parts.train_dl)
            if epoch_ended:
                state.epoch, state.batches_in_epoch = state.epoch + 1, 0
            if report is not None:
                with unsharded(acc, model), ema_weights(parts, lazily=True):
                    report(state, epoch_ended)
                model.train()
            if state.completed_steps % args.checkpointing_steps == 0:
                parts.ckpt.save(state)
            if args.stop_after_steps is not None and state.completed_steps >= args.stop_after_steps:
                acc.print(f"stopped after step {state.completed_steps} (--stop_after_steps)")
                acc.wait_for_everyone()  # no process leaves while another still sends (see release_process_group)
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
    skipped += ("allow_changed_args",)
    if not getattr(args, "model_ema", False):
        skipped += ("model_ema", "model_ema_decay", "model_ema_warmup")
    hyper = {k: v for k, v in asdict(args).items() if k not in (*skipped, *left_out)}
    hyper |= {key: results[key] for key in ("completed_steps", "epochs") if key in results}
    hyper["world_size"] = results["world_size"]
    if results.get("ema_weights"):
        ema = results["ema_weights"]
        hyper["weights"] = (
            f"EMA of the weights (decay {ema['decay']}{', warm-up' if ema['use_warmup'] else ''}, "
            f"{ema['updates']} updates); the raw weights in {RAW_WEIGHTS_DIR}/"
        )
    if results.get("changed_args"):  # what resumes changed, at which step (the values above are the last ones)
        hyper["changed_on_resume"] = "; ".join(
            f"from step {change['step']}: {describe_changes(change['changed'])}" for change in results["changed_args"]
        )
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


@contextlib.contextmanager
def unsharded(accelerator: Accelerator, model: torch.nn.Module) -> Iterator[None]:
    """Within: the prepared ``model`` may run a different number of times on each process (evaluation: IPT cuts
    each image into as many patches as its size asks, beam search stops when its beams end). Every process enters
    and leaves it together, and runs the model first in the same way (the first batch).

    Under FSDP2 each forward pass gathers every shard unit's weights from all processes, which must then run the
    same passes in step. Here the first forward pass of any unit gathers all the units instead, which stay so
    until the exit shards them again. A block that runs no forward pass (a report that evaluates nothing) costs
    nothing. Without FSDP: nothing to do.
    """
    from torch.distributed.fsdp import FSDPModule

    if not accelerator.is_fsdp2:
        yield
        return
    units = [module for module in model.modules() if isinstance(module, FSDPModule)]
    # A unit's reshard-after-forward setting is its parameter groups' post-forward mesh (None: keep the weights);
    # the public setter could not give back the root's and the tied embeddings' "keep" afterwards.
    groups = [group for unit in units for group in _param_groups(unit)]
    settings = [group.post_forward_mesh_info for group in groups]
    gathered = []

    def gather_all(*_: Any) -> None:
        if gathered:
            return
        gathered.append(True)
        for group in groups:
            group.post_forward_mesh_info = None
        for unit in units:  # in the same order on every process
            unit.unshard()

    hooks = [unit.register_forward_pre_hook(gather_all, prepend=True) for unit in units]  # before FSDP's own
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
        if gathered:
            for group, setting in zip(groups, settings):
                group.post_forward_mesh_info = setting
            for unit in units:
                unit.reshard()


def _param_groups(unit: torch.nn.Module) -> list[Any]:
    """An FSDP2 unit's parameter groups (torch 2.13 may hold several a unit; earlier releases one or none)."""
    state = unit._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:
        groups = [state._fsdp_param_group] if state._fsdp_param_group is not None else []
    return list(groups)


def full_model(accelerator: Accelerator, model: torch.nn.Module) -> torch.nn.Module | None:
    """The prepared ``model`` as one whole, plain module on the main process (None on the others), to save it or
    run it there alone (pictures); every process must call it.

    Without FSDP that is the unwrapped model itself. Under FSDP2 every process holds a shard of each weight and a
    forward pass gathers the others' (so one process cannot run it alone): the weights are gathered whole into
    the main process's CPU memory and put into a copy of the model built without allocating its own
    (:func:`_unsharded_copy`), on the CPU.
    """
    if not accelerator.is_fsdp2:
        return accelerator.unwrap_model(model) if accelerator.is_main_process else None
    weights = accelerator.get_state_dict(model)  # full, on the main process's CPU; empty on the others
    if not accelerator.is_main_process:
        return None
    return _unsharded_copy(accelerator.unwrap_model(model), weights)


# What a model carries besides its config and weights, and what the copy must keep: the generation settings
# (translation's beams) and where it was loaded from (which its model card reads).
_CARRIED = ("generation_config", "_loaded_from")


def _unsharded_copy(sharded: torch.nn.Module, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A plain model of ``sharded``'s class and config holding ``weights``: its parameters are the tensors of
    ``weights`` themselves, its buffers computed afresh (those not saved, such as position tables) or loaded."""
    from accelerate import init_empty_weights
    from torch.distributed.fsdp import FSDPModule

    # fully_shard swaps the module's class for a subclass of FSDPModule and the original
    cls = next(c for c in type(sharded).__mro__ if not issubclass(c, FSDPModule))
    with init_empty_weights(include_buffers=False):
        plain = cls(sharded.config)
    plain.load_state_dict(weights, assign=True)
    plain.tie_weights()  # assign gave each tied name a tensor of its own
    for name in _CARRIED:
        if hasattr(sharded, name):
            setattr(plain, name, getattr(sharded, name))
    return plain.train(sharded.training)


def save_final(
    accelerator: Accelerator,
    model: torch.nn.Module,
    components: Sequence[Any],
    out: Path,
    results: dict[str, Any],
    card_for: Callable[[Any], ModelCard],
    ema: ModelEma | None = None,
) -> None:
    """Model, ``components`` (processor, tokenizer), model card and results into ``out``: written to a staging folder
    and flushed to the disk, then moved in with the results file last (:func:`~.checkpointing.commit_final`), so a
    kill at any moment leaves a finished folder or an unfinished run that resumes. A full disk raises
    :class:`~.checkpointing.DiskFullError` before anything is moved. ``card_for`` builds the card from the whole model
    (:func:`full_model`). Every process calls it; the main process writes.

    With ``ema`` (``--model_ema``) the model saved is the EMA of the weights, its ``config.json`` recording it
    (``ema_weights``: decay, warm-up, updates; see :mod:`.ema`), and the raw weights go into ``raw_weights/`` (with
    their config, without that record): ``from_pretrained(out, subfolder="raw_weights")`` loads them."""
    raw = _whole_weights(accelerator, model) if ema is not None else None  # every process: FSDP gathers
    with ema.swapped_in(accelerator.unwrap_model(model)) if ema is not None else contextlib.nullcontext():
        unwrapped = full_model(accelerator, model)  # every process: under FSDP each sends its shards
        if not accelerator.is_main_process:
            return

        def write(staging: Path) -> None:
            if raw is not None:
                unwrapped.save_pretrained(staging / RAW_WEIGHTS_DIR, state_dict=dict(raw))
            mark_weights(unwrapped, ema)
            try:
                unwrapped.save_pretrained(staging)
                for component in components:
                    component.save_pretrained(staging)
                write_model_card(card_for(unwrapped), staging)
            finally:
                mark_weights(unwrapped, None)
            (staging / FINAL_RESULTS).write_text(json.dumps(results, indent=2))

        staging = out / FINAL_STAGING
        write_final_staging(staging, write)
        commit_final(staging, out)


def _whole_weights(accelerator: Accelerator, model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The prepared ``model``'s state dict, whole, copied to the main process's CPU (None on the others); every
    process must call it."""
    weights = accelerator.get_state_dict(model)  # under FSDP2 gathered anew; else the live tensors
    if not accelerator.is_main_process:
        return None
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights.items()}


def finish(
    parts: LoopParts,
    state: TrainerState,
    args: RunArguments,
    scores: dict[str, Callable[[], dict[str, Any]]],
    components: Sequence[Any],
    card_for: Callable[..., ModelCard],
    data_report: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Score the splits, save the final folder (:func:`save_final`), push it when asked, and end the run.

    Args:
        scores: split name -> a function scoring it (every process calls it).
        components: what is saved beside the model (processor, tokenizer).
        card_for: ``card_for(model, results=results)`` -> the model card.
        data_report: what the dataset check found and did (e.g. annotations and images dropped by
            ``--drop_invalid_annotations``), recorded as ``results["data"]`` (all_results.json, the card).

    Returns:
        ``results``: each split's scores, ``world_size``, ``completed_steps`` and ``epochs`` (the epochs run, a
        fraction where the steps ended one part-way; also in all_results.json). With ``--model_ema`` the splits'
        scores are those of the EMA weights (the model saved), ``ema_weights`` its settings and updates, and
        ``raw_weights`` the scores of the raw weights (saved in ``raw_weights/``).
    """
    acc, out = parts.accelerator, Path(args.output_dir)
    with ema_weights(parts), unsharded(acc, parts.model):
        results = {split: score() for split, score in scores.items()}
    if parts.ema is not None:
        with unsharded(acc, parts.model):
            raw_results = {split: score() for split, score in scores.items()}
        results |= {"ema_weights": parts.ema.describe(), "raw_weights": raw_results}
    epochs = state.epoch + state.batches_in_epoch / len(parts.train_dl)
    results |= {"world_size": acc.num_processes, "completed_steps": state.completed_steps, "epochs": round(epochs, 4)}
    if data_report:
        results["data"] = data_report
    changes = changes_made(out)  # what resumes with --allow_changed_args changed, and from which step
    if changes:
        results["changed_args"] = changes
    acc.print(json.dumps(results, indent=2, ensure_ascii=False))
    card = lambda model: card_for(model, results=results)  # noqa: E731
    save_final(acc, parts.model, components, out, results, card, ema=parts.ema)
    acc.wait_for_everyone()
    if args.push_to_hub and acc.is_main_process:
        url = push_folder_to_hub(out, args.hub_model_id or out.name, private=args.hub_private)
        acc.print(f"pushed to {url}")
    for tracker in acc.trackers:  # what end_training does, but the process group stays: release_process_group
        tracker.finish()
    return results


def distributed_main(main: Callable[..., Any]) -> Callable[..., Any]:
    """Decorates a training script's ``main``: however it ends (its results, ``--stop_after_steps``, an error),
    nothing distributed outlives it (see :func:`release_process_group`), so the process exits cleanly and the
    script's ``main`` can run again in the same process."""

    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return main(*args, **kwargs)
        except BaseException as error:
            traceback.clear_frames(error.__traceback__)  # the frames' locals hold the prepared model
            raise
        finally:
            release_process_group()

    return run


def release_process_group() -> None:
    """End a multi-process run while the script still runs Python code: free the prepared model and its DDP
    reducer, then destroy the process group, and forget accelerate's state of it.

    Left to interpreter exit, the reducer (which keeps its own reference to the process group) is freed last and
    gloo's destructor joins its worker thread while holding the GIL; that thread may be waiting for the GIL to
    free a tensor of the last barrier: a deadlock after the run ended (seen in loaded CI runs, torch 2.13).
    Destroying the group while the reducer lives does not help, for the same reason. So: the caller's frames are
    gone (:func:`distributed_main`), a collection frees the model, a reducer still reachable from elsewhere is
    dropped, and only then is the group destroyed, with no work pending.
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    from torch.nn.parallel import DistributedDataParallel

    gc.collect()
    for alive in gc.get_objects():
        if isinstance(alive, DistributedDataParallel) and "reducer" in alive.__dict__:
            del alive.reducer  # held beyond the run by someone else: it must not keep the group
    gc.collect()
    torch.distributed.destroy_process_group()
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # a later run in this process starts a new group
