#!/usr/bin/env bash
# The main job, end to end on built-in data, four models:
#  1. ViT on the built-in digits: train with accelerate, evaluate on the held-out test split, write a Hub-ready
#     folder with a model card, reload it in a fresh process through AutoModelForImageClassification and classify
#     held-out samples (fails below 95 % accuracy);
#  2. Swin on the same digits (the swin-digits preset: 2x2 patches, 4x4 shifted windows, patch merging), trained
#     with the same script, evaluated, reloaded in a fresh process through the Auto classes (fails below 95 %);
#  3. the vanilla Transformer on the built-in number corpus (English -> French number words): train tokenizer
#     and model, beam-search the held-out test split, write the folder and card, reload it in a fresh process
#     through AutoModelForSeq2SeqLM + AutoTokenizer and translate (fails below BLEU 90).
#  4. DETR on the built-in shapes scenes (coloured circles, squares, triangles and crosses on textured backgrounds,
#     with occlusion, empty images and crowd regions): pre-train its ResNet on crops of the training scenes (the
#     offline stand-in for ImageNet), then train DETR with the original recipe (frozen BatchNorm and stem) and set loss,
#     evaluate COCO mAP on the held-out test scenes, draw predicted and true boxes into detections.png, reload in a
#     fresh process through AutoModelForObjectDetection + AutoImageProcessor and detect (fails below mAP@50 0.3 or
#     when not ten times an untrained model's).
# DEMO=vit, DEMO=swin, DEMO=translation or DEMO=detr runs one of them.
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
if [ "$DEMO" = all ] || [ "$DEMO" = detr ]; then
    OUT=outputs/detr-shapes
    # the backbone's ImageNet stage, offline: its ResNet classifies crops of the training scenes (40 s)
    .venv/bin/python scripts/pretrain_backbone.py outputs/shapes-resnet --preset detr-shapes
    .venv/bin/python training/train_object_detection.py --preset detr-shapes --backbone_checkpoint outputs/shapes-resnet \
        --num_train_epochs 18 --learning_rate 5e-4 --lr_backbone 5e-5 --lr_drop 0.85 --eval_every_epochs 6 \
        --output_dir "$OUT" --overwrite_output_dir
    .venv/bin/python scripts/detect_samples.py "$OUT" --min_map_50 0.05
fi
