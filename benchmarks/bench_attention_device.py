"""The efficient attention entries on an accelerator: their fused paths against their plain ones, and both against
PyTorch's fused exact attention (sdpa), in one run.

    python benchmarks/bench_attention_device.py [--device cuda] [--lengths 8192,16384] [--entries a,b]
        [--check-length 2048] [--repeats 5] [--markdown PATH]

The layer and step are benchmarks/bench_attention.py's (hidden 512, 8 heads, projections, batch 1, float32,
training mode, forward + backward). Each entry that has a fused path runs twice: with its default
(``fused = None``: the plain path off the CPU, see ``AttentionCore.use_fused``) and with ``fused = True``.

- Agreement: at ``--check-length`` tokens, in eval mode, the largest difference between the two paths' outputs and
  input gradients, relative to the largest value of the plain path's.
- Cost: median time of ``--repeats`` steps after a warm-up (synchronised), and peak memory of one step as the
  growth of the device allocator's peak over what the layer and its input hold (``torch.cuda`` statistics; on the
  CPU this script reports no memory: bench_attention.py measures it there).

Why the default differs by device: the fused paths walk the sequence in chunks from Python, a handful of small
kernels per chunk. On a CPU that costs nothing next to the arithmetic, and they are faster and smaller there; on a
GPU each launch costs more than the chunk's arithmetic, and the plain path (a few large kernels) is the fast one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from hf_xcv.attention import AttentionCore

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_attention as layer_bench  # noqa: E402  (the layer, its settings and the step)
import results_file  # noqa: E402

FUSED_ENTRIES = (
    "linear", "performer", "local", "local_2d", "axial", "memory_compressed", "longformer", "bigbird", "etc",
    "sparse_strided", "sparse_fixed", "lsh", "routing", "sinkhorn",
)  # fmt: skip


def set_fused(layer: torch.nn.Module, flag: bool | None) -> None:
    """``fused`` on every attention core of ``layer`` that has the flag."""
    for module in layer.modules():
        if isinstance(module, AttentionCore) and hasattr(module, "fused"):
            module.fused = flag


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(layer, x, call) -> tuple[torch.Tensor, torch.Tensor]:
    layer.zero_grad(set_to_none=True)
    x.grad = None
    out, _, _ = layer(x, **call)
    loss = out.float().square().mean() + (0.0 if layer.aux_loss is None else layer.aux_loss)
    loss.backward()
    return out.detach(), x.grad.detach().clone()


def agreement(entry: str, length: int, device: torch.device) -> dict[str, float]:
    """Relative difference of the fused and plain paths' outputs and input gradients (eval mode, same seed)."""
    torch.manual_seed(0)
    layer = layer_bench.build_layer(layer_bench.Row(entry), length).to(device).eval()
    call = layer_bench.call_settings(entry, length)
    x = torch.randn(1, length, layer_bench.HIDDEN, device=device, requires_grad=True)
    results = []
    for flag in (True, False):
        set_fused(layer, flag)
        torch.manual_seed(1)
        results.append(_step(layer, x, call))
    (out, grad), (plain_out, plain_grad) = results
    relative = [float((a - b).abs().max() / b.abs().max()) for a, b in ((out, plain_out), (grad, plain_grad))]
    return {"output": relative[0], "gradient": relative[1]}


def cost(row: layer_bench.Row, length: int, device: torch.device, repeats: int, flag: bool | None) -> dict[str, Any]:
    """Median step time (ms) and, on CUDA, the step's peak memory over what the layer and input hold (MiB)."""
    torch.manual_seed(0)
    layer = layer_bench.build_layer(row, length).to(device)
    set_fused(layer, flag)
    call = {"causal": False, "grid": None} if row.backend else layer_bench.call_settings(row.entry, length)
    x = torch.randn(1, length, layer_bench.HIDDEN, device=device, requires_grad=True)
    layer_bench.forward_backward(layer, x, call)  # warm-up
    _synchronize(device)
    mib = None
    if device.type == "cuda":
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        layer_bench.forward_backward(layer, x, call)
        _synchronize(device)
        mib = (torch.cuda.max_memory_allocated(device) - base) / 2**20
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        layer_bench.forward_backward(layer, x, call)
        _synchronize(device)
        times.append((time.perf_counter() - start) * 1000)
    return {"ms": statistics.median(times), "mib": mib}


def _cell(value: dict[str, Any], sdpa: dict[str, Any]) -> str:
    text = f"{value['ms']:.3g} ms ({sdpa['ms'] / value['ms']:.2f}x)"
    if value["mib"] is not None and sdpa["mib"]:
        text += f", {value['mib']:.0f} MiB ({value['mib'] / sdpa['mib']:.2f}x)"
    return text


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--lengths", default="8192,16384")
    parser.add_argument("--entries", default=",".join(FUSED_ENTRIES))
    parser.add_argument("--check-length", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--markdown", default=None, help="where the table goes ('' for nowhere; default: none)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    entries = [name for name in args.entries.split(",") if name]
    unknown = sorted(set(entries) - set(FUSED_ENTRIES))
    if unknown:
        parser.error(f"--entries must be among the entries with a fused path {list(FUSED_ENTRIES)}, got {unknown}")
    lengths = [int(n) for n in args.lengths.split(",") if n]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else results_file.machine()
    report: dict[str, Any] = {"agreement": {}, "cost": {}}
    with results_file.tee() as printed:
        print(f"device: {name}, torch {torch.__version__}")
        print(f"Agreement of the fused and plain paths at {args.check_length} tokens (eval, float32), relative:")
        print("| model | output | input gradient |\n|---|---|---|")
        for entry in entries:
            found = report["agreement"][entry] = agreement(entry, args.check_length, device)
            print(f"| {entry} | {found['output']:.1e} | {found['gradient']:.1e} |")
        head = " | ".join(f"{n // 1024}K default | {n // 1024}K fused = True" for n in lengths)
        print("Training step, time (speed-up over sdpa) and peak memory (ratio to sdpa's):")
        print(f"| model | {head} |\n|---" + "|---" * (2 * len(lengths)) + "|")
        sdpa = {n: cost(layer_bench.SDPA, n, device, args.repeats, None) for n in lengths}
        print("| full (sdpa) | " + " | ".join(f"{_cell(sdpa[n], sdpa[n])} | -" for n in lengths) + " |")
        for entry in entries:
            row = layer_bench.Row(entry)
            cells = []
            for n in lengths:
                pair = [cost(row, n, device, args.repeats, flag) for flag in (None, True)]
                report["cost"][(entry, n)] = pair
                cells += [_cell(value, sdpa[n]) for value in pair]
            print(f"| {entry} | " + " | ".join(cells) + " |")
    if args.markdown:
        results_file.write(args.markdown, printed, [__file__, *(sys.argv[1:] if argv is None else argv)])
    return report


if __name__ == "__main__":
    main()
