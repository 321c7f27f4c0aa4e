"""hf_xcv DETR-R50 against transformers' DETR-R50 with the same weights, side by side in one run.

    python benchmarks/bench_detection.py [--batch 2] [--size 512] [--repeats 3] [--threads N]

Batch 2 at 512x512 (one image padded: 512x384 inside the canvas), float32, CPU, random weights (transformers'
ResNet-50, no timm). Forward (eval, no grad) and forward+backward (train mode, labels: 7 boxes an image, the loss
with its 5 auxiliary layers, backward) are timed interleaved (each model in turn, every repeat) so both see the same
machine state; the median of ``--repeats`` is reported with the ratio hf_xcv / transformers (< 1 = hf_xcv
faster). Both train as the original recipe: backbone stages 2-4 (transformers' DETR freezes its whole ResNet,
research D1: it is unfrozen here to do the same work), the auxiliary losses, attention and FFN dropout 0.1.
Target: hf_xcv no slower than transformers (ratio <= 1.0).
"""

from __future__ import annotations

import argparse
import tempfile

import torch
import transformers
from bench_vit import interleaved_medians

import hf_xcv


def build_models() -> dict[str, torch.nn.Module]:
    """transformers' DETR-R50 (auxiliary loss on, dropout 0.1, backbone stages 2-4 trainable) and the same weights
    in hf_xcv."""
    torch.manual_seed(0)
    backbone = transformers.ResNetConfig(out_features=["stage4"])
    config = transformers.DetrConfig(use_timm_backbone=False, backbone_config=backbone, num_labels=91)
    config.auxiliary_loss = True
    config.attention_dropout = config.activation_dropout = 0.1  # the original's dropout, as hf_xcv's default
    theirs = transformers.DetrForObjectDetection(config)
    for name, param in theirs.model.backbone.named_parameters():
        param.requires_grad = any(f"stages.{i}." in name for i in (1, 2, 3))
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        ours = hf_xcv.DetrForObjectDetection.from_pretrained(folder)
    return {"transformers": theirs, "hf_xcv": ours}


def inputs(batch: int, size: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randn(batch, 3, size, size, generator=generator)
    mask = torch.ones(batch, size, size, dtype=torch.long)
    mask[1:, :, size * 3 // 4 :] = 0
    pixels = pixels * mask[:, None]
    labels = []
    for _ in range(batch):
        centres = 0.2 + 0.6 * torch.rand(7, 2, generator=generator)
        sizes = 0.05 + 0.2 * torch.rand(7, 2, generator=generator)
        labels.append(
            {"class_labels": torch.randint(0, 91, (7,), generator=generator), "boxes": torch.cat([centres, sizes], -1)}
        )
    return {"pixel_values": pixels, "pixel_mask": mask, "labels": labels}


def passes(batch: dict) -> list[tuple[str, object]]:
    images = {"pixel_values": batch["pixel_values"], "pixel_mask": batch["pixel_mask"]}

    def forward(model):
        model.eval()
        with torch.no_grad():
            model(**images)

    def forward_backward(model):
        model.train()
        model.zero_grad(set_to_none=True)
        model(**batch).loss.backward()

    return [("forward (eval)", forward), ("forward+backward (train)", forward_backward)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    models = build_models()
    batch = inputs(args.batch, args.size)
    with torch.no_grad():
        a, b = (m.eval()(pixel_values=batch["pixel_values"], pixel_mask=batch["pixel_mask"]) for m in models.values())
    delta = max((a.logits - b.logits).abs().max().item(), (a.pred_boxes - b.pred_boxes).abs().max().item())
    trainable = {name: sum(p.numel() for p in m.parameters() if p.requires_grad) for name, m in models.items()}

    results = interleaved_medians(models, passes(batch), args.repeats)

    print(f"DETR-R50, batch {args.batch}, {args.size}x{args.size}, float32, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")  # fmt: skip
    print(f"same weights: max |delta| of logits and boxes {delta:.1e}; trainable parameters {trainable}")
    print()
    print("| pass | transformers (s) | hf_xcv (s) | ratio hf_xcv/transformers |")
    print("|---|---|---|---|")
    for pass_name, t in results.items():
        print(f"| {pass_name} | {t['transformers']:.3f} | {t['hf_xcv']:.3f} | {t['hf_xcv'] / t['transformers']:.3f} |")


if __name__ == "__main__":
    main()
