#!/usr/bin/env python
"""Train an hf_xcv image-restoration model (TTSR, reference-based x4 super-resolution; IPT, a transformer body shared
by named restoration tasks) with accelerate: one CPU, several processes, or several GPUs.

    hf-xcv-train image-restoration --output_dir runs/ttsr-photos          (or python -m hf_xcv.train ...)
    hf-xcv-train image-restoration --preset ipt-photos --output_dir runs/ipt-photos
    hf-xcv-train image-restoration --model_name_or_path runs/ipt-photos --tasks sr_x4 --output_dir runs/ipt-x4
    hf-xcv-train image-restoration --preset ttsr --losses all --vgg19_weights vgg19-dcbb9e9d.pth \
        --dataset path/to/folder --output_dir runs/ttsr
    accelerate launch --multi_gpu --num_processes 2 -m hf_xcv.train image-restoration --output_dir runs/ddp

In a checkout, ``python training/train_image_restoration.py ...`` runs the same script.

Data: scikit-image's photos (``--dataset photos``, built in: training crops of some photos, whole held-out views of
others), a folder of the user's images (``path/<split>/hr/*.png`` with optional ``path/<split>/ref/*.png``; see
:func:`hf_xcv.data.load_restoration_folder`; its train split is cut into ``--crop_size`` crops) or a
``save_to_disk`` DatasetDict with ``image`` (HR) and ``reference`` columns. Each HR image is degraded as the original
pipeline does (:class:`hf_xcv.TTSRImageProcessor`: PIL bicubic x1/4, and x4 back for LR↑ and Ref↓↑).

The defaults are the original recipe (TTSR's ``train.sh``): Adam (0.9, 0.999, eps 1e-8) at 1e-4 for the main network
and 1e-5 for the texture extractor, a constant rate, no clipping, batch 9 of 160x160 crops (LR 40x40), random flips
and 90-degree rotations drawn independently for the LR/HR pair and the reference. ``--losses rec`` trains TTSR-rec
(L1 only, 200 epochs in the original); ``--losses all`` the full TTSR: ``--num_init_epochs`` (2) with L1 only, then
L1 + 1e-2 perceptual (VGG19 relu5_1, ``--vgg19_weights``) + 1e-2 transferal perceptual + 1e-3 WGAN-GP adversarial
(its discriminator stepped twice per step with its own Adam (0, 0.9) at 1e-4). ``--vgg19_weights`` (torchvision's
``vgg19-dcbb9e9d.pth`` or a safetensors file of the same ``features.N.*`` keys, never downloaded) also initialises the
texture extractor, as the original does from ImageNet.

Held-out images are scored whole (Y-channel PSNR / SSIM, the border shaved by 4) next to bicubic upsampling of the
same inputs. Checkpoints are atomic (the discriminator and its optimizer included) and ``--resume_from_checkpoint
latest`` continues exactly; the final folder (model, processor, a model card with the measured PSNR / SSIM and
``restorations.png``: LR, bicubic, output, HR and reference side by side) is ready for the Hub.

IPT (a model with ``config.tasks``; :mod:`hf_xcv.cli.restoration_tasks`): the training crops (``--crop_size``, by
default a tile times the largest task scale) are degraded in the training step for one task drawn per batch (the
paper's multi-task pre-training; ``--tasks`` trains a subset, e.g. one task to fine-tune), L1 plus, with
``--contrastive_loss_weight`` (the paper pre-trains with 0.1), the supervised contrastive loss on the body's patch
features. Defaults are the paper's pre-training recipe: Adam (0.9, 0.999) at 5e-5, batch 64 of 48x48 inputs, gradient
clipping at 1.0 (MindSpore's), 300 epochs; fine-tune with ``--learning_rate 2e-5``. Every task is scored on the
held-out photos (Y PSNR / SSIM, shave = scale for super-resolution, none otherwise) next to its baseline: bicubic
upsampling for super-resolution, the degraded input for denoising and deraining.
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
from transformers import AutoImageProcessor, HfArgumentParser

import hf_xcv
from hf_xcv.auto import MODEL_TYPES
from hf_xcv.cli import restoration_tasks as tasks_mode
from hf_xcv.configuration_utils import check_known_fields
from hf_xcv.conversion import load_config_dict
from hf_xcv.data import load_photos_dataset, load_restoration_folder, training_crops
from hf_xcv.data.restoration import CleanImageCollator, RestorationCollator
from hf_xcv.metrics import psnr_ssim
from hf_xcv.presets import PRESETS
from hf_xcv.processing.restoration import SCALE, to_uint8
from hf_xcv.training import TEMPLATES, TrainerState, runner
from hf_xcv.visualization import restoration_panel

TEMPLATE = TEMPLATES / "image_restoration.md"
PICTURES = "restorations.png"
DEFAULT_PRESET = "ttsr-photos"
TTSR_RANGE = (-1.0, 1.0)  # TTSR's values
LOSS_CHOICES = ("rec", "all")
# The model types this script trains: those with an image-to-image head.
RESTORATION_TYPES = sorted(t for t, e in MODEL_TYPES.items() if "AutoModelForImageToImage" in e.heads)
VGG19_WIDTHS = [64, 128, 256]  # relu1_1, relu2_1, relu3_1: the texture extractor ImageNet's VGG19 initialises
INPUT_KEYS = ("pixel_values", "upsampled_pixel_values", "reference_pixel_values", "degraded_reference_pixel_values")


@dataclass
class ModelArguments:
    preset: str | None = field(
        default=None,
        metadata={"help": f"a restoration preset (ttsr-photos, ipt-photos, ...); {DEFAULT_PRESET} without it"},
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "fine-tune this hf_xcv TTSR or IPT checkpoint (folder or Hub repo) instead"}
    )
    tasks: str | None = field(
        default=None, metadata={"help": "IPT: train only these of the model's tasks (comma-separated); all without it"}
    )
    attention_type: str | None = field(
        default=None,
        metadata={
            "help": "a registry core for a softmax-weighted texture transfer (an ablation); unset: hard attention"
        },
    )
    config_overrides: str | None = field(
        default=None, metadata={"help": "config fields: 'n_feats=32,num_res_blocks=4+4+2+1' or a JSON object"}
    )
    vgg19_weights: str | None = field(
        default=None,
        metadata={
            "help": "VGG19 ImageNet weights (torchvision's vgg19-dcbb9e9d.pth or safetensors with features.N.* keys): "
            "initialise the texture extractor and, with --losses all, the perceptual loss"
        },
    )


@dataclass
class DataArguments:
    dataset: str = field(
        default="photos",
        metadata={"help": "'photos' (built in), a folder of hr/ (+ ref/) images, or a save_to_disk DatasetDict"},
    )
    crop_size: int | None = field(
        default=None,
        metadata={"help": "training crops' side in HR pixels; TTSR: 160 (LR 40), IPT: a tile x the largest scale"},
    )
    coverage: float = field(default=2.0, metadata={"help": "how often the training crops cover each training image"})
    missing_reference: str = field(
        default="error",
        metadata={"help": "TTSR: a folder's HR image without a reference: 'error' or 'panned' (IPT reads hr/ only)"},
    )
    augment: bool = field(default=True, metadata={"help": "random flips and 90-degree rotations (the original's)"})
    max_train_samples: int | None = None
    eval_split: str = "validation"
    test_split: str = "test"
    pictures: int = field(default=4, metadata={"help": f"test images drawn into {PICTURES} (0: none)"})


@dataclass
class TrainArguments(runner.RunArguments):
    learning_rate: float | None = field(
        default=None, metadata={"help": "TTSR: the main network's (1e-4); IPT: every parameter's (5e-5)"}
    )
    lr_texture_extractor: float = field(default=1e-5, metadata={"help": "the texture extractor's learning rate"})
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    lr_scheduler_type: str = "constant"
    max_grad_norm: float | None = field(default=None, metadata={"help": "TTSR: 0 (no clipping); IPT: 1.0"})
    num_train_epochs: int | None = field(default=None, metadata={"help": "TTSR: 200; IPT: 300"})
    per_device_train_batch_size: int | None = field(default=None, metadata={"help": "TTSR: 9; IPT: 64"})
    per_device_eval_batch_size: int = field(default=1, metadata={"help": "held-out images are scored whole"})
    eval_every_epochs: int = 10
    losses: str = field(default="rec", metadata={"help": "'rec' (L1: TTSR-rec) or 'all' (the full TTSR recipe)"})
    num_init_epochs: int = field(default=2, metadata={"help": "--losses all: first epochs with L1 only"})
    perceptual_weight: float = 1e-2
    transferal_weight: float = 1e-2
    adversarial_weight: float = 1e-3
    gan_k: int = field(default=2, metadata={"help": "discriminator steps per training step"})
    lr_discriminator: float = 1e-4
    contrastive_loss_weight: float | None = field(
        default=None,
        metadata={"help": "IPT: weight of the contrastive loss (the paper pre-trains with 0.1); None: the model's"},
    )


# TTSR's own options (its texture extractor's rate, its losses), meaningless for IPT.
TTSR_OPTIONS = ("lr_texture_extractor", "losses", "num_init_epochs", "perceptual_weight", "transferal_weight",
                "adversarial_weight", "gan_k", "lr_discriminator")  # fmt: skip
# Each family's recipe for the options left unset: (TTSR, IPT).
RECIPES = {
    "learning_rate": (1e-4, 5e-5),
    "max_grad_norm": (0.0, 1.0),
    "num_train_epochs": (200, 300),
    "per_device_train_batch_size": (9, 64),
}


def has_tasks(config: Any) -> bool:
    """Whether the model is one of named restoration tasks (IPT), trained by :mod:`hf_xcv.cli.restoration_tasks`."""
    return hasattr(config, "restoration_tasks")


def apply_recipe(args: TrainArguments, config: Any) -> None:
    """The family's recipe for every option left unset."""
    for name, values in RECIPES.items():
        if getattr(args, name) is None:
            setattr(args, name, values[has_tasks(config)])


def resolve_config(args: ModelArguments) -> Any:
    """The config the run trains (the preset's or the checkpoint's, with the overrides), without building the model."""
    overrides = model_overrides(args)
    if args.model_name_or_path:
        model_type = load_config_dict(args.model_name_or_path)["model_type"]
        check_known_fields(MODEL_TYPES[model_type].config, overrides)
        return MODEL_TYPES[model_type].config.from_pretrained(args.model_name_or_path, **overrides)
    name = args.preset or DEFAULT_PRESET
    check_known_fields(MODEL_TYPES[PRESETS[name].model_type].config, overrides)
    return hf_xcv.preset_config(name, **overrides)


def model_overrides(args: ModelArguments) -> dict[str, Any]:
    overrides: dict[str, Any] = runner.parse_overrides(args.config_overrides)
    if args.attention_type:
        overrides["attention_type"] = args.attention_type
    return overrides


def trained_tasks(args: ModelArguments, config: Any) -> dict[str, int]:
    """The tasks the run trains and scores (``--tasks`` or all of the model's), with their scales."""
    scales = {task.name: task.scale for task in config.restoration_tasks}
    if not args.tasks:
        return scales
    wanted = [task.strip() for task in args.tasks.split(",") if task.strip()]
    unknown = [task for task in wanted if task not in scales]
    if unknown or not wanted:
        raise ValueError(f"--tasks {args.tasks!r}: the model's tasks are {list(scales)}")
    return {task: scales[task] for task in wanted}


def parse_args(argv: list[str] | None = None) -> tuple[ModelArguments, DataArguments, TrainArguments]:
    return HfArgumentParser((ModelArguments, DataArguments, TrainArguments)).parse_args_into_dataclasses(args=argv)


def check_args(model_args: ModelArguments, args: TrainArguments) -> Any:
    """What can be refused before the run folder is claimed, by name; the config the run trains."""
    try:
        import skimage.metrics  # noqa: F401  (SSIM of the evaluation; found missing at the end, it loses the run)
    except ImportError as err:
        raise ValueError("the evaluation's SSIM needs scikit-image: pip install 'hf_xcv[restoration]'") from err
    if args.losses not in LOSS_CHOICES:
        raise ValueError(f"--losses {args.losses!r} is not allowed; allowed values: {list(LOSS_CHOICES)}")
    if args.losses == "all" and not model_args.vgg19_weights:
        raise ValueError("--losses all needs --vgg19_weights (the perceptual loss's VGG19 ImageNet weights)")
    if model_args.model_name_or_path and model_args.preset:
        raise ValueError("pass either --preset or --model_name_or_path, not both")
    name = model_args.preset or DEFAULT_PRESET
    if not model_args.model_name_or_path and (name not in PRESETS or PRESETS[name].model_type not in RESTORATION_TYPES):
        fitting = sorted(n for n, p in PRESETS.items() if p.model_type in RESTORATION_TYPES)
        raise ValueError(f"preset {name!r} is not an image-restoration preset; this script trains {fitting}")
    if model_args.model_name_or_path:
        source = load_config_dict(model_args.model_name_or_path).get("model_type")
        if source not in RESTORATION_TYPES:
            raise ValueError(
                f"{model_args.model_name_or_path} holds a checkpoint of model_type {source!r}; this script trains "
                f"{RESTORATION_TYPES}"
            )
    config = resolve_config(model_args)
    if model_args.tasks and not has_tasks(config):
        raise ValueError(f"--tasks is for models of named tasks (IPT), not {config.model_type}")
    if has_tasks(config):
        tasks_mode.check_trainable(trained_tasks(model_args, config), config)  # unknown or user-named: refused now
        if args.losses != "rec" or model_args.vgg19_weights:
            raise ValueError("--losses all and --vgg19_weights are TTSR's recipe; IPT trains with L1 (+ contrastive)")
    elif args.contrastive_loss_weight is not None:
        raise ValueError("--contrastive_loss_weight is IPT's; TTSR's losses are set by --losses")
    return config


def load_data(args: DataArguments, seed: int, config: Any, scales: dict[str, int] | None = None) -> DatasetDict:
    """HR images with references: training crops, and whole held-out images (each row named: the scores of a
    distributed evaluation are gathered by name). ``scales``: the trained tasks' of a model of named tasks."""
    if scales is not None:
        args.crop_size = args.crop_size or config.image_size * max(scales.values())
        tasks_mode.check_crop_size(args.crop_size, config, scales)
    elif (crop := args.crop_size or 160) % SCALE or crop < SCALE * 3:
        raise ValueError(
            f"--crop_size {crop} must be a multiple of 4 and at least 12 (a 3x3 low-resolution crop: one "
            "patch of TTSR's relevance embedding)"
        )
    else:
        args.crop_size = crop
    crop_scale = SCALE if scales is None else tasks_mode.held_out_scale(config)
    if args.dataset == "photos":
        data = load_photos_dataset(crop_size=args.crop_size, coverage=args.coverage, seed=seed, scale=crop_scale)
    else:
        if Path(args.dataset, "dataset_dict.json").exists():
            data = load_from_disk(args.dataset)
        else:
            policy, multiple = (args.missing_reference, SCALE) if scales is None else ("itself", crop_scale)
            data = load_restoration_folder(args.dataset, missing_reference=policy, scale=multiple)
        data = DatasetDict({split: with_names(rows, split) for split, rows in data.items()})
        if "train" in data:
            data["train"] = training_crops(
                data["train"], args.crop_size, coverage=args.coverage, reference_source="reference", seed=seed
            )
    splits = ("train", args.eval_split, args.test_split)
    return runner.require_splits(data, args.dataset, splits, args.max_train_samples, None, seed, None)


def with_names(rows: Any, split: str) -> Any:
    """``rows`` with a ``name`` column (``<split>/<row>`` where it has none)."""
    if "name" in rows.column_names:
        return rows
    return rows.add_column("name", [f"{split}/{index}" for index in range(len(rows))])


def check_held_out(data: DatasetDict, splits: tuple[str, ...], processor: Any, eval_batch_size: int) -> None:
    """Every held-out pair is one the processor takes, and the evaluation batches hold images of one size: refused
    by image name before anything trains (a failure at the final evaluation would lose the run)."""
    for split in splits:
        sizes = set()
        for row in data[split].select_columns(["image", "reference", "name"]):
            hr, ref = (np.zeros((3, image.height, image.width), np.uint8) for image in (row["image"], row["reference"]))
            try:
                processor.check_pair_sizes(hr, ref)
            except ValueError as err:
                raise ValueError(f"{split} image {row['name']!r}: {err}") from None
            sizes.add((row["image"].size, row["reference"].size))
        if eval_batch_size > 1 and len(sizes) > 1:
            raise ValueError(
                f"the {split} split holds images of {len(sizes)} sizes, scored whole: --per_device_eval_batch_size "
                f"{eval_batch_size} would batch them together; use 1 (the default)"
            )


def build_model(args: ModelArguments, contrastive_loss_weight: float | None = None) -> torch.nn.Module:
    """A fresh model from a preset (its texture extractor from VGG19 when given), or a checkpoint."""
    overrides = model_overrides(args)
    if contrastive_loss_weight is not None:
        overrides["contrastive_loss_weight"] = contrastive_loss_weight
    if args.model_name_or_path:
        model_type = load_config_dict(args.model_name_or_path)["model_type"]
        check_known_fields(MODEL_TYPES[model_type].config, overrides)
        return (
            MODEL_TYPES[model_type]
            .heads["AutoModelForImageToImage"]
            .from_pretrained(args.model_name_or_path, **overrides)
        )
    name = args.preset or DEFAULT_PRESET
    entry = MODEL_TYPES[PRESETS[name].model_type]
    check_known_fields(entry.config, overrides)
    model = entry.heads["AutoModelForImageToImage"](hf_xcv.preset_config(name, **overrides))
    if args.vgg19_weights and list(model.config.texture_channels) == VGG19_WIDTHS:
        from hf_xcv.conversion.vgg import load_texture_extractor

        load_texture_extractor(model, args.vgg19_weights)
    elif args.vgg19_weights:
        print(
            f"the texture extractor ({model.config.texture_channels} wide, not VGG19's {VGG19_WIDTHS}) keeps PyTorch's "
            "initialisation; --vgg19_weights serves the perceptual loss"
        )
    return model


def build_processor(args: ModelArguments, config: Any) -> Any:
    """The checkpoint's processor when fine-tuning one that has it, else the original pipeline's; an IPT processor
    must work in the model's value range."""
    processor = None
    if args.model_name_or_path:
        try:
            processor = AutoImageProcessor.from_pretrained(args.model_name_or_path)
        except OSError:  # no preprocessor_config.json
            pass
    if processor is None:
        ipt = has_tasks(config)
        processor = hf_xcv.IPTImageProcessor(rgb_range=config.rgb_range) if ipt else hf_xcv.TTSRImageProcessor()
    if has_tasks(config) and processor.rgb_range != config.rgb_range:
        raise ValueError(
            f"the image processor works in [0, {processor.rgb_range}] and the model in [0, {config.rgb_range}] "
            "(rgb_range): their pixel values would be misread"
        )
    return processor


def build_dataloaders(data: DatasetDict, collator: Any, data_args: DataArguments, args: TrainArguments):
    splits = [data[split] for split in ("train", data_args.eval_split, data_args.test_split)]
    return runner.build_dataloaders(splits, args, collator)


def _flip_rotate(images: list[torch.Tensor], flips: tuple[bool, bool], turns: int) -> list[torch.Tensor]:
    """The same flips and quarter turns of every (C, H, W) image of a group (a quarter turn only of square ones)."""
    out = []
    for image in images:
        image = image.flip(-1) if flips[0] else image
        image = image.flip(-2) if flips[1] else image
        square = image.shape[-1] == image.shape[-2]
        out.append(torch.rot90(image, turns, dims=(-2, -1)) if square and turns else image)
    return out


def augment(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The original's augmentation, drawn from torch's RNG per sample: random horizontal and vertical flips and a
    random number of quarter turns, one draw for LR, LR↑ and HR together and an independent one for the reference
    and its degraded copy."""
    groups = (("pixel_values", "upsampled_pixel_values", "labels"), ("reference_pixel_values",
              "degraded_reference_pixel_values"))  # fmt: skip
    out = {key: list(batch[key].unbind(0)) for group in groups for key in group}
    for index in range(batch["pixel_values"].shape[0]):
        for group in groups:
            flips = tuple(bool(b) for b in torch.randint(0, 2, (2,)))
            turns = int(torch.randint(0, 4, ()))
            images = _flip_rotate([out[key][index] for key in group], flips, turns)
            for key, image in zip(group, images):
                out[key][index] = image
    return {key: torch.stack(values) for key, values in out.items()}


def build_optimizer(model: torch.nn.Module, args: TrainArguments, total_steps: int) -> tuple[Any, Any]:
    """Adam with the original's two learning rates: TTSR's texture extractor at ``lr_texture_extractor``, everything
    else at ``learning_rate``; a constant rate by default (the original's step decay never fires)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    extractor = [p for n, p in named if ".texture_extractor." in f".{n}"]
    rest = [p for n, p in named if ".texture_extractor." not in f".{n}"]
    groups = [{"params": rest, "lr": args.learning_rate}, {"params": extractor, "lr": args.lr_texture_extractor}]
    optimizer = torch.optim.Adam(
        [g for g in groups if g["params"]], betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon
    )
    return optimizer, runner.build_scheduler(optimizer, args.lr_scheduler_type, 0, total_steps)


def model_inputs(batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {key: batch[key] for key in INPUT_KEYS}


@torch.no_grad()
def restore_split(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader) -> list[dict[str, Any]]:
    """Every image's scores (and its bicubic baseline's), gathered from every process, one row per image name (a
    distributed sampler repeats images to even out the shards)."""
    model.eval()
    rows = []
    for batch in loader:
        outputs = model(**model_inputs(batch))
        images = (outputs.reconstruction, batch["upsampled_pixel_values"], batch["labels"])
        pairs = zip(*(to_uint8(x, TTSR_RANGE) for x in images))
        for name, (output, bicubic, hr) in zip(batch["names"], pairs):
            psnr, ssim = psnr_ssim(output, hr, scale=SCALE)
            bicubic_psnr, bicubic_ssim = psnr_ssim(bicubic, hr, scale=SCALE)
            rows.append({"name": name, "psnr": psnr, "ssim": ssim, "bicubic_psnr": bicubic_psnr,
                         "bicubic_ssim": bicubic_ssim})  # fmt: skip
    return list({row["name"]: row for row in gather_object(rows)}.values())


def evaluate_split(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader) -> dict[str, Any]:
    """Mean Y-channel PSNR / SSIM (shave 4) of the whole split, the model's and bicubic upsampling's."""
    rows = restore_split(accelerator, model, loader)
    results = {key: float(np.mean([row[key] for row in rows])) for key in ("psnr", "ssim", "bicubic_psnr",
               "bicubic_ssim")}  # fmt: skip
    return {**results, "num_images": len(rows)}


def reporter(
    accelerator: Accelerator, evaluate: Callable[[], dict], every: int, split: str, tasks: list[str] | None = None
) -> Callable[[TrainerState, bool], None]:
    def report(state: TrainerState, epoch_ended: bool) -> None:
        if epoch_ended and every and state.epoch % every == 0:
            results = evaluate()
            if tasks is not None:
                scores = tasks_mode.describe(results, tasks)
            else:
                scores = (f"PSNR {results['psnr']:.2f} dB SSIM {results['ssim']:.4f} (bicubic "
                          f"{results['bicubic_psnr']:.2f} / {results['bicubic_ssim']:.4f})")  # fmt: skip
            accelerator.print(f"epoch {state.epoch} step {state.completed_steps}: {split} {scores}")

    return report


@torch.no_grad()
def draw_pictures(
    model: torch.nn.Module, processor: Any, split: Any, count: int, path: Path, scales: dict[str, int] | None = None
) -> None:
    """LR, bicubic, output, HR and reference of the first ``count`` images of ``split``, in one PNG (IPT: input,
    baseline, output and clean image, per task)."""
    model.eval()
    if scales is not None:
        rows = tasks_mode.picture_rows(model, processor, split, count, list(scales))
        restoration_panel(rows, output_label="IPT").save(path)
        return
    rows = []
    for row in split.select(range(min(count, len(split)))):
        batch = processor(high_resolution_images=row["image"], references=row["reference"], return_tensors="pt")
        inputs = {key: value.to(model.device) for key, value in model_inputs(batch).items()}
        output = model(**inputs).reconstruction
        keys = ("pixel_values", "upsampled_pixel_values", "labels", "reference_pixel_values")
        lr, bicubic, hr, ref = (to_uint8(batch[key], TTSR_RANGE)[0] for key in keys)
        output = to_uint8(output, TTSR_RANGE)[0]
        rows.append({"lr": lr, "bicubic": bicubic, "output": output, "hr": hr, "reference": ref,
                     "title": str(row.get("name", ""))})  # fmt: skip
    restoration_panel(rows, output_label=type(model).__name__.removesuffix("ForReferenceSuperResolution")).save(path)


def model_card(model, results, args: TrainArguments, model_args, data_args: DataArguments, argv) -> ModelCard:
    split = data_args.test_split
    if has_tasks(model.config):
        tasks = list(trained_tasks(model_args, model.config))
        family = {"family": "IPT", "paper": "Chen et al. 2021", "tasks": tasks, "scores": results[split]}
        left_out = TTSR_OPTIONS
        metrics = {f"{metric}_{task}": results[split][f"{metric}_{task}"] for task in tasks for metric in ("psnr",
                   "ssim")}  # fmt: skip
    else:
        family = {"family": "TTSR", "paper": "Yang et al. 2020", "scale": SCALE, "baseline": results[split]}
        metrics = {k: results[split][k] for k in ("psnr", "ssim")}  # the model's; bicubic's go in the text
        left_out = ("contrastive_loss_weight",)
    return runner.run_model_card(
        TEMPLATE, model, args, results, argv, task="image-restoration", split=split, metrics=metrics,
        dataset=data_args.dataset, built_in=("photos", "scikit-image-photos"),
        base_model=model_args.model_name_or_path, task_type="image-to-image", pipeline_tag="image-to-image",
        template_vars=family, left_out=left_out,
    )  # fmt: skip


def reconstruction_only(model: torch.nn.Module) -> Callable[[dict[str, Any]], torch.Tensor]:
    def loss_of(batch: dict[str, Any]) -> torch.Tensor:
        return model(**model_inputs(batch), labels=batch["labels"]).loss

    return loss_of


class AveragedGradients:
    """The discriminator's optimizer, whose step first averages the gradients over the processes of a distributed run:
    the discriminator is no DDP module (its gradient penalty differentiates through it twice), so its replicas are
    kept equal this way."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups

    def step(self, closure: Any = None) -> Any:
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        if world > 1:
            for group in self.param_groups:
                for param in group["params"]:
                    if param.grad is not None:
                        torch.distributed.all_reduce(param.grad)
                        param.grad /= world
        return self.optimizer.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)


def build_criterion(accelerator: Accelerator, model_args: ModelArguments, args: TrainArguments, crop_size: int):
    """The full TTSR objective (``--losses all``): the frozen VGG19, the discriminator for ``crop_size`` inputs with its
    Adam, the original's weights; registered for checkpointing (the discriminator's state resumes exactly)."""
    from hf_xcv.conversion.vgg import load_perceptual_vgg
    from hf_xcv.losses import TTSRAdversarialLoss, TTSRCriterion, TTSRDiscriminator, TTSRLossWeights

    discriminator = TTSRDiscriminator(in_size=crop_size).to(accelerator.device)
    optimizer = torch.optim.Adam(discriminator.parameters(), lr=args.lr_discriminator, betas=(0.0, 0.9), eps=1e-8)
    adversarial = TTSRAdversarialLoss(discriminator, AveragedGradients(optimizer), gan_k=args.gan_k)
    weights = TTSRLossWeights(1.0, args.perceptual_weight, args.transferal_weight, args.adversarial_weight)
    vgg = load_perceptual_vgg(model_args.vgg19_weights).to(accelerator.device)
    criterion = TTSRCriterion(vgg, adversarial, weights)
    accelerator.register_for_checkpointing(criterion)
    return criterion


def full_objective(
    accelerator: Accelerator, model: torch.nn.Module, criterion: Any, state: TrainerState, init_epochs: int
) -> Callable[[dict[str, Any]], torch.Tensor]:
    """The original two phases: the reconstruction loss alone for ``init_epochs`` epochs, then every loss."""
    unwrapped = accelerator.unwrap_model(model)

    def loss_of(batch: dict[str, Any]) -> torch.Tensor:
        outputs = model(**model_inputs(batch))
        total, _ = criterion(unwrapped, outputs, batch["labels"], reconstruction_only=state.epoch < init_epochs)
        return total

    return loss_of


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    model_args, data_args, args = parse_args(argv)
    config = check_args(model_args, args)  # these before the run folder is claimed: a bad option or data leaves nothing
    apply_recipe(args, config)
    if has_tasks(config) and args.contrastive_loss_weight is None:  # the card records what the run used
        args.contrastive_loss_weight = config.contrastive_loss_weight
    scales = trained_tasks(model_args, config) if has_tasks(config) else None
    data = load_data(data_args, args.seed, config, scales)
    processor = build_processor(model_args, config)
    held_out = (data_args.eval_split, data_args.test_split)
    if scales is None:
        check_held_out(data, held_out, processor, args.per_device_eval_batch_size)
    else:
        tasks_mode.check_held_out(data, held_out, config, scales)
    multi_task = scales is not None and len(config.tasks) > 1  # the other tasks' heads get no gradient in a step
    accelerator, out = runner.start_run(args, find_unused_parameters=multi_task, model=model_args, data=data_args)
    with runner.setting_up(accelerator, out):
        model = build_model(model_args, args.contrastive_loss_weight)
        criterion = None
        if args.losses == "all":  # before the state is restored: the discriminator's is part of it
            criterion = build_criterion(accelerator, model_args, args, data_args.crop_size)
        collator = RestorationCollator(processor) if scales is None else CleanImageCollator()
        loaders = build_dataloaders(data, collator, data_args, args)
        parts, state, (eval_dl, test_dl) = runner.prepare_loop(
            accelerator, out, args, model, loaders, lambda model, total: build_optimizer(model, args, total)
        )
    model = parts.model
    if scales is None:
        evaluate = functools.partial(evaluate_split, accelerator, model)
    else:
        evaluate = functools.partial(tasks_mode.score_split, accelerator, model, processor, tasks=list(scales))
    report = reporter(accelerator, functools.partial(evaluate, eval_dl), args.eval_every_epochs, data_args.eval_split,
                      None if scales is None else list(scales))  # fmt: skip
    loss_of = training_objective(accelerator, model, criterion, state, processor, config, scales, data_args, args)
    state, stopped = runner.train_loop(parts, state, args, loss_of, report)
    if stopped:
        return None
    scores = {
        split: functools.partial(evaluate, dl)
        for split, dl in ((data_args.eval_split, eval_dl), (data_args.test_split, test_dl))
    }
    card_for = functools.partial(model_card, args=args, model_args=model_args, data_args=data_args, argv=argv)
    if data_args.pictures and accelerator.is_main_process:  # before the final folder is pushed: it goes along
        unwrapped = accelerator.unwrap_model(model)
        draw_pictures(unwrapped, processor, data[data_args.test_split], data_args.pictures, out / PICTURES, scales)
    return runner.finish(parts, state, args, scores, [processor], card_for)


def training_objective(accelerator, model, criterion, state, processor, config, scales, data_args, args):
    """batch -> loss: IPT's one task per batch, TTSR's reconstruction loss or its full objective (augmented)."""
    if scales is not None:
        device = accelerator.device
        return tasks_mode.training_objective(
            model, processor, scales, config.image_size, data_args.augment, device, state, args.seed
        )
    if criterion is None:
        objective = reconstruction_only(model)
    else:
        objective = full_objective(accelerator, model, criterion, state, args.num_init_epochs)

    def loss_of(batch: dict[str, Any]) -> torch.Tensor:
        return objective(augment(batch) if data_args.augment else batch)

    return loss_of


if __name__ == "__main__":
    main()
