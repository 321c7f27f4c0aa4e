"""Does a paper's training recipe help where data is scarce? ViT (DeiT's recipe) and Swin (Swin's recipe) trained from
scratch on a tenth of the built-in digits' train split: without the recipe, with it as published, and with its image
geometry fitted to 8-pixel digits; the same number of steps, three seeds each; test accuracy as mean +- std.

    python benchmarks/bench_recipes.py                      # about 20 minutes on 2 CPU cores
    python benchmarks/bench_recipes.py --steps 300 --seeds 0 --results ''

Every arm trains with the same learning rate, batch, steps and schedule kind (cosine): the recipe's linearly scaled
learning rate (5e-4 per 512 images) would be 3e-5 at this batch, too small for a thousand steps, so
``--learning_rate`` is given to all. Otherwise a recipe arm is the recipe's (``--recipe deit`` / ``--recipe swin``:
RandAugment, random resized crop and flip, random erasing, Mixup / CutMix with label smoothing, stochastic depth,
gradient clipping, EMA, warm-up) and the plain arm is the script's own training (a random shift of up to 2 pixels).
Each run is ``hf-xcv-train image-classification`` in a fresh process; the table goes to
benchmarks/results/recipes.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import results_file

MODELS = {"vit": ("vit-digits", "deit"), "swin": ("swin-digits", "swin")}
# The recipe with its image geometry fitted to 8-pixel digits: crops of at least half the image (the published 8 %
# of an 8x8 digit is 5 pixels), no mirror image (a mirrored digit is another symbol or none), Mixup 0.2 and no CutMix
# (a pasted box of another digit replaces most of this one). Everything else as published.
FITTED = ["--crop_scale_min", "0.5", "--hflip", "0", "--mixup_alpha", "0.2", "--cutmix_alpha", "0"]
SHORT_RUN = ["--model_ema_warmup", "true"]  # an EMA decay of 0.99996 averages over ~25k steps: warm it up
DIGITS_TRAIN = 1439  # the built-in digits' train split (hf_xcv.data.load_digits_dataset)


def train(out: Path, preset: str, recipe: list[str], seed: int, args: argparse.Namespace) -> float:
    """Test accuracy of one run."""
    command = [
        sys.executable, "-m", "hf_xcv.train", "image-classification", "--output_dir", str(out), "--preset", preset,
        "--seed", str(seed), "--max_train_samples", str(round(args.train_fraction * DIGITS_TRAIN)),
        "--max_train_steps", str(args.steps), "--per_device_train_batch_size", str(args.batch),
        "--learning_rate", str(args.learning_rate), "--eval_every_epochs", "0", "--disable_tqdm",
        "--checkpointing_steps", str(args.steps),
    ]  # fmt: skip
    command += recipe
    result = subprocess.run(command, capture_output=True, text=True, env=os.environ | {"TOKENIZERS_PARALLELISM": "0"})
    if result.returncode:
        raise SystemExit(f"run failed: {' '.join(command)}\n{result.stderr[-3000:]}")
    return json.loads((out / "all_results.json").read_text())["test"]["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--train_fraction", type=float, default=0.1)
    parser.add_argument("--results", default=str(results_file.RESULTS / "recipes.md"), help="'' for nowhere")
    args = parser.parse_args()
    samples = round(args.train_fraction * DIGITS_TRAIN)
    with results_file.tee() as printed:
        print(
            f"Digits, {samples} training images ({args.train_fraction:.0%} of the train split), {args.steps} steps of "
            f"batch {args.batch}, learning rate {args.learning_rate} in every arm; test accuracy (179 images), mean "
            f"+- std over seeds {args.seeds}."
        )
        print("")
        print("| model | recipe | without | as published | fitted to digits | differences |")
        print("|---|---|---|---|---|---|")
        with tempfile.TemporaryDirectory() as scratch:
            for model in args.models:
                preset, recipe = MODELS[model]
                arms = {
                    "without": [],
                    "published": ["--recipe", recipe, *SHORT_RUN],
                    "fitted": ["--recipe", recipe, *SHORT_RUN, *FITTED],
                }
                scores: dict[str, list[float]] = {arm: [] for arm in arms}
                for seed in args.seeds:
                    for arm, options in arms.items():
                        out = Path(scratch, f"{model}-{arm}-{seed}")
                        scores[arm].append(train(out, preset, options, seed, args))
                        print(f"  {model} {arm} seed {seed}: {scores[arm][-1]:.4f}", file=sys.stderr, flush=True)

                def cell(values: list[float]) -> str:
                    spread = statistics.stdev(values) if len(values) > 1 else 0.0
                    return f"{100 * statistics.mean(values):.1f} +- {100 * spread:.1f}"

                base = statistics.mean(scores["without"])
                gains = [100 * (statistics.mean(scores[arm]) - base) for arm in ("published", "fitted")]
                print(
                    f"| {preset} | `--recipe {recipe}` | {cell(scores['without'])} | {cell(scores['published'])} | "
                    f"{cell(scores['fitted'])} | {gains[0]:+.1f} / {gains[1]:+.1f} points |"
                )
        print("")
        print(
            f"Fitted to digits: `--recipe NAME {' '.join(SHORT_RUN + FITTED)}`; as published: `--recipe NAME "
            f"{' '.join(SHORT_RUN)}` (the EMA warmed up for a short run)."
        )
    results_file.write(args.results, printed)


if __name__ == "__main__":
    main()
