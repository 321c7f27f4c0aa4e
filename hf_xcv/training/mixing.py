"""Mixup / CutMix under transformers' ``Trainer``, in training steps only.

:class:`hf_xcv.data.MixupCutmixCollator` mixes every batch it collates, and ``Trainer`` collates its evaluation
batches with the same ``data_collator``: evaluation would score mixed images against soft targets. Instead::

    Trainer(..., data_collator=ImageClassificationCollator(),
            callbacks=[MixupCallback(MixupCutmix(num_labels=10))])

mixes inside the model's forward pass while the model is training (a forward pre-hook, added when training begins
and removed when it ends): ``Trainer.training_step`` puts the model in training mode and evaluation in evaluation
mode, so every training batch is mixed, whatever the prefetching, and evaluation sees the images and class ids as
they are. The model's ``problem_type`` must be ``"single_label_classification"`` (the loss then takes the soft
targets, see :meth:`hf_xcv.modeling_utils.XcvPreTrainedModel.classification_loss`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback

from ..utils.errors import UsageError


class MixupCallback(TrainerCallback):
    """Mix each training batch with ``mixer`` (a :class:`hf_xcv.data.MixupCutmix`) in the model's forward pass.

    ``num_items_in_batch`` (Trainer's count of labels, for the loss of gradient accumulation) counted class ids;
    the soft-target loss counts the matrix's entries, so the count is multiplied by ``num_labels`` (one row of
    targets per image). The draws come from the mixer's generator (torch's global RNG by default, which Trainer
    seeds), once per training forward pass."""

    def __init__(self, mixer: Any) -> None:
        self.mixer = mixer
        self._handle: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: torch.nn.Module | None = None, **kwargs: Any):
        if model is None:
            raise UsageError("MixupCallback needs the model: Trainer passes it to its callbacks")
        if getattr(model.config, "problem_type", None) != "single_label_classification":
            raise UsageError(
                "Mixup / CutMix trains on soft targets: set the model's config.problem_type to "
                f"'single_label_classification' (it is {model.config.problem_type!r})"
            )
        self._remove()
        self._handle = model.register_forward_pre_hook(self._mix, with_kwargs=True)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any):
        self._remove()

    def _remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _mix(self, module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        if not module.training or kwargs.get("labels") is None:
            return args, kwargs
        if args:
            raise UsageError("MixupCallback mixes pixel_values and labels passed by keyword, as Trainer passes them")
        labels = kwargs["labels"]
        if labels.is_floating_point():  # already soft (a mixing collator): nothing to do twice
            return args, kwargs
        kwargs = dict(kwargs)
        kwargs["pixel_values"], kwargs["labels"] = self.mixer(kwargs["pixel_values"], labels)
        if kwargs.get("num_items_in_batch") is not None:
            kwargs["num_items_in_batch"] = kwargs["num_items_in_batch"] * self.mixer.num_labels
        return args, kwargs
