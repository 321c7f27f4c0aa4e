"""hf_xcv DETR-R50 and Deformable DETR-R50 against transformers' with the same weights, side by side in one run.

    python benchmarks/bench_detection.py [--models detr,deformable,deformable-refine-two-stage,operator]
        [--batch 2] [--size 512] [--repeats 3] [--threads N]

Batch 2 at 512x512 (one image padded: 512x384 inside the canvas), float32, CPU, random weights (transformers'
ResNet-50, no timm). Forward (eval, no grad) and forward+backward (train mode, labels: 7 boxes an image, the loss
with its 5 auxiliary layers, backward) are timed interleaved (each model in turn, every repeat) so both see the same
machine state; the median of ``--repeats`` is reported with the ratio hf_xcv / transformers (< 1 = hf_xcv
faster). Both train as the original recipe: backbone stages 2-4 (transformers' DETR freezes its whole ResNet,
research D1: it is unfrozen here to do the same work), the auxiliary losses, attention and FFN dropout 0.1.
Target: hf_xcv no slower than transformers (ratio <= 1.0).

Deformable DETR-R50 (base; box refinement + two-stage): the same weights in both (transformers' folder converted
on load), backbone stages 2-4 trainable in both (transformers' HF-ResNet path freezes all of it), the auxiliary
losses on, dropout 0.1 in the decoder's self-attention and the FFNs as the original (transformers' default 0.0).
Target: the training step (forward+backward) at least 1.5x faster than transformers' (ratio <= 0.667). The
two-stage hf_xcv model also computes the encoder-proposal loss that transformers leaves out (D7): more work.
``operator``: the deformable attention core alone at the encoder's size (batch 2 at 512x512: levels 64^2, 32^2,
16^2, 8^2 = 5440 queries, 8 heads of 32, 4 points), hf_xcv's gather formulation against transformers' grid-sample
one, forward and forward+backward, in float32.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import results_file
import torch
import transformers
from bench_vit import interleaved_medians

import hf_xcv


def build_deformable(**variant) -> dict[str, torch.nn.Module]:
    """transformers' Deformable DETR-R50 (``variant``: with_box_refine / two_stage), trained as the original
    (backbone stages 2-4, auxiliary losses, dropout 0.1), and the same weights in hf_xcv."""
    torch.manual_seed(0)
    backbone = transformers.ResNetConfig(out_features=["stage2", "stage3", "stage4"])
    config = transformers.DeformableDetrConfig(
        use_timm_backbone=False, backbone_config=backbone, num_labels=91, auxiliary_loss=True, **variant
    )
    config.attention_dropout = config.activation_dropout = 0.1
    theirs = transformers.DeformableDetrForObjectDetection(config)
    return _with_trainable_stages_and_ours(theirs, hf_xcv.DeformableDetrForObjectDetection)


def _with_trainable_stages_and_ours(theirs: torch.nn.Module, ours_class: type) -> dict[str, torch.nn.Module]:
    for name, param in theirs.model.backbone.named_parameters():
        param.requires_grad = any(f"stages.{i}." in name for i in (1, 2, 3))
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        ours = ours_class.from_pretrained(folder)
    return {"transformers": theirs, "hf_xcv": ours}


def build_models() -> dict[str, torch.nn.Module]:
    """transformers' DETR-R50 (auxiliary loss on, dropout 0.1, backbone stages 2-4 trainable) and the same weights
    in hf_xcv."""
    torch.manual_seed(0)
    backbone = transformers.ResNetConfig(out_features=["stage4"])
    config = transformers.DetrConfig(use_timm_backbone=False, backbone_config=backbone, num_labels=91)
    config.auxiliary_loss = True
    config.attention_dropout = config.activation_dropout = 0.1  # the original's dropout, as hf_xcv's default
    return _with_trainable_stages_and_ours(transformers.DetrForObjectDetection(config), hf_xcv.DetrForObjectDetection)


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


class _Operator(torch.nn.Module):
    """One deformable attention core call with its operands, for interleaved_medians."""

    def __init__(self, function, operands):
        super().__init__()
        self.function, self.operands = function, operands

    def forward(self):
        return self.function(*self.operands)


def operator_models(batch: int, size: int) -> tuple[dict[str, torch.nn.Module], list[tuple[str, object]]]:
    from transformers.models.deformable_detr.modeling_deformable_detr import MultiScaleDeformableAttention

    from hf_xcv.attention.operators.deformable import level_start_index, multi_scale_deformable_attention

    shapes = [(size // s, size // s) for s in (8, 16, 32, 64)]
    rows = sum(h * w for h, w in shapes)
    generator = torch.Generator().manual_seed(0)
    value = torch.randn(batch, rows, 8, 32, generator=generator).requires_grad_()
    locations = torch.rand(batch, rows, 8, 4, 4, 2, generator=generator).mul(1.2).sub(0.1).requires_grad_()
    weights = torch.rand(batch, rows, 8, 4, 4, generator=generator).softmax(-1).requires_grad_()
    core = MultiScaleDeformableAttention()
    starts = torch.tensor(level_start_index(shapes))

    def theirs(v, loc, w):
        return core(v, torch.tensor(shapes), shapes, starts, loc, w, 64)

    def ours(v, loc, w):
        return multi_scale_deformable_attention(v, shapes, loc, w)

    models = {
        name: _Operator(f, (value, locations, weights)) for name, f in (("transformers", theirs), ("hf_xcv", ours))
    }

    def forward(model):
        with torch.no_grad():
            model()

    def forward_backward(model):
        for tensor in model.operands:
            tensor.grad = None
        model().sum().backward()

    return models, [("operator forward", forward), ("operator forward+backward", forward_backward)]


BUILDERS = {
    "detr": ("DETR-R50", build_models),
    "deformable": ("Deformable DETR-R50", build_deformable),
    "deformable-refine-two-stage": (
        "Deformable DETR-R50 + box refinement + two-stage",
        lambda: build_deformable(with_box_refine=True, two_stage=True),
    ),
}


TABLE_HEADER = [
    "| pass | transformers (s) | hf_xcv (s) | ratio hf_xcv/transformers | speed-up |",
    "|---|---|---|---|---|",
]
# The results file each model's rows go to (docs/benchmarks.md includes them).
RESULTS_FILES = {
    "detection_detr.md": ("detr",),
    "detection_deformable_detr.md": ("deformable", "deformable-refine-two-stage", "operator"),
}


def run(name: str, args: argparse.Namespace, batch: dict) -> list[str]:
    """The table rows of one model (or the operator alone)."""
    if name == "operator":
        models, steps = operator_models(args.batch, args.size)
        title = f"deformable attention core at the encoder's size ({args.size}x{args.size} levels)"
        note = "same operands"
    else:
        title, build = BUILDERS[name]
        models, steps = build(), passes(batch)
        images = {"pixel_values": batch["pixel_values"], "pixel_mask": batch["pixel_mask"]}
        with torch.no_grad():
            a, b = (m.eval()(**images) for m in models.values())
        delta = max((a.logits - b.logits).abs().max().item(), (a.pred_boxes - b.pred_boxes).abs().max().item())
        trainable = {
            k: f"{sum(p.numel() for p in m.parameters() if p.requires_grad) / 1e6:.2f}M" for k, m in models.items()
        }
        note = f"same weights: max |delta| of logits and boxes {delta:.1e}; trainable parameters {trainable}"
    results = interleaved_medians(models, steps, args.repeats)
    rows = [f"**{title}** ({note})"]
    for pass_name, t in results.items():
        ratio = t["hf_xcv"] / t["transformers"]
        rows.append(
            f"| {title}: {pass_name} | {t['transformers']:.3f} | {t['hf_xcv']:.3f} | {ratio:.3f} | {1 / ratio:.2f}x |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="detr,deformable,deformable-refine-two-stage,operator")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--results", default=str(results_file.RESULTS), help="folder of the tables, one per family ('' for nowhere)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = [n for n in args.models.split(",") if n]
    unknown = sorted(set(names) - {*BUILDERS, "operator"})
    if unknown:
        parser.error(f"unknown --models {unknown}; known: {sorted([*BUILDERS, 'operator'])}")
    batch = inputs(args.batch, args.size)
    threads = torch.get_num_threads()
    title = f"batch {args.batch}, {args.size}x{args.size}, float32, {threads} threads, torch {torch.__version__}"
    print(title)
    notes, table = {}, {}
    for name in names:
        rows = run(name, args, batch)
        notes[name], table[name] = rows[0], rows[1:]
        print(rows[0], flush=True)
        print("\n".join(rows[1:]), flush=True)
    print()
    print("\n".join(notes.values()))
    print()
    print("\n".join(TABLE_HEADER))
    print("\n".join(row for rows in table.values() for row in rows))
    for file_name, group in RESULTS_FILES.items():  # one results file per family, with that family's rows
        ran = [name for name in names if name in group]
        if ran and args.results:
            body = [title, "", *(notes[name] for name in ran), "", *TABLE_HEADER, *(r for n in ran for r in table[n])]
            results_file.write(Path(args.results) / file_name, body)


if __name__ == "__main__":
    main()
