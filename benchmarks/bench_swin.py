"""hf_xcv Swin-T against transformers' Swin-T with the same weights, side by side in one run.

    python benchmarks/bench_swin.py [--batch 8] [--repeats 5] [--threads N]

Batch 8 at 224x224, float32, CPU. Forward and forward+backward are timed interleaved (each model in turn, every
repeat) so all see the same machine state; the median of ``--repeats`` runs is reported with the ratio
hf_xcv / transformers (< 1 = hf_xcv faster), for both attention backends of each (``sdpa``: the window bias as
the float mask of ``scaled_dot_product_attention``; ``eager``: matmul + softmax), which is what decides hf_xcv's
default for window attention. Target: hf_xcv sdpa / transformers sdpa <= 1.0.
"""

from __future__ import annotations

import argparse
import tempfile

import results_file
import torch
import transformers
from bench_vit import classifier_passes, interleaved_medians

import hf_xcv


def build_models() -> dict[str, torch.nn.Module]:
    """transformers Swin-T with random weights (bias tables too), and the same weights in hf_xcv (converted on
    load), each with the sdpa and the eager backend."""
    torch.manual_seed(0)
    config = transformers.SwinConfig(num_labels=1000)  # Swin-T: 96 wide, depths 2-2-6-2, window 7
    theirs = transformers.SwinForImageClassification(config).eval()
    with torch.no_grad():
        for name, param in theirs.named_parameters():
            if "relative_position_bias_table" in name:
                param.normal_(0, 0.02)
    models = {}
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        for backend in ("sdpa", "eager"):
            models[f"transformers {backend}"] = transformers.SwinForImageClassification.from_pretrained(
                folder, attn_implementation=backend
            ).eval()
            models[f"hf_xcv {backend}"] = hf_xcv.SwinForImageClassification.from_pretrained(
                folder, attn_implementation=backend
            ).eval()
    return models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--results", default=str(results_file.RESULTS / "swin.md"), help="where the table goes ('' for nowhere)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    models = build_models()
    pixels = torch.randn(args.batch, 3, 224, 224)
    with torch.no_grad():
        reference = models["transformers sdpa"](pixels).logits
        deltas = {name: (model(pixels).logits - reference).abs().max().item() for name, model in models.items()}

    results = interleaved_medians(models, classifier_passes(pixels), args.repeats)

    lines = [
        f"Swin-T, batch {args.batch}, 224x224, float32, {torch.get_num_threads()} threads, torch {torch.__version__}",
        "same weights: max |delta logits| against transformers sdpa: "
        + ", ".join(f"{name} {delta:.1e}" for name, delta in deltas.items()),
        "",
        "| pass | transformers sdpa (s) | transformers eager (s) | hf_xcv sdpa (s) | hf_xcv eager (s) "
        "| ratio hf_xcv/transformers (sdpa) | ratio (eager) | hf_xcv eager/sdpa |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pass_name, t in results.items():
        ts, te, os_, oe = (t[k] for k in ("transformers sdpa", "transformers eager", "hf_xcv sdpa", "hf_xcv eager"))
        lines.append(f"| {pass_name} | {ts:.3f} | {te:.3f} | {os_:.3f} | {oe:.3f} | {os_ / ts:.3f} | {oe / te:.3f} "
                     f"| {oe / os_:.3f} |")  # fmt: skip
    print("\n".join(lines))
    results_file.write(args.results, lines)


if __name__ == "__main__":
    main()
