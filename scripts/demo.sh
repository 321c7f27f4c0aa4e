#!/usr/bin/env bash
# The main job, end to end on the built-in digits: train a small ViT with accelerate, evaluate it on the
# held-out test split, write a Hub-ready folder with a model card, then reload it in a fresh process
# through AutoModelForImageClassification and classify held-out samples.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT="${OUT:-outputs/vit-digits}"
.venv/bin/python training/train_image_classification.py --output_dir "$OUT" --overwrite_output_dir "$@"
.venv/bin/python scripts/classify_samples.py "$OUT" --min_accuracy 0.95
