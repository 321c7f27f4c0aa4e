"""TTSR in bounded memory (hf_xcv) against the original's dense formulation, side by side in one run.

    python benchmarks/bench_restoration.py [--cases 40x160,64x256,128x512,256x1024] [--parts relevance,model]
        [--threads N] [--timeout 3600]

A case ``LxR`` is an L x L low-resolution input with an R x R reference (x4: the output is 4L x 4L). At the paper's
size (relu3_1 of 256 channels: 3x3 patch vectors of 2,304 numbers) the relevance compares every one of the input's
L^2 positions with every one of the reference's (R/4)^2:

* ``relevance``: from the two relu3_1 maps to the soft attention S and the hard attention's indices. ``dense`` is the
  original's ``SearchTransfer``: both maps unfolded and normalised, the whole (R/4)^2 x L^2 relevance matrix in one
  ``bmm``, its max; ``chunked`` is hf_xcv's (:mod:`hf_xcv.attention.texture`): the same relevances in blocks of
  ``relevance_chunk_size`` (4,096) positions a side with a running arg-max, S recomputed from the matched pair.
* ``model``: the whole TTSR at the paper's settings (6.7M parameters, random weights, float32, inference): the
  original's forward pass (``hf_xcv.conversion.ttsr_reference.original_forward``: dense relevance, unfold / gather /
  fold) and ``TTSRForReferenceSuperResolution`` with the same weights; seconds per megapixel of output.

Peak memory: the growth of the process's resident set during the call, the inputs and weights already allocated,
each (part, method, case) in a fresh worker process with glibc's allocator set so that RSS follows the live tensors
(as benchmarks/bench_attention.py measures it). Time: one call after a warm-up (the measured call itself when it
takes over 30 s). A dense cell predicted not to fit in 70 % of the available memory is skipped and its need printed.
Target (issue 14): the 256x1024 case completes with hf_xcv on a 24 GiB machine, which the dense formulation cannot.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

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
    from hf_xcv.attention.texture import best_matches, matched_relevance, patch_vectors

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
    from hf_xcv.conversion.ttsr import convert_official
    from hf_xcv.conversion.ttsr_reference import official_state_dict, original_forward, random_inputs

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
    libc = _glibc()
    _map_tensors_alone(libc)
    function, arguments = build(part, method, lr, ref)
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
    if first < SLOW_SECONDS:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--parts", default="relevance,model")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--worker", nargs=4, metavar=("PART", "METHOD", "LR", "REF"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        part, method, lr, ref = args.worker
        print("RESULT " + json.dumps(measure(part, method, int(lr), int(ref))), flush=True)
        return
    methods = {"relevance": ("dense", "chunked"), "model": ("original", "hf_xcv")}
    cases = [tuple(int(side) for side in case.split("x")) for case in args.cases.split(",")]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {available_mib() / 1024:.1f} GiB available")
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


if __name__ == "__main__":
    main()
