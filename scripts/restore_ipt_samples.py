"""Reload trained IPT models in this (fresh) process through the Auto classes and restore the held-out photos.

    python scripts/restore_ipt_samples.py outputs/ipt-photos [outputs/ipt-photos-x4 ...]

For each folder: scores the reloaded model and processor on the whole built-in test split, every task the card
records (Y-channel PSNR / SSIM; shave = scale for super-resolution, none otherwise) next to its baseline (bicubic
upsampling; the degraded input), checks the means against the card, restores a photo larger than one tile the way a
user would (``ImageRestorationPipeline``: image in, PIL image out, saved beside the model) and fails when a task does
not beat its baseline in PSNR and SSIM.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from accelerate import Accelerator
from reloading import load_trained
from torch.utils.data import DataLoader
from transformers import AutoModelForImageToImage

import hf_xcv
from hf_xcv.cli import restoration_tasks
from hf_xcv.data import load_photos_dataset
from hf_xcv.data.restoration import CleanImageCollator


def check_folder(folder: Path) -> None:
    model, processor, recorded = load_trained(folder, AutoModelForImageToImage)
    tasks = [key.removeprefix("psnr_") for key in recorded if key.startswith("psnr_")]
    test = load_photos_dataset(scale=restoration_tasks.held_out_scale(model.config))["test"]  # as training cut them
    loader = DataLoader(test, batch_size=1, collate_fn=CleanImageCollator())
    results = restoration_tasks.score_split(Accelerator(cpu=True), model, processor, loader, tasks)
    print(f"{folder}: {restoration_tasks.describe(results, tasks)}")
    for task in tasks:
        if abs(results[f"psnr_{task}"] - recorded[f"psnr_{task}"]) > 1e-3:
            raise SystemExit(f"{task}: the reloaded model scores {results[f'psnr_{task}']:.4f} dB, the card records "
                             f"{recorded[f'psnr_{task}']:.4f}")  # fmt: skip
        psnr, ssim = results[f"psnr_{task}"], results[f"ssim_{task}"]
        base_psnr, base_ssim = results[f"baseline_psnr_{task}"], results[f"baseline_ssim_{task}"]
        if psnr <= base_psnr or ssim <= base_ssim:
            raise SystemExit(f"{task} does not beat its baseline: {psnr:.2f} dB / {ssim:.4f} against {base_psnr:.2f} "
                             f"/ {base_ssim:.4f}")  # fmt: skip

    # A user's call: a photo (larger than one tile: restored in blended tiles) in, a PIL image out.
    pipe = hf_xcv.ImageRestorationPipeline(model=model, image_processor=processor)
    photo, task = test[0]["image"], tasks[0]
    scale = model.config.restoration_tasks[model.config.task_index(task)].scale
    small = photo.resize((photo.width // scale, photo.height // scale)) if scale > 1 else photo
    restored = pipe(small, task=task)
    path = folder / f"restored_{task}.png"
    restored.save(path)
    side = model.config.image_size
    print(f"{task}: restored a {small.width}x{small.height} photo ({side}x{side} tiles, blended) to "
          f"{restored.width}x{restored.height}: {path}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", type=Path, nargs="+")
    for folder in parser.parse_args().folders:
        check_folder(folder)


if __name__ == "__main__":
    main()
