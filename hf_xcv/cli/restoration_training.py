"""The interface between ``hf-xcv-train image-restoration`` and the kinds of restoration it trains.

The program (:mod:`hf_xcv.cli.train_image_restoration`) does what every kind shares: arguments, data, the run folder,
the loop, the final folder and card. A kind is chosen once, by what the model's family recipe says
(``recipe.notes["restoration"]``), and does everything that differs: reference-based super-resolution
(:class:`hf_xcv.cli.restoration_reference.ReferenceSuperResolution`, TTSR) or named restoration tasks
(:class:`hf_xcv.cli.restoration_tasks.NamedTaskRestoration`, IPT). The program never asks which one it has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from hf_xcv.registry import MODEL_TYPES, ModelEntry


class RestorationTraining:
    """How the program trains one kind of restoration model (the model of ``config``; ``model_args`` are the run's
    model arguments). Subclasses implement every method that raises here; the others are defaults."""

    own_options: ClassVar[tuple[str, ...]] = ()  # training options only this kind reads (the card leaves out others')
    held_out_scale: int  # what the built-in photos' held-out views are cut to multiples of
    find_unused_parameters: bool = False  # DDP: parameters a step may leave without a gradient

    def __init__(self, config: Any, model_args: Any):
        self.config = config
        self.model_args = model_args

    @property
    def entry(self) -> ModelEntry:
        return MODEL_TYPES[self.config.model_type]

    @property
    def name(self) -> str:
        """The architecture as its paper names it (the recipe's name): what pictures and cards call it."""
        return self.entry.recipe.name

    # --- before the run folder is claimed: refuse what cannot work, by name
    def check(self, args: Any) -> None:
        """Refuse the run's options this kind cannot honour; may record the defaults it takes."""
        raise NotImplementedError

    def crop_size(self, crop_size: int | None) -> int:
        """The training crops' side in HR pixels (``--crop_size``, or this kind's default), checked."""
        raise NotImplementedError

    def folder_policy(self, missing_reference: str) -> tuple[str, int]:
        """How a user's folder is read: the policy for HR images without a reference, and the multiple its images'
        sides are cut to."""
        raise NotImplementedError

    def default_processor(self) -> Any:
        """The processor of a fresh model: its family's, with its default settings."""
        return self.entry.image_processor()

    def check_processor(self, processor: Any) -> None:
        """Refuse a processor (a checkpoint's) that would misread the model's values."""

    def check_held_out(self, data: Any, splits: tuple[str, ...], processor: Any, eval_batch_size: int) -> None:
        """Refuse, by image name, held-out images the final evaluation could not score."""
        raise NotImplementedError

    # --- building the run
    def model_overrides(self, args: Any) -> dict[str, Any]:
        """Config fields the run sets from its training options."""
        return {}

    def initialise(self, model: torch.nn.Module) -> None:
        """Initialise a fresh model as the original does before training (pretrained parts)."""

    def build_criterion(self, accelerator: Accelerator, args: Any, crop_size: int) -> Any:
        """Losses beyond the model's own, with state that resumes (registered for checkpointing); None for none."""
        return None

    def collator(self, processor: Any) -> Any:
        raise NotImplementedError

    def objective(self, accelerator, model, criterion, state, processor, data_args, args):
        """``batch -> loss`` of a training step."""
        raise NotImplementedError

    # --- scoring and the final folder
    def evaluate(self, accelerator: Accelerator, model: torch.nn.Module, processor: Any, loader: DataLoader) -> dict:
        """The split's scores (gathered from every process)."""
        raise NotImplementedError

    def describe(self, results: dict[str, Any]) -> str:
        """The scores in one line of the training log."""
        raise NotImplementedError

    def draw_pictures(self, model: torch.nn.Module, processor: Any, split: Any, count: int, path: Path) -> None:
        """Inputs, outputs and targets of the first ``count`` images of ``split``, in one PNG."""
        raise NotImplementedError

    def card_facts(self, scores: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        """The card's template variables and its model-index metrics, from the test split's scores."""
        raise NotImplementedError
