"""Reload a trained folder in this (fresh) process through the Auto classes and classify held-out digits.

    python scripts/classify_samples.py outputs/vit-digits [--min_accuracy 0.95]

Scores the reloaded model and processor on the whole test split, checks that this matches the
accuracy the model card records, prints a few predictions, and fails when the accuracy is below
``--min_accuracy``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from reloading import load_trained
from transformers import AutoModelForImageClassification, pipeline

from hf_xcv.data import load_digits_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--min_accuracy", type=float, default=0.0)
    args = parser.parse_args()

    model, processor, recorded = load_trained(args.folder, AutoModelForImageClassification)
    print(
        f"model card: test accuracy {recorded['accuracy']:.4f}, top-5 {recorded.get('top5_accuracy', float('nan')):.4f}"
    )

    test = load_digits_dataset()["test"]
    with torch.no_grad():
        logits = model(**processor(test["image"], return_tensors="pt")).logits  # the whole held-out split
    predictions = logits.argmax(-1)
    accuracy = (predictions == torch.tensor(test["label"])).float().mean().item()
    print(f"reloaded model on the {len(test)} test images: accuracy {accuracy:.4f}")
    shown = range(args.samples)
    print("true:     ", " ".join(str(test["label"][i]) for i in shown))
    print("predicted:", " ".join(model.config.id2label[int(predictions[i])] for i in shown))
    top = pipeline("image-classification", model=model, image_processor=processor)(test["image"][0], top_k=3)
    print("pipeline on the first image:", ", ".join(f"{p['label']} ({p['score']:.3f})" for p in top))

    if abs(accuracy - recorded["accuracy"]) > 1.5 / len(test):  # at most one image may flip on rounding
        raise SystemExit(f"the reloaded model scores {accuracy:.4f}, the card records {recorded['accuracy']:.4f}")
    if accuracy < args.min_accuracy:
        raise SystemExit(f"test accuracy {accuracy:.4f} is below {args.min_accuracy}")


if __name__ == "__main__":
    main()
