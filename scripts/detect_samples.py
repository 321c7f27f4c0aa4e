"""Reload a trained detector (DETR or Deformable DETR) in this (fresh) process through the Auto classes and detect on
held-out scenes.

    python scripts/detect_samples.py outputs/detr-shapes [--min_map_50 0.3] [--threshold 0.5]
    python scripts/detect_samples.py outputs/deformable-detr-shapes [--min_map_50 0.3]

Scores the reloaded model and processor on the whole built-in test split with COCO mAP, checks that this
matches the mAP the model card records, runs ``pipeline("object-detection")`` on a few images and prints what it
found (scores above ``--threshold``) against the truth, and fails when mAP@50 is below ``--min_map_50`` or not far
above an untrained model's of the same architecture (scored here on the same split).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from accelerate import Accelerator
from reloading import load_trained
from torch.utils.data import DataLoader
from transformers import AutoModelForObjectDetection, pipeline

from hf_xcv.cli.train_object_detection import evaluate_split
from hf_xcv.data import load_shapes_dataset
from hf_xcv.data.detection import DetectionCollator, detection_transform


def score(model: torch.nn.Module, processor, test) -> dict:
    loader = DataLoader(test.with_transform(detection_transform(processor)), 32, collate_fn=DetectionCollator())
    return evaluate_split(Accelerator(cpu=True), model, processor, loader)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--threshold", type=float, default=0.5, help="score of the detections the samples show")
    parser.add_argument("--min_map_50", type=float, default=0.0)
    args = parser.parse_args()

    model, processor, recorded = load_trained(args.folder, AutoModelForObjectDetection)
    print(f"model card: test mAP {recorded['map']:.4f}, mAP@50 {recorded['map_50']:.4f}")

    seed = json.loads((args.folder / "xcv_run.json").read_text())["train"]["seed"]
    test = load_shapes_dataset(seed=seed)["test"]
    results = score(model, processor, test)
    print(f"reloaded model on the {results['num_images']} test scenes: mAP {results['map']:.4f}, "
          f"mAP@50 {results['map_50']:.4f}, mAP@75 {results['map_75']:.4f}, AR@10 {results['mar_10']:.4f}")  # fmt: skip
    torch.manual_seed(0)
    untrained = score(type(model)(model.config).eval(), processor, test)
    print(f"an untrained model of the same config: mAP {untrained['map']:.4f}, mAP@50 {untrained['map_50']:.4f}")

    detector = pipeline("object-detection", model=model, image_processor=processor)
    for row in test.select(range(args.samples)):
        found = detector(row["image"], threshold=args.threshold)
        names = model.config.id2label
        truth = ", ".join(f"{names[a['category_id']]}{' (crowd)' if a['iscrowd'] else ''}" for a in row["annotations"])
        seen = ", ".join(f"{d['label']} {d['score']:.2f}" for d in found)
        print(f"image {row['image_id']}: true [{truth}] detected [{seen}]")

    if abs(results["map"] - recorded["map"]) > 1e-4:
        raise SystemExit(f"the reloaded model scores mAP {results['map']:.4f}, the card records {recorded['map']:.4f}")
    if results["map_50"] < args.min_map_50:
        raise SystemExit(f"test mAP@50 {results['map_50']:.4f} is below {args.min_map_50}")
    if results["map_50"] < 10 * max(untrained["map_50"], 1e-3):
        raise SystemExit(f"test mAP@50 {results['map_50']:.4f} is not far above untrained {untrained['map_50']:.4f}")


if __name__ == "__main__":
    main()
