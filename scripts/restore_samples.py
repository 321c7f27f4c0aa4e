"""Reload a trained TTSR in this (fresh) process through the Auto classes and super-resolve the held-out photos.

    python scripts/restore_samples.py outputs/ttsr-photos [--min_gain 0.1]

Scores the reloaded model and processor on the whole built-in test split (Y-channel PSNR / SSIM, shave 4) next to
bicubic upsampling of the same inputs, prints each image's numbers, checks that the mean matches the PSNR the model
card records, upscales one photo from its low-resolution image and a reference the way a user would (processor ->
model -> ``postprocess`` to a PIL image, saved beside the model) and fails when the model is not ``--min_gain`` dB
above bicubic in PSNR, or not above it in SSIM.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from accelerate import Accelerator
from reloading import load_trained
from torch.utils.data import DataLoader
from transformers import AutoModelForImageToImage

from hf_xcv.cli.restoration_reference import restore_split
from hf_xcv.data import load_photos_dataset
from hf_xcv.data.restoration import RestorationCollator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--min_gain", type=float, default=0.0, help="dB of PSNR the model must gain over bicubic")
    args = parser.parse_args()

    model, processor, recorded = load_trained(args.folder, AutoModelForImageToImage)
    print(f"model card: test PSNR {recorded['psnr']:.2f} dB, SSIM {recorded['ssim']:.4f}")
    test = load_photos_dataset()["test"]
    loader = DataLoader(test, batch_size=1, collate_fn=RestorationCollator(processor))
    rows = restore_split(Accelerator(cpu=True), model, loader)
    for row in rows:
        print(f"{row['name']:>28}: {row['psnr']:.2f} dB / {row['ssim']:.4f} (bicubic {row['bicubic_psnr']:.2f} dB / "
              f"{row['bicubic_ssim']:.4f})")  # fmt: skip
    mean = {key: sum(row[key] for row in rows) / len(rows) for key in ("psnr", "ssim", "bicubic_psnr", "bicubic_ssim")}
    print(f"{'mean':>28}: {mean['psnr']:.2f} dB / {mean['ssim']:.4f} (bicubic {mean['bicubic_psnr']:.2f} dB / "
          f"{mean['bicubic_ssim']:.4f})")  # fmt: skip

    # A user's call: a low-resolution photo and a reference in, a PIL image four times as large out.
    hr, reference = test[0]["image"], test[0]["reference"]
    low = hr.resize((hr.width // 4, hr.height // 4))
    with torch.no_grad():
        upscaled = processor.postprocess(model(**processor(low, reference, return_tensors="pt")))[0]
    path = args.folder / "upscaled_sample.png"
    upscaled.save(path)
    print(f"upscaled a {low.width}x{low.height} photo to {upscaled.width}x{upscaled.height}: {path}")

    if abs(mean["psnr"] - recorded["psnr"]) > 1e-3:
        raise SystemExit(f"the reloaded model scores {mean['psnr']:.4f} dB, the card records {recorded['psnr']:.4f}")
    gain = mean["psnr"] - mean["bicubic_psnr"]
    if gain < args.min_gain or mean["ssim"] <= mean["bicubic_ssim"]:
        raise SystemExit(
            f"the model does not beat bicubic: PSNR {mean['psnr']:.2f} dB against {mean['bicubic_psnr']:.2f} (gain "
            f"{gain:.2f}, at least {args.min_gain} asked), SSIM {mean['ssim']:.4f} against {mean['bicubic_ssim']:.4f}"
        )


if __name__ == "__main__":
    main()
