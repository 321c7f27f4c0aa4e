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

import torch
from accelerate import Accelerator
from datasets import DatasetDict, load_from_disk
from huggingface_hub import ModelCard
from transformers import AutoImageProcessor, HfArgumentParser

import hf_xcv
from hf_xcv.auto import MODEL_TYPES
from hf_xcv.cli.restoration_reference import ReferenceSuperResolution
from hf_xcv.cli.restoration_tasks import NamedTaskRestoration
from hf_xcv.configuration_utils import check_known_fields
from hf_xcv.conversion import load_config_dict
from hf_xcv.data import load_photos_dataset, load_restoration_folder, training_crops
from hf_xcv.data.restoration import check_restoration_dataset
from hf_xcv.presets import PRESETS
from hf_xcv.training import TEMPLATES, TrainerState, runner

from ..utils.errors import UsageError

TEMPLATE = TEMPLATES / "image_restoration.md"
PICTURES = "restorations.png"
DEFAULT_PRESET = "ttsr-photos"
# How the script trains each kind of restoration model, by what its family's recipe says
# (``recipe.notes["restoration"]``): reference-based super-resolution (TTSR) or named tasks (IPT).
TRAININGS = {"reference": ReferenceSuperResolution, "tasks": NamedTaskRestoration}
# The model types this script trains: those with an image-to-image head and a recipe of one of those kinds.
RESTORATION_TYPES = sorted(
    t
    for t, e in MODEL_TYPES.items()
    if "AutoModelForImageToImage" in e.heads and e.recipe is not None and e.recipe.notes.get("restoration") in TRAININGS
)


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


def apply_recipe(args: TrainArguments, config: Any) -> None:
    """The family's recipe (its paper's: :attr:`hf_xcv.registry.ModelEntry.recipe`) for every option left unset."""
    for name, value in MODEL_TYPES[config.model_type].recipe.defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def training_of(config: Any, model_args: ModelArguments) -> Any:
    """How this script trains the model of ``config``: the training of its family's kind."""
    kind = MODEL_TYPES[config.model_type].recipe.notes["restoration"]
    return TRAININGS[kind](config, model_args)


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


def parse_args(argv: list[str] | None = None) -> tuple[ModelArguments, DataArguments, TrainArguments]:
    return HfArgumentParser((ModelArguments, DataArguments, TrainArguments)).parse_args_into_dataclasses(args=argv)


def check_args(model_args: ModelArguments, args: TrainArguments) -> Any:
    """What can be refused before the run folder is claimed, by name; how the run trains (its config inside)."""
    try:
        import skimage.metrics  # noqa: F401  (SSIM of the evaluation; found missing at the end, it loses the run)
    except ImportError as err:
        raise UsageError("the evaluation's SSIM needs scikit-image: pip install 'hf_xcv[restoration]'") from err
    if model_args.model_name_or_path and model_args.preset:
        raise UsageError("pass either --preset or --model_name_or_path, not both")
    name = model_args.preset or DEFAULT_PRESET
    if not model_args.model_name_or_path and (name not in PRESETS or PRESETS[name].model_type not in RESTORATION_TYPES):
        fitting = sorted(n for n, p in PRESETS.items() if p.model_type in RESTORATION_TYPES)
        raise UsageError(f"preset {name!r} is not an image-restoration preset; this script trains {fitting}")
    if model_args.model_name_or_path:
        source = load_config_dict(model_args.model_name_or_path).get("model_type")
        if source not in RESTORATION_TYPES:
            raise UsageError(
                f"{model_args.model_name_or_path} holds a checkpoint of model_type {source!r}; this script trains "
                f"{RESTORATION_TYPES}"
            )
    training = training_of(resolve_config(model_args), model_args)
    training.check(args)
    return training


def load_data(args: DataArguments, seed: int, training: Any, progress: bool = True) -> DatasetDict:
    """HR images with references: training crops, and whole held-out images (each row named: the scores of a
    distributed evaluation are gathered by name). A saved dataset's images are all decoded first, every one that
    does not decode named at once (a folder's are read, each naming its file, by :func:`load_restoration_folder`)."""
    args.crop_size = training.crop_size(args.crop_size)
    if args.dataset == "photos":
        data = load_photos_dataset(
            crop_size=args.crop_size, coverage=args.coverage, seed=seed, scale=training.held_out_scale
        )
    else:
        if Path(args.dataset, "dataset_dict.json").exists():
            data = load_from_disk(args.dataset)
            check_restoration_dataset(data, args.dataset, progress)
        else:
            policy, multiple = training.folder_policy(args.missing_reference)
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


def build_model(args: ModelArguments, overrides: dict[str, Any] | None = None) -> torch.nn.Module:
    """A fresh model from a preset (initialised as its family's training says), or a checkpoint; ``overrides``: config
    fields the training sets (IPT's contrastive weight)."""
    overrides = {**model_overrides(args), **{k: v for k, v in (overrides or {}).items() if v is not None}}
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
    training_of(model.config, args).initialise(model)
    return model


def build_processor(args: ModelArguments, config: Any) -> Any:
    """The checkpoint's processor when fine-tuning one that has it, else the original pipeline's; either must fit the
    model of ``config`` (IPT's value range)."""
    training = training_of(config, args)
    processor = None
    if args.model_name_or_path:
        try:
            processor = AutoImageProcessor.from_pretrained(args.model_name_or_path)
        except OSError:  # no preprocessor_config.json
            pass
    processor = processor if processor is not None else training.default_processor()
    training.check_processor(processor)
    return processor


def build_dataloaders(data: DatasetDict, collator: Any, data_args: DataArguments, args: TrainArguments):
    splits = [data[split] for split in ("train", data_args.eval_split, data_args.test_split)]
    return runner.build_dataloaders(splits, args, collator)


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


def reporter(
    accelerator: Accelerator, evaluate: Callable[[], dict], every: int, split: str, describe: Callable[[dict], str]
) -> Callable[[TrainerState, bool], None]:
    def report(state: TrainerState, epoch_ended: bool) -> None:
        if epoch_ended and every and state.epoch % every == 0:
            scores = describe(evaluate())
            accelerator.print(f"epoch {state.epoch} step {state.completed_steps}: {split} {scores}")

    return report


def others_options(training: Any) -> list[str]:
    """The training options of the other kinds of restoration, which do not apply to the run (its card leaves them
    out)."""
    return [name for kind in TRAININGS.values() if not isinstance(training, kind) for name in kind.own_options]


def model_card(model, results, args: TrainArguments, model_args, data_args: DataArguments, argv, training) -> ModelCard:
    split = data_args.test_split
    recipe = MODEL_TYPES[model.config.model_type].recipe
    facts, metrics = training.card_facts(results[split])
    return runner.run_model_card(
        TEMPLATE, model, args, results, argv, task="image-restoration", split=split, metrics=metrics,
        dataset=data_args.dataset, built_in=("photos", "scikit-image-photos"),
        base_model=model_args.model_name_or_path, task_type="image-to-image", pipeline_tag="image-to-image",
        template_vars={"family": recipe.name, "paper": recipe.paper, **facts}, left_out=others_options(training),
    )  # fmt: skip


@runner.distributed_main
def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    model_args, data_args, args = parse_args(argv)
    training = check_args(model_args, args)  # before the run folder is claimed: a bad option or data leaves nothing
    apply_recipe(args, training.config)
    data = load_data(data_args, args.seed, training, not args.disable_tqdm)
    processor = build_processor(model_args, training.config)
    held_out = (data_args.eval_split, data_args.test_split)
    training.check_held_out(data, held_out, processor, args.per_device_eval_batch_size)
    accelerator, out = runner.start_run(
        args, find_unused_parameters=training.find_unused_parameters, model=model_args, data=data_args
    )
    with runner.setting_up(accelerator, out):
        model = build_model(model_args, training.model_overrides(args))
        criterion = training.build_criterion(accelerator, args, data_args.crop_size)  # before the state is restored
        loaders = build_dataloaders(data, training.collator(processor), data_args, args)
        parts, state, (eval_dl, test_dl) = runner.prepare_loop(
            accelerator, out, args, model, loaders, lambda model, total: build_optimizer(model, args, total)
        )
    model = parts.model
    evaluate = functools.partial(training.evaluate, accelerator, model, processor)
    report = reporter(accelerator, functools.partial(evaluate, eval_dl), args.eval_every_epochs, data_args.eval_split,
                      training.describe)  # fmt: skip
    loss_of = training.objective(accelerator, model, criterion, state, processor, data_args, args)
    state, stopped = runner.train_loop(parts, state, args, loss_of, report)
    if stopped:
        return None
    scores = {
        split: functools.partial(evaluate, dl)
        for split, dl in ((data_args.eval_split, eval_dl), (data_args.test_split, test_dl))
    }
    card_for = functools.partial(
        model_card, args=args, model_args=model_args, data_args=data_args, argv=argv, training=training
    )
    if data_args.pictures:  # before the final folder is pushed: it goes along
        whole = runner.full_model(accelerator, model)  # every process: under FSDP each sends its shards
        if accelerator.is_main_process:
            training.draw_pictures(whole, processor, data[data_args.test_split], data_args.pictures, out / PICTURES)
    return runner.finish(parts, state, args, scores, [processor], card_for)


if __name__ == "__main__":
    main()
