"""TTSR in bounded memory (hf_xcv) against the original's dense formulation, and IPT's tiled inference against
the official chop, side by side in one run.

    python benchmarks/bench_restoration.py [--models ttsr,ipt] [--cases 40x160,64x256,128x512,256x1024]
        [--parts relevance,model] [--ipt-sizes 48,96,120,192] [--ipt-preset ipt-sr-x4] [--ipt-task sr_x4]
        [--tile-batch-size N] [--quick] [--threads N] [--timeout 3600]

``--models`` picks the sections (TTSR alone by default); ``--quick`` runs tiny sizes and IPT's test preset (a check
that the script runs, not a measurement).

TTSR:

A case ``LxR`` is an L x L low-resolution input with an R x R reference (x4: the output is 4L x 4L). At the paper's
size (relu3_1 of 256 channels: 3x3 patch vectors of 2,304 numbers) the relevance compares every one of the input's
L^2 positions with every one of the reference's (R/4)^2:

* ``relevance``: from the two relu3_1 maps to the soft attention S and the hard attention's indices. ``dense`` is the
  original's ``SearchTransfer``: both maps unfolded and normalised, the whole (R/4)^2 x L^2 relevance matrix in one
  ``bmm``, its max; ``chunked`` is hf_xcv's (:mod:`hf_xcv.attention.operators.texture`): the same relevances in
  blocks of ``relevance_chunk_size`` (4,096) positions a side with a running arg-max, S recomputed from the matched
  pair.
* ``model``: the whole TTSR at the paper's settings (6.7M parameters, random weights, float32, inference): the
  original's forward pass (``hf_xcv.conversion.ttsr_reference.original_forward``: dense relevance, unfold / gather /
  fold) and ``TTSRForReferenceSuperResolution`` with the same weights; seconds per megapixel of output.

Peak memory: the growth of the process's resident set during the call, the inputs and weights already allocated,
each (part, method, case) in a fresh worker process with glibc's allocator set so that RSS follows the live tensors
(as benchmarks/bench_attention.py measures it). Time: one call after a warm-up (the measured call itself when it
takes over 30 s). A dense cell predicted not to fit in 70 % of the available memory is skipped and its need printed.
Target (issue 14): the 256x1024 case completes with hf_xcv on a 24 GiB machine, which the dense formulation cannot.

IPT (``--models ipt``): a square LR image of each ``--ipt-sizes`` side restored by the paper-size model (``ipt-sr-x4``:
115.6M parameters, random weights, float32, inference, batch of one) three ways, the network per tile the same
(``IPTForImageRestoration.restore_tiles``), only the tiling differing:

* ``official``: the official ``forward_chop`` (:func:`hf_xcv.conversion.ipt_reference.official_chop`): 48x48 tiles at
  a stride of 12 (an overlap of 36), plus a bottom strip, a right strip and a corner predicted again;
* ``hf_xcv @36``: ``IPTForImageRestoration`` at ``tile_overlap=36``, the official overlap (equal overlap);
* ``hf_xcv @12``: at its default ``tile_overlap`` (12, a quarter of a tile).

All three send ``tile_batch_size`` tiles (the config's, 64, or ``--tile-batch-size``) through the network at once, so
the network's activations are bounded by it; the official chop keeps every tile's output for its fold, hf_xcv blends
each batch of outputs into the image as it comes. The table gives the tiles each one runs, seconds and peak memory
(measured as above), throughput in kilopixels of input and of output per second, and the ratios (official / hf_xcv:
> 1 where hf_xcv is faster or smaller). The default sizes (48, 96, 120, 192) take about 7 minutes on 2 cores (a batch
of 64 paper-size tiles takes about 30 s). A call over 10 s is measured once.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import results_file
import torch
from bench_attention import (
    _allocate_as_usual,
    _glibc,
    _map_tensors_alone,
    _reset_peak_rss,
    _status_kib,
    available_mib,
    worker_result,
)
from torch.nn import functional as F

DEFAULT_CASES = "40x160,64x256,128x512,256x1024"
MEMORY_FRACTION = 0.7
PATCH = 256 * 9  # relu3_1's 3x3 patch vector at the paper's size
SLOW_SECONDS = 30.0


def dense_relevance(query_features: torch.Tensor, key_features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The original's search: every relevance at once, then its max over the reference."""
    queries = F.normalize(F.unfold(query_features, 3, padding=1), dim=1)  # (B, 2304, L^2)
    keys = F.normalize(F.unfold(key_features, 3, padding=1), dim=1)  # (B, 2304, (R/4)^2)
    best, index = torch.bmm(keys.transpose(1, 2), queries).max(dim=1)  # the (B, (R/4)^2, L^2) matrix
    return best, index


def chunked_relevance(query_features: torch.Tensor, key_features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    from hf_xcv.attention.operators.texture import best_matches, matched_relevance, patch_vectors

    queries, keys = patch_vectors(query_features), patch_vectors(key_features)
    index = best_matches(queries, keys, chunk_size=4096)
    return matched_relevance(queries, keys, index), index


def predicted_mib(part: str, method: str, lr: int, ref: int) -> float:
    """What a dense cell needs at its peak: the relevance matrix and the unfolded maps (the model adds Ref's
    unfolded values and its activations, a few GiB at the largest case)."""
    if method not in ("dense", "original"):
        return 0.0
    queries, keys = lr * lr, (ref // 4) ** 2
    need = (queries * keys + 2 * PATCH * (queries + keys)) * 4 / 2**20
    if part == "model":
        need += (64 * 144 + 128 * 36 + 256 * 9) * keys * 4 / 2**20 + 12 * 64 * (4 * lr) ** 2 * 4 / 2**20
    return need


def build(part: str, method: str, lr: int, ref: int) -> tuple[Any, tuple]:
    """The call to measure and its arguments (allocated here, before the measurement)."""
    generator = torch.Generator().manual_seed(0)
    if part == "relevance":
        query_features = torch.rand(1, 256, lr, lr, generator=generator)
        key_features = torch.rand(1, 256, ref // 4, ref // 4, generator=generator)
        return (dense_relevance if method == "dense" else chunked_relevance), (query_features, key_features)
    import hf_xcv
    from hf_xcv.conversion.ttsr_reference import official_state_dict, original_forward, random_inputs
    from hf_xcv.models.ttsr.conversion_ttsr import convert_official

    official = official_state_dict(n_feats=64, blocks=(16, 16, 8, 4), channels=(64, 128, 256))
    inputs = random_inputs(batch=1, lr_size=(lr, lr), ref_size=(ref, ref))
    if method == "original":
        names = ("pixel_values", "upsampled_pixel_values", "reference_pixel_values", "degraded_reference_pixel_values")
        return original_forward, (official, *(inputs[name] for name in names))
    config, converted, _ = convert_official(official)
    model = hf_xcv.TTSRForReferenceSuperResolution(hf_xcv.TTSRConfig.from_dict(config)).eval()
    model.load_state_dict(converted)
    return (lambda **kw: model(**kw).reconstruction), inputs


def call(function: Any, arguments: Any) -> None:
    with torch.no_grad():
        function(**arguments) if isinstance(arguments, dict) else function(*arguments)


def measure(part: str, method: str, lr: int, ref: int) -> dict[str, Any]:
    return measured(lambda: build(part, method, lr, ref))


def measured(make: Callable[[], tuple[Any, Any]], slow: float = SLOW_SECONDS) -> dict[str, Any]:
    """Time and peak memory of the call ``make()`` returns (``(function, arguments)``, built after the allocator
    is set, before the measurement); timed again after this warm-up unless it took over ``slow`` seconds."""
    libc = _glibc()
    _map_tensors_alone(libc)
    function, arguments = make()
    gc.collect()
    if libc is not None:
        libc.malloc_trim(0)
    before = _status_kib("VmRSS")
    _reset_peak_rss()
    start = time.perf_counter()
    call(function, arguments)  # the memory measurement, and the warm-up
    first = time.perf_counter() - start
    peak = _status_kib("VmHWM")
    seconds = first
    if first < slow:
        _allocate_as_usual(libc)
        start = time.perf_counter()
        call(function, arguments)
        seconds = time.perf_counter() - start
    return {"status": "ok", "seconds": seconds, "mib": max(peak - before, 4) / 1024, "load": os.getloadavg()[0]}


def run_worker(part: str, method: str, lr: int, ref: int, threads: int | None, timeout: float) -> dict[str, Any]:
    need = predicted_mib(part, method, lr, ref)
    if need > MEMORY_FRACTION * available_mib():
        return {"status": "skipped", "detail": f"needs ~{need / 1024:.1f} GiB"}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", part, method, str(lr), str(ref)]
    command += ["--threads", str(threads)] if threads else []
    return worker_result(command, timeout)


def cell(result: dict[str, Any]) -> str:
    if result["status"] != "ok":
        return f"{result['status']} ({result.get('detail', '')})"
    return f"{result['seconds']:.2f} s, {result['mib'] / 1024:.2f} GiB"


def ratio(ours: dict[str, Any], theirs: dict[str, Any], key: str) -> str:
    """theirs / ours: > 1 where hf_xcv is faster (seconds) or smaller (memory)."""
    if ours["status"] != "ok" or theirs["status"] != "ok":
        return "-"
    return f"{theirs[key] / max(ours[key], 1e-9):.2f}x"


# ---------------------------------------------------------------------------------------------------------------
# IPT: tiled inference against the official chop

IPT_METHODS = ("official", "hf_xcv@equal", "hf_xcv@default")
IPT_SIZES = "48,96,120,192"
IPT_SLOW_SECONDS = 10.0  # an IPT call longer than this is measured once (its tiles are its own warm-up)


def ipt_config(preset: str, tile_batch_size: int | None = None, tile_overlap: int | None = None) -> Any:
    from hf_xcv.presets import preset_config

    overrides = {"tile_batch_size": tile_batch_size, "tile_overlap": tile_overlap}
    return preset_config(preset, "xcv_ipt", **{key: value for key, value in overrides.items() if value is not None})


def official_overlap(tile: int) -> int:
    """The overlap of the official chop's tiles: it tiles at a stride of (tile // 2) // 2 (12 of 48)."""
    return tile - (tile // 2) // 2


def ipt_overlaps(config: Any) -> dict[str, int | None]:
    """Each method's ``tile_overlap`` (the official chop's is fixed by the tile: None)."""
    equal, default = official_overlap(config.image_size), config.tile_overlap
    return {"official": None, "hf_xcv@equal": equal, "hf_xcv@default": default}


def ipt_tiles(method: str, side: int, tile: int, overlap: int | None) -> int:
    """Network calls (tiles) of one method on a side x side image: the official chop runs its regular grid plus a
    bottom strip, a right strip and a corner (4 tiles for an image of one tile); hf_xcv its grid, the last tile of
    each row and column flush with the image."""
    from hf_xcv.models.ipt.modeling_ipt import tile_starts

    if method == "official":
        count = (side - tile) // ((tile // 2) // 2) + 1  # the grid's tiles per side
        return count * count + 2 * count + 1
    return len(tile_starts(side, tile, overlap)) ** 2


def build_ipt(method: str, side: int, preset: str, task: str | None, tile_batch_size: int | None) -> tuple[Any, tuple]:
    """The call to measure: one side x side image in [0, rgb_range] restored by ``method``; the same network per
    tile (``restore_tiles``) in all three."""
    import hf_xcv
    from hf_xcv.conversion.ipt_reference import official_chop, random_input

    base = ipt_config(preset, tile_batch_size)
    config = ipt_config(preset, tile_batch_size, ipt_overlaps(base)[method])
    model = hf_xcv.IPTForImageRestoration(config).eval()
    task = task or config.tasks[0]
    image = random_input(1, side, config.rgb_range)
    if method == "official":
        scale, tile, batch = model.scale(task), config.image_size, config.tile_batch_size
        predict = lambda tiles: model.restore_tiles(tiles, task)  # noqa: E731
        return (lambda x: official_chop(predict, x, scale, tile, batch)), (image,)
    return (lambda x: model(pixel_values=x, task=task).reconstruction), (image,)


def run_ipt_worker(method: str, side: int, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--ipt-worker", method, str(side)]
    command += ["--ipt-preset", args.ipt_preset] + (["--ipt-task", args.ipt_task] if args.ipt_task else [])
    command += ["--tile-batch-size", str(args.tile_batch_size)] if args.tile_batch_size else []
    command += ["--threads", str(args.threads)] if args.threads else []
    return worker_result(command, args.timeout)


def throughput(result: dict[str, Any], kilopixels: float) -> str:
    return f"{kilopixels / result['seconds']:.1f}" if result["status"] == "ok" else "-"


def ipt_row(side: int, scale: int, tiles: dict[str, int], results: dict[str, dict[str, Any]]) -> str:
    """One markdown row: tiles, each method's cell, the ratios to the official chop, kilopixels/s in and out."""
    official, equal, default = (results[method] for method in IPT_METHODS)
    tile_counts = " / ".join(str(tiles[method]) for method in IPT_METHODS)
    cells = " | ".join(cell(results[method]) for method in IPT_METHODS)
    speed = f"{ratio(equal, official, 'seconds')} / {ratio(default, official, 'seconds')}"
    memory = f"{ratio(equal, official, 'mib')} / {ratio(default, official, 'mib')}"
    rates = [" / ".join(throughput(results[m], (s * side) ** 2 / 1e3) for m in IPT_METHODS) for s in (1, scale)]
    sizes = f"{side}x{side} ({scale * side}x{scale * side})"
    return f"| {sizes} | {tile_counts} | {cells} | {speed} | {memory} | {rates[0]} | {rates[1]} |"


def ipt_table(args: argparse.Namespace, run: Callable[..., dict[str, Any]] = run_ipt_worker) -> None:
    """The IPT table, one row per size; ``run(method, side, args)`` measures a cell (a worker process)."""
    config = ipt_config(args.ipt_preset, args.tile_batch_size)
    task = args.ipt_task or config.tasks[0]
    scale = config.restoration_tasks[config.task_index(task)].scale
    tile, overlaps = config.image_size, ipt_overlaps(config)
    equal, default = overlaps["hf_xcv@equal"], overlaps["hf_xcv@default"]
    print(f"\nIPT ({args.ipt_preset}, task {task}, {tile}x{tile} tiles, tile_batch_size {config.tile_batch_size}): the "
          f"official chop (stride {tile - equal}: overlap {equal}) against hf_xcv's tiled inference at equal overlap "
          f"(@{equal}) and at its default (@{default}); ratios official / hf_xcv")  # fmt: skip
    both = f"@{equal} / @{default}"
    columns = [
        "LR (output)",
        f"tiles: official / {both}",
        "official",
        f"hf_xcv @{equal}",
        f"hf_xcv @{default}",
        f"speed-up {both}",
        f"memory saving {both}",
        f"kpx/s in: official / {both}",
        f"kpx/s out: official / {both}",
    ]
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|---|---|")
    for side in (int(size) for size in args.ipt_sizes.split(",")):
        tiles = {method: ipt_tiles(method, side, tile, overlaps[method]) for method in IPT_METHODS}
        results = {method: run(method, side, args) for method in IPT_METHODS}
        print(ipt_row(side, scale, tiles, results), flush=True)


# ---------------------------------------------------------------------------------------------------------------


def ttsr_tables(args: argparse.Namespace) -> None:
    methods = {"relevance": ("dense", "chunked"), "model": ("original", "hf_xcv")}
    cases = [tuple(int(side) for side in case.split("x")) for case in args.cases.split(",")]
    for part in args.parts.split(","):
        theirs_name, ours_name = methods[part]
        print(f"\n{part}: {theirs_name} (the original's) against {ours_name} (hf_xcv)")
        print(f"| case | {theirs_name} | {ours_name} | speed-up | memory saving | hf_xcv s / output MP |")
        print("|---|---|---|---|---|---|")
        for lr, ref in cases:
            theirs = run_worker(part, theirs_name, lr, ref, args.threads, args.timeout)
            ours = run_worker(part, ours_name, lr, ref, args.threads, args.timeout)
            per_mp = "-"
            if part == "model" and ours["status"] == "ok":
                per_mp = f"{ours['seconds'] / ((4 * lr) ** 2 / 1e6):.1f}"
            print(f"| {lr}x{lr} LR, {ref}x{ref} ref | {cell(theirs)} | {cell(ours)} | {ratio(ours, theirs, 'seconds')} "
                  f"| {ratio(ours, theirs, 'mib')} | {per_mp} |", flush=True)  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="ttsr", help="comma-separated sections: ttsr, ipt")
    parser.add_argument("--cases", default=None, help=f"TTSR's LRxREF cases (default {DEFAULT_CASES})")
    parser.add_argument("--parts", default="relevance,model")
    parser.add_argument("--ipt-sizes", default=None, help=f"IPT's LR sides (default {IPT_SIZES})")
    parser.add_argument("--ipt-preset", default=None, help="IPT's preset (default ipt-sr-x4)")
    parser.add_argument("--ipt-task", default=None, help="IPT's task (default the preset's first)")
    parser.add_argument("--tile-batch-size", type=int, default=None, help="IPT's tiles per call (default the config's)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and IPT's test preset: a check, not a measure")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--worker", nargs=4, metavar=("PART", "METHOD", "LR", "REF"), help=argparse.SUPPRESS)
    parser.add_argument("--ipt-worker", nargs=2, metavar=("METHOD", "SIDE"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--results", default=None, help="folder of the tables (default benchmarks/results, none with --quick; '' none)"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models.split(",")) - {"ttsr", "ipt"})
    if unknown:
        parser.error(f"--models: unknown {unknown}; choose from ttsr, ipt")
    if args.quick:
        args.cases = args.cases or "4x16"
        args.ipt_preset = args.ipt_preset or "ipt-test-tiny"
        tile = ipt_config(args.ipt_preset).image_size
        args.ipt_sizes = args.ipt_sizes or f"{tile},{2 * tile}"
    args.cases = args.cases or DEFAULT_CASES
    args.ipt_preset = args.ipt_preset or "ipt-sr-x4"
    args.ipt_sizes = args.ipt_sizes or IPT_SIZES
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        part, method, lr, ref = args.worker
        print("RESULT " + json.dumps(measure(part, method, int(lr), int(ref))), flush=True)
        return
    if args.ipt_worker:
        method, side = args.ipt_worker
        make = lambda: build_ipt(method, int(side), args.ipt_preset, args.ipt_task, args.tile_batch_size)  # noqa: E731
        print("RESULT " + json.dumps(measured(make, IPT_SLOW_SECONDS)), flush=True)
        return
    machine = (
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {available_mib() / 1024:.1f} GiB available"
    )
    print(machine)
    models = args.models.split(",")
    # Each section's tables go to their own results file (a --quick run is a check: it writes none unless asked).
    results = args.results if args.results is not None else ("" if args.quick else str(results_file.RESULTS))
    for section, tables in (("ttsr", ttsr_tables), ("ipt", ipt_table)):
        if section in models:
            with results_file.tee() as printed:
                tables(args)
            if results:
                results_file.write(Path(results) / f"restoration_{section}.md", [machine, *printed])


if __name__ == "__main__":
    main()
