"""hf_xcv ViT-B/16 against transformers' ViT-B/16 with the same weights, side by side in one run.

    python benchmarks/bench_vit.py [--batch 8] [--repeats 5] [--threads N]

Batch 8 at 224x224, float32, CPU. Forward and forward+backward are timed interleaved (A, B, A, B, ...)
so both see the same machine state; the median of ``--repeats`` runs is reported with the ratio
hf_xcv / transformers (< 1 = hf_xcv faster) and each one's achieved GFLOP/s next to the machine's
own float32 matmul GFLOP/s, measured in the same run on the shape of ViT-B's MLP.

FLOPs are counted analytically (2 per multiply-add) for every matmul and convolution of the model;
forward+backward is counted as 3x forward. Targets: ratio <= 1.0; forward >= 60% of matmul GFLOP/s.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import results_file
import torch
import transformers

import hf_xcv


def vit_forward_flops(config, batch: int) -> float:
    """Multiply-adds x 2 of one forward pass: patch projection, per-layer matmuls, attention, head."""
    side = config.image_size // config.patch_size
    patches, dim, mlp = side * side, config.hidden_size, config.intermediate_size
    tokens = patches + 1
    patch_embed = patches * dim * config.num_channels * config.patch_size**2
    per_layer = 4 * tokens * dim * dim + 2 * tokens * dim * mlp + 2 * tokens * tokens * dim
    head = dim * config.num_labels
    return 2.0 * batch * (patch_embed + config.num_hidden_layers * per_layer + head)


def matmul_gflops(rows: int, inner: int, cols: int, repeats: int = 10) -> float:
    a, b = torch.randn(rows, inner), torch.randn(inner, cols)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2.0 * rows * inner * cols / statistics.median(times) / 1e9


def time_call(step, model) -> float:
    start = time.perf_counter()
    step(model)
    return time.perf_counter() - start


def interleaved_medians(models: dict[str, object], passes: list[tuple[str, object]], repeats: int) -> dict:
    """pass name -> model name -> median seconds of ``repeats`` calls, after one warm-up each; the models take
    turns within every repeat, so all see the same machine state."""
    results = {}
    for pass_name, step in passes:
        for model in models.values():  # warm-up
            step(model)
        times = {name: [] for name in models}
        for _ in range(repeats):
            for name, model in models.items():
                times[name].append(time_call(step, model))
        results[pass_name] = {name: statistics.median(t) for name, t in times.items()}
    return results


def classifier_passes(pixels: torch.Tensor) -> list[tuple[str, object]]:
    """The timed passes of an image classifier on ``pixels``: ("forward", step), ("forward+backward", step)."""

    def forward(model):
        with torch.no_grad():
            model(pixels)

    def forward_backward(model):
        model.zero_grad(set_to_none=True)
        model(pixels).logits.sum().backward()

    return [("forward", forward), ("forward+backward", forward_backward)]


def build_pair():
    """transformers ViT-B/16 with random weights, and the same weights in hf_xcv (converted on load)."""
    config = transformers.ViTConfig(num_labels=1000)  # ViT-B/16 at 224: 768 wide, 12 layers, 12 heads
    theirs = transformers.ViTForImageClassification(config).eval()
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        ours = hf_xcv.ViTForImageClassification.from_pretrained(folder).eval()
    return config, theirs, ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--results", default=str(results_file.RESULTS / "vit.md"), help="where the table goes ('' for nowhere)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config, theirs, ours = build_pair()
    pixels = torch.randn(args.batch, 3, 224, 224)
    with torch.no_grad():
        delta = (theirs(pixels).logits - ours(pixels).logits).abs().max().item()

    results = interleaved_medians({"transformers": theirs, "hf_xcv": ours}, classifier_passes(pixels), args.repeats)

    mlp_rows = args.batch * ((224 // 16) ** 2 + 1)
    peak = matmul_gflops(mlp_rows, config.hidden_size, config.intermediate_size)
    flops = vit_forward_flops(config, args.batch)
    lines = [
        f"ViT-B/16, batch {args.batch}, 224x224, float32, {torch.get_num_threads()} threads, torch {torch.__version__}",
        f"same weights: max |delta logits| = {delta:.2e}; forward = {flops / 1e9:.1f} GFLOP",
        f"machine float32 matmul ({mlp_rows}x{config.hidden_size} @ {config.hidden_size}x{config.intermediate_size}):"
        f" {peak:.1f} GFLOP/s",
        "",
        "| pass | transformers (s) | hf_xcv (s) | ratio hf_xcv/transformers | transformers GFLOP/s | hf_xcv GFLOP/s "
        "| hf_xcv % of matmul |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, timing in results.items():
        work = flops * (3 if name == "forward+backward" else 1)
        t, o = timing["transformers"], timing["hf_xcv"]
        lines.append(f"| {name} | {t:.3f} | {o:.3f} | {o / t:.3f} | {work / t / 1e9:.1f} | {work / o / 1e9:.1f} "
                     f"| {100 * work / o / 1e9 / peak:.0f}% |")  # fmt: skip
    print("\n".join(lines))
    results_file.write(args.results, lines)


if __name__ == "__main__":
    main()
