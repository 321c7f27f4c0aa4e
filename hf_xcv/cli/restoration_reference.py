"""What ``hf-xcv-train image-restoration`` does for reference-based x4 super-resolution (TTSR): pairs of an HR image and
its reference degraded as the original pipeline does (:class:`hf_xcv.TTSRImageProcessor`), the original's flips and
quarter turns, TTSR-rec's L1 loss or the full TTSR objective (perceptual, transferal perceptual and WGAN-GP
adversarial losses after ``--num_init_epochs`` of L1), and held-out images scored whole next to bicubic upsampling
(Y-channel PSNR / SSIM, the border shaved by 4).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from torch.utils.data import DataLoader

from hf_xcv.cli.restoration_training import RestorationTraining
from hf_xcv.data.restoration import RestorationCollator
from hf_xcv.metrics import psnr_ssim
from hf_xcv.processing.restoration import SCALE, to_uint8
from hf_xcv.training import TrainerState
from hf_xcv.visualization import restoration_panel

from ..utils.errors import UsageError

TTSR_RANGE = (-1.0, 1.0)  # TTSR's values
LOSS_CHOICES = ("rec", "all")
DEFAULT_CROP = 160  # the original's HR crops (LR 40x40)
VGG19_WIDTHS = [64, 128, 256]  # relu1_1, relu2_1, relu3_1: the texture extractor ImageNet's VGG19 initialises
INPUT_KEYS = ("pixel_values", "upsampled_pixel_values", "reference_pixel_values", "degraded_reference_pixel_values")


def model_inputs(batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {key: batch[key] for key in INPUT_KEYS}


def check_pairs(data: Any, splits: tuple[str, ...], processor: Any, eval_batch_size: int) -> None:
    """Every held-out pair is one the processor takes, and the evaluation batches hold images of one size: refused
    by image name before anything trains (a failure at the final evaluation would lose the run)."""
    for split in splits:
        sizes = set()
        for row in data[split].select_columns(["image", "reference", "name"]):
            hr, ref = (np.zeros((3, image.height, image.width), np.uint8) for image in (row["image"], row["reference"]))
            try:
                processor.check_pair_sizes(hr, ref)
            except ValueError as err:
                raise UsageError(f"{split} image {row['name']!r}: {err}") from None
            sizes.add((row["image"].size, row["reference"].size))
        if eval_batch_size > 1 and len(sizes) > 1:
            raise UsageError(
                f"the {split} split holds images of {len(sizes)} sizes, scored whole: --per_device_eval_batch_size "
                f"{eval_batch_size} would batch them together; use 1 (the default)"
            )


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


def build_criterion(accelerator: Accelerator, vgg19_weights: str, args: Any, crop_size: int) -> Any:
    """The full TTSR objective (``--losses all``): the frozen VGG19, the discriminator for ``crop_size`` inputs with its
    Adam, the original's weights; registered for checkpointing (the discriminator's state resumes exactly)."""
    from hf_xcv.conversion.vgg import load_perceptual_vgg
    from hf_xcv.losses import TTSRAdversarialLoss, TTSRCriterion, TTSRDiscriminator, TTSRLossWeights

    discriminator = TTSRDiscriminator(in_size=crop_size).to(accelerator.device)
    optimizer = torch.optim.Adam(discriminator.parameters(), lr=args.lr_discriminator, betas=(0.0, 0.9), eps=1e-8)
    adversarial = TTSRAdversarialLoss(discriminator, AveragedGradients(optimizer), gan_k=args.gan_k)
    weights = TTSRLossWeights(1.0, args.perceptual_weight, args.transferal_weight, args.adversarial_weight)
    vgg = load_perceptual_vgg(vgg19_weights).to(accelerator.device)
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


class ReferenceSuperResolution(RestorationTraining):
    """The training of a reference-based x4 super-resolution model (a family whose recipe says
    ``notes["restoration"] == "reference"``: TTSR): pairs of an LR image and a reference, values in [-1, 1], the
    family's processor degrading HR images as the original pipeline does."""

    # its own options (the texture extractor's rate, the full objective's losses)
    own_options = ("lr_texture_extractor", "losses", "num_init_epochs", "perceptual_weight", "transferal_weight",
                   "adversarial_weight", "gan_k", "lr_discriminator")  # fmt: skip
    held_out_scale = SCALE

    def check(self, args: Any) -> None:
        """The run's options that this training refuses, by name, before the run folder is claimed."""
        if args.losses not in LOSS_CHOICES:
            raise UsageError(f"--losses {args.losses!r} is not allowed; allowed values: {list(LOSS_CHOICES)}")
        if args.losses == "all" and not self.model_args.vgg19_weights:
            raise UsageError("--losses all needs --vgg19_weights (the perceptual loss's VGG19 ImageNet weights)")
        if self.model_args.tasks:
            raise UsageError(f"--tasks is for models of named tasks (IPT), not {self.config.model_type}")
        if args.contrastive_loss_weight is not None:
            raise UsageError("--contrastive_loss_weight is IPT's; TTSR's losses are set by --losses")

    def crop_size(self, crop_size: int | None) -> int:
        """The training crops' side in HR pixels (the original's 160 by default), checked."""
        crop = crop_size or DEFAULT_CROP
        if crop % SCALE or crop < SCALE * 3:
            raise UsageError(
                f"--crop_size {crop} must be a multiple of 4 and at least 12 (a 3x3 low-resolution crop: one "
                "patch of TTSR's relevance embedding)"
            )
        return crop

    def folder_policy(self, missing_reference: str) -> tuple[str, int]:
        """How a folder's HR images without a reference are taken, and the multiple their sides are cut to."""
        return missing_reference, SCALE

    def check_held_out(self, data: Any, splits: tuple[str, ...], processor: Any, eval_batch_size: int) -> None:
        check_pairs(data, splits, processor, eval_batch_size)

    def initialise(self, model: torch.nn.Module) -> None:
        """The texture extractor from VGG19's ImageNet weights, where its widths are VGG19's (the original's)."""
        vgg19 = self.model_args.vgg19_weights
        if vgg19 and list(model.config.texture_channels) == VGG19_WIDTHS:
            from hf_xcv.conversion.vgg import load_texture_extractor

            load_texture_extractor(model, vgg19)
        elif vgg19:
            print(
                f"the texture extractor ({model.config.texture_channels} wide, not VGG19's {VGG19_WIDTHS}) keeps "
                "PyTorch's initialisation; --vgg19_weights serves the perceptual loss"
            )

    def build_criterion(self, accelerator: Accelerator, args: Any, crop_size: int) -> Any:
        """The full objective's losses (``--losses all``, before the state is restored: the discriminator's is part of
        it), or None for TTSR-rec."""
        if args.losses != "all":
            return None
        return build_criterion(accelerator, self.model_args.vgg19_weights, args, crop_size)

    def collator(self, processor: Any) -> Any:
        return RestorationCollator(processor)

    def objective(self, accelerator, model, criterion, state, processor, data_args, args):
        """batch -> loss: TTSR's reconstruction loss or its full objective, on augmented batches."""
        if criterion is None:
            objective = reconstruction_only(model)
        else:
            objective = full_objective(accelerator, model, criterion, state, args.num_init_epochs)

        def loss_of(batch: dict[str, Any]) -> torch.Tensor:
            return objective(augment(batch) if data_args.augment else batch)

        return loss_of

    def evaluate(self, accelerator: Accelerator, model: torch.nn.Module, processor: Any, loader: DataLoader) -> dict:
        return evaluate_split(accelerator, model, loader)

    def describe(self, results: dict[str, Any]) -> str:
        return (f"PSNR {results['psnr']:.2f} dB SSIM {results['ssim']:.4f} (bicubic "
                f"{results['bicubic_psnr']:.2f} / {results['bicubic_ssim']:.4f})")  # fmt: skip

    @torch.no_grad()
    def draw_pictures(self, model: torch.nn.Module, processor: Any, split: Any, count: int, path: Path) -> None:
        """LR, bicubic, output, HR and reference of the first ``count`` images of ``split``, in one PNG."""
        model.eval()
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
        restoration_panel(rows, output_label=self.name).save(path)

    def card_facts(self, scores: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        """The card's template variables and its model-index metrics (the model's; bicubic's go in the text)."""
        return {"scale": SCALE, "baseline": scores}, {k: scores[k] for k in ("psnr", "ssim")}
