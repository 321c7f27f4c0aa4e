"""An exponential moving average (EMA) of a model's weights, as timm's ``ModelEmaV3``, for the accelerate runner
(``--model_ema``) and for transformers' Trainer (:class:`EmaCallback`).

The decay and its warm-up are timm's (``timm/utils/model_ema.py``, ``ModelEmaV3.get_decay``; its ``train.py`` calls
``update(model, step=num_updates)`` after every optimizer step, ``num_updates`` counting from 1, with
``--model-ema-decay 0.9998`` by default). With ``step`` = the optimizer steps done::

    t = max(0, step - update_after_step - 1)
    decay_t = 0                                                     if t == 0 (the first update copies the weights)
    decay_t = clamp(1 - (1 + t / warmup_gamma) ** -warmup_power, min_decay, decay)   with use_warmup
    decay_t = decay                                                 otherwise
    ema = decay_t * ema + (1 - decay_t) * weights                   (a lerp, in float32 or the weights' wider dtype)

Parameters are averaged; buffers are copied from the model at every update, not averaged (timm's
``exclude_buffers=True``; its default averages floating buffers too, which changes nothing for the models here: their
only floating buffers are the frozen BatchNorm statistics of the detection backbones).

Where the weights live: under DDP every process holds the same weights and so computes the same average; under
FSDP2 every process averages its own shards (the average is elementwise), the EMA's tensors are DTensors of the
parameters' layout, and :meth:`ModelEma.full_state_dict` gathers them (every process calls it). A checkpoint holds
the whole average in ``ema.safetensors`` (:data:`EMA_WEIGHTS_NAME`), written by the main process; resuming reads
it back bit for bit, each process taking its own shards.

Which weights a folder holds: a model saved with the EMA weights has ``config.ema_weights`` (:data:`CONFIG_FIELD`):
``{"decay": ..., "use_warmup": ..., ..., "updates": N}`` (:meth:`ModelEma.describe`); raw weights have none.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback

from ..utils.errors import UsageError

EMA_WEIGHTS_NAME = "ema.safetensors"
CONFIG_FIELD = "ema_weights"
_SETTINGS = ("decay", "min_decay", "update_after_step", "use_warmup", "warmup_gamma", "warmup_power")


def _is_dtensor(tensor: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor itself, or this process's shard of a DTensor (a view: writing into it writes the DTensor)."""
    return tensor.to_local() if _is_dtensor(tensor) else tensor


def _persistent_buffers(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The buffers a state dict holds (not the non-persistent ones, which the model computes itself)."""
    for prefix, module in model.named_modules():
        for name, buffer in module._buffers.items():
            if buffer is not None and name not in module._non_persistent_buffers_set:
                yield (f"{prefix}.{name}" if prefix else name), buffer


def _average_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16 / bfloat16 weights are averaged in float32 (their own precision would lose the small updates)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class ModelEma:
    """The EMA of ``model``'s parameters (and a copy of its buffers), starting from its current weights.

    Args:
        model: the model whose weights are averaged (the unwrapped one: not a DDP wrapper; under FSDP2 the sharded
            model itself).
        decay: the decay once warmed up (timm's ``train.py`` default, 0.9998).
        min_decay: the least decay during the warm-up.
        update_after_step: the first ``update_after_step + 1`` updates copy the weights (decay 0).
        use_warmup: ramp the decay up as ``1 - (1 + t / warmup_gamma) ** -warmup_power`` (see the module's text).
        warmup_gamma, warmup_power: the ramp's settings (timm's defaults, 1 and 2/3).
    """

    def __init__(
        self,
        model: nn.Module,
        decay: float = 0.9998,
        min_decay: float = 0.0,
        update_after_step: int = 0,
        use_warmup: bool = False,
        warmup_gamma: float = 1.0,
        warmup_power: float = 2 / 3,
    ):
        if not 0.0 <= min_decay <= decay <= 1.0:
            raise UsageError(f"the EMA needs 0 <= min_decay <= decay <= 1, got min_decay={min_decay}, decay={decay}")
        if warmup_gamma <= 0 or warmup_power <= 0:
            raise UsageError(f"the EMA warm-up needs gamma > 0 and power > 0, got {warmup_gamma}, {warmup_power}")
        if update_after_step < 0:
            raise UsageError(f"update_after_step must be >= 0, got {update_after_step}")
        self.decay, self.min_decay, self.update_after_step = decay, min_decay, update_after_step
        self.use_warmup, self.warmup_gamma, self.warmup_power = use_warmup, warmup_gamma, warmup_power
        self.num_updates = 0
        self._restart = False
        with torch.no_grad():
            self.params = {
                name: param.detach().to(_average_dtype(param.dtype), copy=True)
                for name, param in model.named_parameters()
            }
            self.buffers = {name: buffer.detach().clone() for name, buffer in _persistent_buffers(model)}

    # ---- the average ----

    def get_decay(self, step: int | None = None) -> float:
        """The decay of the update after ``step`` optimizer steps (timm's ``ModelEmaV3.get_decay``); ``decay`` when
        no step is given."""
        if step is None:
            return self.decay
        step = max(0, step - self.update_after_step - 1)
        if step <= 0:
            return 0.0
        if not self.use_warmup:
            return self.decay
        decay = 1 - (1 + step / self.warmup_gamma) ** -self.warmup_power
        return max(min(decay, self.decay), self.min_decay)

    @torch.no_grad()
    def update(self, model: nn.Module, step: int | None = None) -> None:
        """Move the average towards ``model``'s weights (after an optimizer step; ``step``: the optimizer steps done,
        counting from 1) and copy its buffers."""
        weight = 1.0 if self._restart else 1.0 - self.get_decay(step)
        self._restart = False
        averages, targets = [], []
        for name, param in self._matched(model):
            average = _local(self.params[name])
            target = _local(param.detach())
            averages.append(average)
            targets.append(target if target.dtype == average.dtype else target.to(average.dtype))
        if averages:
            torch._foreach_lerp_(averages, targets, weight)
        for name, buffer in _persistent_buffers(model):
            if name in self.buffers:
                self.buffers[name].copy_(buffer)
        self.num_updates += 1

    def restart(self) -> None:
        """The next update copies the weights (decay 0), as the first one does."""
        self._restart = True

    def _matched(self, model: nn.Module) -> list[tuple[str, torch.Tensor]]:
        """``model``'s parameters, checked against the average's: the same names, each sharded alike."""
        params = list(model.named_parameters())
        if any(_is_dtensor(self.params.get(name, param)) and not _is_dtensor(param) for name, param in params):
            _reshard(model)  # FSDP2 keeps a unit gathered after a forward pass without backward (the root's)
            params = list(model.named_parameters())
        names = [name for name, _ in params]
        if names != list(self.params):
            missing, extra = sorted(set(self.params) - set(names)), sorted(set(names) - set(self.params))
            raise ValueError(f"the model's parameters are not the EMA's: missing {missing[:5]}, new {extra[:5]}")
        for name, param in params:
            if _is_dtensor(param) != _is_dtensor(self.params[name]):
                raise RuntimeError(
                    f"{name} is {'a shard' if _is_dtensor(param) else 'whole'} in the model but not in the EMA: "
                    "under FSDP2, use the EMA between forward passes, not inside one (where the weights are gathered)"
                )
        return params

    # ---- the weights in a model ----

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """Put the EMA weights (and buffers) into ``model``, in its dtypes (each process its own shards)."""
        _reshard(model)
        for name, param in self._matched(model):
            _local(param).copy_(_local(self.params[name]))
        for name, buffer in _persistent_buffers(model):
            if name in self.buffers:
                buffer.copy_(self.buffers[name])

    @contextlib.contextmanager
    def swapped_in(self, model: nn.Module, lazily: bool = False) -> Iterator[None]:
        """Within: ``model`` holds the EMA weights; on leaving, its own weights come back bit for bit.

        ``lazily``: swap only when the model (or any of its modules) first runs a forward pass within, so that a
        block that runs nothing costs nothing. Under FSDP2, enter this inside :func:`~.runner.unsharded` (its
        gathering then reads the EMA shards): the weights are swapped before any unit gathers them.
        """
        swap = WeightSwap(self, model)
        if lazily:
            swap.arm()
        else:
            swap.swap_in()
        try:
            yield
        finally:
            swap.close()

    # ---- checkpoints ----

    def describe(self) -> dict[str, Any]:
        """The settings and the number of updates: what a folder of EMA weights records (``config.ema_weights``)."""
        return {name: getattr(self, name) for name in _SETTINGS} | {"updates": self.num_updates}

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every averaged parameter and copied buffer, whole, on the CPU, by the model's names (sharded ones
        gathered: every process must call it, in the same order)."""
        state = {}
        for name, tensor in (*self.params.items(), *self.buffers.items()):
            whole = tensor.full_tensor() if _is_dtensor(tensor) else tensor
            state[name] = whole.detach().to("cpu", copy=True).contiguous()
        return state

    @torch.no_grad()
    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore from :meth:`full_state_dict`'s tensors (each process takes its own shards)."""
        from torch.distributed.tensor import distribute_tensor

        expected = set(self.params) | set(self.buffers)
        if set(state) != expected:
            missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
            raise ValueError(f"the EMA state does not fit the model: missing {missing[:5]}, unexpected {extra[:5]}")
        for name, tensor in (*self.params.items(), *self.buffers.items()):
            whole = state[name]
            if whole.shape != tensor.shape:
                raise ValueError(f"the EMA state's {name} is {list(whole.shape)}, the model's {list(tensor.shape)}")
            if _is_dtensor(tensor):  # this process's shard, cut here from the whole (no communication)
                whole = distribute_tensor(
                    whole.to(tensor.device), tensor.device_mesh, tensor.placements, src_data_rank=None
                ).to_local()
            _local(tensor).copy_(whole)

    def save(self, folder: str | os.PathLike, main_process: bool = True) -> None:
        """Write :data:`EMA_WEIGHTS_NAME` into ``folder`` (every process calls it; ``main_process`` writes)."""
        from safetensors.torch import save_file

        state = self.full_state_dict()
        if main_process:
            metadata = {"format": "pt", CONFIG_FIELD: json.dumps(self.describe())}
            save_file(state, str(Path(folder) / EMA_WEIGHTS_NAME), metadata=metadata)

    def load(self, folder: str | os.PathLike) -> None:
        """Restore from ``folder``'s :data:`EMA_WEIGHTS_NAME` (every process reads it)."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        path = Path(folder) / EMA_WEIGHTS_NAME
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: the checkpoint was saved without the EMA of the weights, which this run keeps"
            )
        self.load_full_state_dict(load_file(str(path)))
        with safe_open(str(path), "pt") as file:
            recorded = json.loads((file.metadata() or {}).get(CONFIG_FIELD, "{}"))
        self.num_updates = int(recorded.get("updates", self.num_updates))


class WeightSwap:
    """The EMA weights of ``ema`` swapped into ``model`` and back (see :meth:`ModelEma.swapped_in`).

    The parameters are taken when it is made (under FSDP2: the shards, so make it between optimizer steps, never
    inside a forward pass); :meth:`arm` swaps in at the next forward pass of any module, as often as
    :meth:`swap_out` swapped back, until :meth:`close`.
    """

    def __init__(self, ema: ModelEma, model: nn.Module):
        self.ema, self.model = ema, model
        self.params = ema._matched(model)
        self.buffers = [(name, buffer) for name, buffer in _persistent_buffers(model) if name in ema.buffers]
        self.saved: list[torch.Tensor] = []
        self.hooks: list[Any] = []

    @torch.no_grad()
    def swap_in(self, *_: Any) -> None:
        if self.saved:
            return
        _reshard(self.model)  # a unit still gathered (FSDP2 keeps the root's after a forward pass) would not re-read
        self.saved = [_local(param).clone() for _, param in self.params] + [b.clone() for _, b in self.buffers]
        for name, param in self.params:
            _local(param).copy_(_local(self.ema.params[name]))
        for name, buffer in self.buffers:
            buffer.copy_(self.ema.buffers[name])

    @torch.no_grad()
    def swap_out(self) -> None:
        """The model's own weights back, bit for bit."""
        if not self.saved:
            return
        for (_, param), raw in zip(self.params, self.saved):
            _local(param).copy_(raw)
        for (_, buffer), raw in zip(self.buffers, self.saved[len(self.params) :]):
            buffer.copy_(raw)
        self.saved = []
        _reshard(self.model)

    def arm(self) -> None:
        if not self.hooks:  # prepended: before FSDP2's own pre-forward hooks gather the shards
            self.hooks = [m.register_forward_pre_hook(self.swap_in, prepend=True) for m in self.model.modules()]

    def close(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.hooks = []
        self.swap_out()


def mark_weights(model: nn.Module, ema: ModelEma | None) -> None:
    """Record in ``model.config`` which weights it holds: the EMA's settings (:data:`CONFIG_FIELD`), or nothing
    (``ema`` None: its own, trained weights)."""
    config = getattr(model, "config", None)
    if config is None:
        return
    if ema is not None:
        setattr(config, CONFIG_FIELD, ema.describe())
    elif hasattr(config, CONFIG_FIELD):
        delattr(config, CONFIG_FIELD)


def holds_ema_weights(model_or_config: Any) -> dict[str, Any] | None:
    """The EMA settings a loaded model (or config) records, or None for raw weights."""
    config = getattr(model_or_config, "config", model_or_config)
    return getattr(config, CONFIG_FIELD, None)


def _reshard(model: nn.Module) -> None:
    """Under FSDP2, drop every unit's gathered weights (a unit kept gathered after an evaluation's forward pass would
    otherwise run the next one with them); nothing to do elsewhere."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


class EmaCallback(TrainerCallback):
    """The EMA of the weights (:class:`ModelEma`, timm's ``ModelEmaV3``) under transformers' ``Trainer``.

    ``Trainer(..., callbacks=[EmaCallback(decay=0.9998)])``:

    * **updates** after every optimizer step (``on_step_end``, which Trainer calls after ``optimizer.step()``, the
      scheduler step and ``global_step += 1``) with ``step = state.global_step``, as timm's ``train.py``;
    * **evaluates the EMA weights**: when Trainer is about to evaluate during training (``control.should_evaluate``
      set at a step's or an epoch's end), the EMA weights go into the model at the first forward pass of the
      evaluation and the model's own weights come back in ``on_evaluate`` (once per evaluation dataset, so that a dict
      of datasets is evaluated with the EMA weights throughout); no forward pass runs between the last
      ``on_evaluate`` and the checkpoint Trainer may then save, so checkpoints hold the raw weights as the model.
      ``evaluate_ema=False`` evaluates the raw weights. An ``evaluate()`` called outside training evaluates what the
      model holds (after training: see ``final_weights``);
    * **checkpoints**: every ``checkpoint-N/`` gets ``ema.safetensors`` (``on_save``), and
      ``train(resume_from_checkpoint=...)`` restores it bit for bit (``on_train_begin``) from ``resume_from``, else
      ``args.resume_from_checkpoint`` when it is a folder, else ``args.output_dir/checkpoint-<global_step>`` (what
      ``resume_from_checkpoint=True`` resumes);
    * **at the end** (``on_train_end``; after ``load_best_model_at_end`` loaded the best checkpoint, whose EMA is
      loaded too): with ``final_weights="ema"`` (the default) the model holds the EMA weights, its config records
      them (``config.ema_weights``: decay, warm-up, updates; :func:`holds_ema_weights`), so ``trainer.evaluate()``
      scores them and ``trainer.save_model(folder)`` saves them (``from_pretrained`` then reports them the same way);
      the raw weights stay in :attr:`raw_weights` (:meth:`restore_raw_weights` puts them back) and in the checkpoints.
      ``final_weights="raw"`` leaves the model's own weights in it; :attr:`ema` holds the average.

    Add it last among the callbacks that set ``control.should_evaluate``. Settings: those of :class:`ModelEma`.
    """

    def __init__(
        self,
        decay: float = 0.9998,
        min_decay: float = 0.0,
        update_after_step: int = 0,
        use_warmup: bool = False,
        warmup_gamma: float = 1.0,
        warmup_power: float = 2 / 3,
        *,
        evaluate_ema: bool = True,
        final_weights: str = "ema",
        resume_from: str | os.PathLike | None = None,
    ):
        if final_weights not in ("ema", "raw"):
            raise UsageError(f"final_weights must be 'ema' or 'raw', got {final_weights!r}")
        self.settings = {
            "decay": decay, "min_decay": min_decay, "update_after_step": update_after_step, "use_warmup": use_warmup,
            "warmup_gamma": warmup_gamma, "warmup_power": warmup_power,
        }  # fmt: skip
        ModelEma(nn.Module(), **self.settings)  # refuse bad settings now
        self.evaluate_ema, self.final_weights, self.resume_from = evaluate_ema, final_weights, resume_from
        self.ema: ModelEma | None = None
        self.raw_weights: dict[str, torch.Tensor] | None = None
        self._armed: WeightSwap | None = None

    # ---- training ----

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._disarm()
        if self.raw_weights is not None:  # a second train() call continues from the raw weights
            self.restore_raw_weights(model)
        mark_weights(model, None)  # it trains: its weights are its own from here
        self.ema = ModelEma(model, **self.settings)
        if state.global_step > 0:
            self.ema.load(self._resumed_folder(args, state))

    def _resumed_folder(self, args, state) -> Path:
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        if self.resume_from is not None:
            return Path(self.resume_from)
        given = getattr(args, "resume_from_checkpoint", None)
        if isinstance(given, (str, os.PathLike)) and Path(given).is_dir():
            return Path(given)
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if not (folder / EMA_WEIGHTS_NAME).is_file():
            raise FileNotFoundError(
                f"resuming at step {state.global_step}, EmaCallback found no {folder / EMA_WEIGHTS_NAME}: a checkpoint "
                "of another folder needs EmaCallback(resume_from=that_checkpoint)"
            )
        return folder

    def on_step_begin(self, args, state, control, **kwargs):
        self._disarm()

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._disarm()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.ema.update(model, state.global_step)
        self._arm_if_evaluating(control, model)

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        self._arm_if_evaluating(control, model)

    # ---- evaluation with the EMA weights ----

    def _arm_if_evaluating(self, control, model) -> None:
        """Swap the EMA weights in at the next forward pass (the evaluation's), until the next step or epoch."""
        if self.evaluate_ema and control.should_evaluate and self._armed is None and self.ema is not None:
            self._armed = WeightSwap(self.ema, model)
            self._armed.arm()

    def on_evaluate(self, args, state, control, **kwargs):
        """The model's own weights back (a further evaluation, the next dataset of a dict, swaps the EMA in again at
        its first forward pass), so that a checkpoint saved next holds them."""
        if self._armed is not None:
            self._armed.swap_out()
            _reshard(self._armed.model)

    def _disarm(self) -> None:
        if self._armed is not None:
            armed, self._armed = self._armed, None
            armed.close()
            _reshard(armed.model)

    # ---- checkpoints and the end ----

    def on_save(self, args, state, control, **kwargs):
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        self.ema.save(folder, main_process=args.should_save)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self._disarm()
        if args.load_best_model_at_end and state.best_model_checkpoint is not None:
            self.ema.load(state.best_model_checkpoint)
        if self.final_weights == "ema":
            self.raw_weights = {name: _local(param.detach()).clone() for name, param in model.named_parameters()}
            self.ema.copy_to(model)
            _reshard(model)
            mark_weights(model, self.ema)

    def restore_raw_weights(self, model: nn.Module) -> None:
        """Put the raw weights of the end of training back into ``model`` (after ``final_weights="ema"``)."""
        if self.raw_weights is None:
            return
        with torch.no_grad():
            for name, param in model.named_parameters():
                _local(param).copy_(self.raw_weights[name])
        _reshard(model)
        self.raw_weights = None
        mark_weights(model, None)
