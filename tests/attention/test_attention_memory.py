"""Peak memory of one training step of the efficient entries, bounded by the size of the input.

Not a timing: a fresh process (``benchmarks/bench_attention.py --memory-worker``) runs one forward + backward of
the benchmark's layer (hidden 512, 8 heads, q/k/v/o projections, float32) for every entry at 4096 tokens and
reports the growth of its resident set (glibc set to map every tensor of 128 KiB or more on its own, so RSS
follows the live tensors). PyTorch's fused exact attention (sdpa) needs about 7.8 inputs' worth at this length
(q, k, v, the output, their gradients, the projections' gradients). The bounds below leave a margin over what
the entries need, and sit far below what materialising a whole-length intermediate costs: one (8, L, L) score
tensor is 64 inputs' worth, one (L, 8 x 266) set of Performer features 4.2, a gathered copy of blocked keys and
values with their flanges several more. A regression that keeps such a tensor for backward fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO_ROOT

LENGTH, HIDDEN = 4096, 512
INPUT_MIB = LENGTH * HIDDEN * 4 / 2**20  # the layer's input (1, L, 512) float32: 8 MiB
# Entries that should need no more than sdpa, and those allowed 1.5x sdpa (issue 32's two groups).
AT_SDPA = ("linear", "performer", "linformer", "local", "axial", "isab")
WITHIN = ("longformer", "bigbird", "etc", "sparse_strided", "sinkhorn", "routing", "lsh")
# In inputs' worth. sdpa: ~7.8; the implementations before the fused paths: linear 10.7, performer 22.5, linformer
# 13.8, local 28.6, axial 13.5, longformer 41, bigbird 48, etc 20.8, sparse_strided 36, sinkhorn 21.9, routing 20,
# lsh 21.5. The sparse entries' chunks are sized for long sequences (a few MiB of scores each at 4K), hence
# the second bound's margin.
BOUND_AT_SDPA, BOUND_WITHIN = 9.0, 16.0


@pytest.fixture(scope="module")
def peaks() -> dict[str, float]:
    names = ",".join(("full:sdpa",) + AT_SDPA + WITHIN)
    command = [sys.executable, str(REPO_ROOT / "benchmarks" / "bench_attention.py"), "--memory-worker", names]
    done = subprocess.run(
        command + [str(LENGTH)], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def peak(peaks: dict, name: str) -> float:
    assert isinstance(peaks[name], float), f"{name} did not run: {peaks[name]}"
    return peaks[name]


def test_sdpa_is_what_the_bounds_assume(peaks):
    """The measurement itself: sdpa's step holds about eight inputs' worth (were RSS to add up freed blocks, or
    miss the tensors, every bound below would mean something else)."""
    assert 6.5 <= peak(peaks, "full:sdpa") / INPUT_MIB <= 9.0, peaks["full:sdpa"]


@pytest.mark.parametrize("name", AT_SDPA)
def test_linear_cost_entries_need_no_more_than_fused_attention(peaks, name):
    assert peak(peaks, name) / INPUT_MIB <= BOUND_AT_SDPA, f"{name}: {peaks[name]:.1f} MiB, sdpa {peaks['full:sdpa']}"


@pytest.mark.parametrize("name", WITHIN)
def test_sparse_and_routed_entries_stay_within_their_bound(peaks, name):
    assert peak(peaks, name) / INPUT_MIB <= BOUND_WITHIN, f"{name}: {peaks[name]:.1f} MiB, sdpa {peaks['full:sdpa']}"
