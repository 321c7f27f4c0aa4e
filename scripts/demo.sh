#!/usr/bin/env bash
# The main job, end to end on built-in data, three models:
#  1. ViT on the built-in digits: train with accelerate, evaluate on the held-out test split, write a Hub-ready
#     folder with a model card, reload it in a fresh process through AutoModelForImageClassification and classify
#     held-out samples (fails below 95 % accuracy);
#  2. Swin on the same digits (the swin-digits preset: 2x2 patches, 4x4 shifted windows, patch merging), trained
#     with the same script, evaluated, reloaded in a fresh process through the Auto classes (fails below 95 %);
#  3. the vanilla Transformer on the built-in number corpus (English -> French number words): train tokenizer
#     and model, beam-search the held-out test split, write the folder and card, reload it in a fresh process
#     through AutoModelForSeq2SeqLM + AutoTokenizer and translate (fails below BLEU 90).
# DEMO=vit, DEMO=swin or DEMO=translation runs one of them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
DEMO="${DEMO:-all}"
if [ "$DEMO" = all ] || [ "$DEMO" = vit ]; then
    OUT=outputs/vit-digits
    .venv/bin/python training/train_image_classification.py --output_dir "$OUT" --overwrite_output_dir
    .venv/bin/python scripts/classify_samples.py "$OUT" --min_accuracy 0.95
fi
if [ "$DEMO" = all ] || [ "$DEMO" = swin ]; then
    OUT=outputs/swin-digits
    .venv/bin/python training/train_image_classification.py --preset swin-digits --num_train_epochs 100 \
        --output_dir "$OUT" --overwrite_output_dir
    .venv/bin/python scripts/classify_samples.py "$OUT" --min_accuracy 0.95
fi
if [ "$DEMO" = all ] || [ "$DEMO" = translation ]; then
    OUT=outputs/transformer-numbers
    .venv/bin/python training/train_translation.py --output_dir "$OUT" --overwrite_output_dir
    .venv/bin/python scripts/translate_samples.py "$OUT" --min_bleu 90
fi
