"""transformers' image-classification pipeline on a saved hf_xcv model."""

from __future__ import annotations

import numpy as np
import PIL.Image
import torch
from transformers import pipeline

import hf_xcv


def test_pipeline_on_a_saved_folder(tmp_path):
    torch.manual_seed(0)
    labels = {0: "zero", 1: "one", 2: "two", 3: "three"}
    config = hf_xcv.preset_config("vit-test-tiny", num_labels=4, id2label=labels)
    config.label2id = {v: k for k, v in labels.items()}
    model = hf_xcv.ViTForImageClassification(config).eval()
    processor = hf_xcv.XcvViTImageProcessor(size={"height": 16, "width": 16})
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)

    classifier = pipeline("image-classification", model=str(tmp_path))
    image = PIL.Image.fromarray(np.random.default_rng(0).integers(0, 255, (30, 20), dtype=np.uint8))  # grayscale
    predictions = classifier(image, top_k=3)
    assert len(predictions) == 3
    assert {p["label"] for p in predictions} <= set(labels.values())
    assert predictions[0]["score"] >= predictions[1]["score"] >= predictions[2]["score"]

    with torch.no_grad():
        probs = model(processor(image, return_tensors="pt")["pixel_values"]).logits.softmax(-1)[0]
    best = int(probs.argmax())
    assert predictions[0]["label"] == labels[best]
    assert abs(predictions[0]["score"] - float(probs[best])) < 1e-5
    batch = classifier([image, image.convert("RGB")])
    assert len(batch) == 2
