"""What ``hf-xcv-train image-restoration`` does for a model of named restoration tasks (IPT): training crops degraded
on the fly for one task per batch (multi-task pre-training, as the paper: each batch drawn for one task; a model of
one task is fine-tuned the same way), and every task scored on the held-out photos next to its baseline.

Degradations are :func:`hf_xcv.processing.restoration.degrade`'s (PIL bicubic x s, Gaussian noise, rain streaks), drawn
from torch's RNG inside the training step, which the runner seeds per step: a resumed run replays them exactly. The
held-out images are degraded with a seed of their own (the same inputs at every evaluation) and restored whole
(tiled beyond one tile). Baselines: PIL's bicubic upsampling of the low-resolution input for super-resolution, the
degraded input itself otherwise (the noisy or rainy image). Scores are IPT's convention: Y channel of BT.601 YCbCr,
shave = scale for super-resolution and none otherwise (``utility.calc_psnr``), also for denoising.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import torch
from accelerate.utils import gather_object
from torch.utils.data import DataLoader

from hf_xcv.cli.restoration_training import RestorationTraining
from hf_xcv.data.restoration import CleanImageCollator
from hf_xcv.metrics import psnr_ssim
from hf_xcv.processing.restoration import to_uint8
from hf_xcv.visualization import restoration_panel

from ..utils.errors import UsageError

SCORES = ("psnr", "ssim", "baseline_psnr", "baseline_ssim")


def task_scales(model: Any) -> dict[str, int]:
    """The model's tasks and their scales, in its order."""
    return {task.name: task.scale for task in model.config.restoration_tasks}


def crop_scale(scales: dict[str, int]) -> int:
    """What the training crops' side must be a multiple of: every task's scale (their least common multiple)."""
    return math.lcm(*scales.values())


def held_out_scale(config: Any) -> int:
    """What the built-in photos' held-out views are cut to multiples of: every task of the model (whichever a run
    trains), so that a pre-trained model and one fine-tuned from it are scored on the same images."""
    return crop_scale({task.name: task.scale for task in config.restoration_tasks})


def check_trainable(scales: dict[str, int], config: Any) -> None:
    """The trained tasks have built-in degradations (the script degrades clean images); ValueError naming the
    others."""
    custom = [task.name for task in config.restoration_tasks if task.name in scales and task.kind == "custom"]
    if custom:
        raise UsageError(
            f"tasks {custom} have no built-in degradation (sr_x<N>, denoise_<sigma>, derain do): this script degrades "
            "clean images, so train them with your own pairs (IPTImageProcessor(images=degraded, labels=clean) and "
            "Trainer), or leave them out with --tasks"
        )


def check_held_out(data: Any, splits: tuple[str, ...], config: Any, scales: dict[str, int]) -> None:
    """Every held-out image holds a whole tile's worth of input for every task (refused by name before anything
    trains: a failure at the final evaluation would lose the run)."""
    for split in splits:
        for row in data[split].select_columns(["image", "name"]):
            width, height = row["image"].size
            for task, scale in scales.items():
                if min(height, width) // scale < config.image_size:
                    raise UsageError(
                        f"{split} image {row['name']!r} ({height}x{width}) is too small for {task}: its x1/{scale} "
                        f"input would be smaller than one {config.image_size}-pixel tile"
                    )


def check_crop_size(crop_size: int, model_config: Any, scales: dict[str, int]) -> None:
    """The training crops hold a whole tile's clean image for every task (image_size x scale)."""
    needed = model_config.image_size * max(scales.values())
    if crop_size < needed or crop_size % crop_scale(scales):
        raise UsageError(
            f"--crop_size {crop_size} must be at least {needed} (a {model_config.image_size}-pixel tile x the largest "
            f"task scale, {max(scales.values())}) and a multiple of {crop_scale(scales)} (every task's scale)"
        )


def random_view(image: np.ndarray, side: int, augment: bool) -> np.ndarray:
    """A random ``side`` x ``side`` crop of a (3, H, W) image, flipped and turned at random when ``augment`` (draws
    from torch's RNG)."""
    height, width = image.shape[-2:]
    top = int(torch.randint(0, height - side + 1, ()))
    left = int(torch.randint(0, width - side + 1, ()))
    view = image[:, top : top + side, left : left + side]
    if augment:
        flip_h, flip_v, turns = (int(v) for v in torch.randint(0, 4, (3,)) % torch.tensor([2, 2, 4]))
        view = view[:, :, ::-1] if flip_h else view
        view = view[:, ::-1] if flip_v else view
        view = np.rot90(view, turns, axes=(1, 2))
    return np.ascontiguousarray(view)


def training_objective(
    model: torch.nn.Module,
    processor: Any,
    scales: dict[str, int],
    image_size: int,
    augment: bool,
    device: Any,
    state: Any,
    seed: int,
) -> Callable[[dict[str, Any]], torch.Tensor]:
    """batch of clean crops -> the loss of one task drawn at random for the whole batch: a tile-sized input (its
    clean image a random ``image_size x scale`` view of each crop) degraded for that task. The task is drawn from
    the run's ``seed`` and the step's position in ``state`` (the runner's TrainerState), the same on every process
    of a distributed run: each step trains one task, as the paper's batches; crops and noise come from the process's
    own seeded RNG."""
    tasks = list(scales)

    def loss_of(batch: dict[str, Any]) -> torch.Tensor:
        step = torch.Generator().manual_seed(hash((seed, state.epoch, state.batches_in_epoch)) % 2**63)
        task = tasks[int(torch.randint(len(tasks), (), generator=step))]
        views = [random_view(image, image_size * scales[task], augment) for image in batch["images"]]
        generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, ())))
        inputs = processor(clean_images=views, task=task, generator=generator, return_tensors="pt")
        return model(pixel_values=inputs["pixel_values"].to(device), task=task, labels=inputs["labels"].to(device)).loss

    return loss_of


def image_seed(name: str, task: str) -> int:
    """A held-out image's degradation seed for ``task``: the same noise at every evaluation, on every process."""
    return zlib.crc32(f"{name}/{task}".encode())


def baseline_image(degraded: np.ndarray, scale: int, size: tuple[int, int]) -> np.ndarray:
    """The baseline a restoration must beat: PIL's bicubic upsampling of the input x ``scale``, or the (degraded)
    input itself at scale 1; (H, W, 3) uint8."""
    if scale == 1:
        return degraded
    return np.asarray(PIL.Image.fromarray(degraded).resize((size[1], size[0]), PIL.Image.BICUBIC))


@torch.no_grad()
def restore(model: torch.nn.Module, processor: Any, image: np.ndarray, name: str, task: str) -> dict[str, np.ndarray]:
    """One held-out (3, H, W) uint8 image degraded for ``task`` with its own seed and restored: the input, the
    output and the clean image, (H, W, 3) uint8 each."""
    inputs = processor(clean_images=[image], task=task, seed=image_seed(name, task), return_tensors="pt")
    rgb_range = model.config.rgb_range
    output = model(pixel_values=inputs["pixel_values"].to(model.device), task=task).reconstruction
    images = (inputs["pixel_values"], inputs["labels"], output)
    degraded, clean, output = (to_uint8(x, (0.0, rgb_range))[0] for x in images)
    return {"input": degraded, "output": output, "clean": clean}


@torch.no_grad()
def score_split(
    accelerator: Any, model: torch.nn.Module, processor: Any, loader: DataLoader, tasks: list[str]
) -> dict[str, Any]:
    """Each of ``tasks``' mean Y PSNR / SSIM over the split, and its baseline's (``<metric>_<task>``), each image
    scored once (rows gathered from every process by name); ``psnr`` / ``ssim``: the means over the tasks."""
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.eval()
    scales, rows = {task: task_scales(unwrapped)[task] for task in tasks}, []
    for batch in loader:
        for image, name in zip(batch["images"], batch["names"]):
            for task, scale in scales.items():
                images = restore(unwrapped, processor, image, name, task)
                shave = scale if scale > 1 else 0  # IPT's calc_psnr: no shave at scale 1
                baseline = baseline_image(images["input"], scale, images["clean"].shape[:2])
                psnr, ssim = psnr_ssim(images["output"], images["clean"], scale=scale, shave=shave)
                base_psnr, base_ssim = psnr_ssim(baseline, images["clean"], scale=scale, shave=shave)
                rows.append({"key": f"{name}/{task}", "task": task, "psnr": psnr, "ssim": ssim,
                             "baseline_psnr": base_psnr, "baseline_ssim": base_ssim})  # fmt: skip
    unique = list({row["key"]: row for row in gather_object(rows)}.values())
    results: dict[str, Any] = {}
    for task in scales:
        mine = [row for row in unique if row["task"] == task]
        results.update({f"{metric}_{task}": float(np.mean([row[metric] for row in mine])) for metric in SCORES})
    results["psnr"] = float(np.mean([results[f"psnr_{task}"] for task in scales]))
    results["ssim"] = float(np.mean([results[f"ssim_{task}"] for task in scales]))
    return {**results, "num_images": len(unique) // len(scales)}


def describe(results: dict[str, Any], tasks: list[str]) -> str:
    """One line per task: the model's PSNR / SSIM and its baseline's."""
    return "; ".join(
        f"{task} {results[f'psnr_{task}']:.2f} dB / {results[f'ssim_{task}']:.4f} (baseline "
        f"{results[f'baseline_psnr_{task}']:.2f} / {results[f'baseline_ssim_{task}']:.4f})"
        for task in tasks
    )


@torch.no_grad()
def picture_rows(model: torch.nn.Module, processor: Any, split: Any, count: int, tasks: list[str]) -> list[dict]:
    """For each of ``tasks``, the first ``count`` images of ``split``: input, baseline, output and clean image, for
    :func:`hf_xcv.visualization.restoration_panel` (at scale 1 the baseline column is the degraded input)."""
    model.eval()
    rows = []
    for task in tasks:
        scale = task_scales(model)[task]
        for row in split.select(range(min(count, len(split)))):
            name = str(row.get("name", ""))
            image = np.moveaxis(np.asarray(row["image"].convert("RGB")), -1, 0)
            images = restore(model, processor, image, name, task)
            baseline = baseline_image(images["input"], scale, images["clean"].shape[:2])
            row = {"lr": images["input"], "bicubic": baseline, "output": images["output"], "hr": images["clean"],
                   "title": f"{name} ({task})"}  # fmt: skip
            if scale == 1:  # the baseline is the degraded input itself
                row["captions"] = {"lr": f"{name} ({task}) input", "bicubic": "baseline: the input", "hr": "clean"}
            rows.append(row)
    return rows


def trained_tasks(tasks: str | None, config: Any) -> dict[str, int]:
    """The tasks the run trains and scores (``--tasks``, comma-separated, or all of the model's), with their
    scales."""
    scales = {task.name: task.scale for task in config.restoration_tasks}
    if not tasks:
        return scales
    wanted = [task.strip() for task in tasks.split(",") if task.strip()]
    unknown = [task for task in wanted if task not in scales]
    if unknown or not wanted:
        raise UsageError(f"--tasks {tasks!r}: the model's tasks are {list(scales)}")
    return {task: scales[task] for task in wanted}


class NamedTaskRestoration(RestorationTraining):
    """The training of a model of named restoration tasks (a family whose recipe says
    ``notes["restoration"] == "tasks"``: IPT): clean images degraded in the training step for one task per batch,
    values in [0, rgb_range]."""

    own_options = ("contrastive_loss_weight",)

    def __init__(self, config: Any, model_args: Any):
        super().__init__(config, model_args)
        self.scales = trained_tasks(model_args.tasks, config)
        # the other tasks' heads and tails get no gradient in a step
        self.find_unused_parameters = len(config.tasks) > 1

    def check(self, args: Any) -> None:
        """The run's options that this training refuses, by name, before the run folder is claimed; the contrastive
        weight the run uses is recorded (the card says it)."""
        check_trainable(self.scales, self.config)  # user-named tasks have no built-in degradation
        if args.losses != "rec" or self.model_args.vgg19_weights:
            raise UsageError("--losses all and --vgg19_weights are TTSR's recipe; IPT trains with L1 (+ contrastive)")
        if args.contrastive_loss_weight is None:
            args.contrastive_loss_weight = self.config.contrastive_loss_weight

    def crop_size(self, crop_size: int | None) -> int:
        """The training crops' side in HR pixels (a tile times the largest task scale by default), checked."""
        crop = crop_size or self.config.image_size * max(self.scales.values())
        check_crop_size(crop, self.config, self.scales)
        return crop

    @property
    def held_out_scale(self) -> int:
        return held_out_scale(self.config)

    def folder_policy(self, missing_reference: str) -> tuple[str, int]:
        """A folder's clean images train without references (``"itself"``), cut to every task's scale."""
        return "itself", self.held_out_scale

    def default_processor(self) -> Any:
        return self.entry.image_processor(rgb_range=self.config.rgb_range)

    def check_processor(self, processor: Any) -> None:
        if processor.rgb_range != self.config.rgb_range:
            raise UsageError(
                f"the image processor works in [0, {processor.rgb_range}] and the model in [0, "
                f"{self.config.rgb_range}] (rgb_range): their pixel values would be misread"
            )

    def check_held_out(self, data: Any, splits: tuple[str, ...], processor: Any, eval_batch_size: int) -> None:
        check_held_out(data, splits, self.config, self.scales)

    def model_overrides(self, args: Any) -> dict[str, Any]:
        return {"contrastive_loss_weight": args.contrastive_loss_weight}

    def collator(self, processor: Any) -> CleanImageCollator:
        return CleanImageCollator()

    def objective(self, accelerator, model, criterion, state, processor, data_args, args):
        """batch -> loss of one task per batch (see :func:`training_objective`)."""
        return training_objective(
            model, processor, self.scales, self.config.image_size, data_args.augment, accelerator.device, state,
            args.seed,
        )  # fmt: skip

    def evaluate(self, accelerator: Any, model: torch.nn.Module, processor: Any, loader: DataLoader) -> dict:
        return score_split(accelerator, model, processor, loader, tasks=list(self.scales))

    def describe(self, results: dict[str, Any]) -> str:
        return describe(results, list(self.scales))

    @torch.no_grad()
    def draw_pictures(self, model: torch.nn.Module, processor: Any, split: Any, count: int, path: Path) -> None:
        """Input, baseline, output and clean image of the first ``count`` images of ``split``, per task."""
        rows = picture_rows(model, processor, split, count, list(self.scales))
        restoration_panel(rows, output_label=self.name).save(path)

    def card_facts(self, scores: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        """The card's template variables and its model-index metrics (each task's PSNR and SSIM)."""
        tasks = list(self.scales)
        metrics = {f"{metric}_{task}": scores[f"{metric}_{task}"] for task in tasks for metric in ("psnr", "ssim")}
        return {"tasks": tasks, "scores": scores}, metrics
