"""Pre-train the demo detectors' ResNet as a classifier of object crops, the offline stand-in for ImageNet weights.

    python scripts/pretrain_backbone.py outputs/shapes-resnet [--preset detr-shapes] [--epochs 4]

DETR and Deformable DETR start from an ImageNet-trained backbone (the original recipes; ImageNet weights cannot be
downloaded here). This trains transformers' ``ResNetForImageClassification`` with the preset's backbone config (any
DETR or Deformable DETR preset) on crops of the built-in train scenes: every (non-crowd) object cropped with a
random margin and labelled with its shape, and background crops that hold no object centre, all at 48x48 and
normalised with the ImageNet mean and std as the detectors' processors do. The result is a transformers ResNet
folder, what ``--backbone_checkpoint`` of ``training/train_object_detection.py`` loads. The stages a detector
reads (``out_features``) do not change the weights, so one checkpoint serves every preset of the same ResNet:
detr-shapes (stage 3) and deformable-detr-shapes (stages 2 and 3) share one. Only the train split is used:
validation and test stay held out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

import hf_xcv
from hf_xcv.data import detection_label_names, load_shapes_dataset

SIDE = 48


def crops(split, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 3, SIDE, SIDE) normalised crops and their labels: shape ids, and len(names) for background."""
    mean, std = np.array(IMAGENET_DEFAULT_MEAN), np.array(IMAGENET_DEFAULT_STD)
    pixels, labels = [], []
    background = len(detection_label_names(split))
    for row in split:
        image = row["image"]
        objects = [a for a in row["annotations"] if not a["iscrowd"]]
        for a in objects:
            x, y, w, h = a["bbox"]
            margin = rng.uniform(0.05, 0.3) * max(w, h)
            box = (x - margin, y - margin, x + w + margin, y + h + margin)
            pixels.append(image.crop(box).resize((SIDE, SIDE)))  # outside the image: black
            labels.append(a["category_id"])
        centres = [(x + w / 2, y + h / 2) for x, y, w, h in (a["bbox"] for a in row["annotations"])]
        side = rng.uniform(0.3, 0.6) * min(image.size)
        left, top = rng.uniform(0, image.width - side), rng.uniform(0, image.height - side)
        if not any(left <= cx <= left + side and top <= cy <= top + side for cx, cy in centres):
            pixels.append(image.resize((SIDE, SIDE), box=(left, top, left + side, top + side)))
            labels.append(background)
    arrays = (np.stack([np.asarray(p, dtype=np.float32) / 255 for p in pixels]) - mean) / std  # (N, S, S, 3)
    return torch.from_numpy(arrays).permute(0, 3, 1, 2).float(), torch.tensor(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path)
    parser.add_argument("--preset", default="detr-shapes")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    backbone_config = getattr(hf_xcv.preset_config(args.preset), "backbone_config", None)
    if backbone_config is None or backbone_config.model_type != "resnet":
        parser.error(f"preset {args.preset!r} has no ResNet backbone (a DETR or Deformable DETR preset has)")
    backbone = backbone_config.to_dict()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    split = load_shapes_dataset(seed=args.seed)["train"]
    names = detection_label_names(split)
    images, labels = crops(split, rng)
    backbone.update(num_labels=len(names) + 1, id2label=dict(enumerate([*names, "background"])))
    model = transformers.ResNetForImageClassification(transformers.ResNetConfig(**backbone))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    held = len(labels) // 10  # a held-out tenth of the crops, for the accuracy printed
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(labels) - held) + held
        for start in range(0, len(order), 64):
            index = order[start : start + 64]
            batch = images[index]
            batch = torch.where(torch.rand(len(index), 1, 1, 1) < 0.5, batch.flip(-1), batch)  # flips, as DETR's
            loss = model(pixel_values=batch, labels=labels[index]).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(pixel_values=images[:held]).logits.argmax(-1) == labels[:held]).float().mean().item()
        print(f"epoch {epoch + 1}: loss {loss.item():.3f}, held-out crop accuracy {accuracy:.3f} ({held} crops)")
    model.save_pretrained(args.output)
    print(f"{len(labels)} crops; saved {type(model).__name__} to {args.output}")


if __name__ == "__main__":
    main()
