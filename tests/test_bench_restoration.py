"""benchmarks/bench_restoration.py compares like with like: its dense relevance (the original's) and hf_xcv's chunked
one give the same matches and soft attention, a worker cell returns a result, and a cell that would not fit is
skipped with its need. Timings are never asserted. (The whole model against the original's forward pass with the
same weights: tests/test_ttsr_conversion.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from helpers import load_script


def bench():
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))  # it imports bench_attention's helpers
    return load_script(Path(__file__).parents[1] / "benchmarks" / "bench_restoration.py")


def test_the_dense_and_chunked_relevance_agree():
    module = bench()
    generator = torch.Generator().manual_seed(0)
    queries, keys = torch.rand(1, 16, 9, 7, generator=generator), torch.rand(1, 16, 6, 5, generator=generator)
    dense_values, dense_index = module.dense_relevance(queries, keys)
    chunked_values, chunked_index = module.chunked_relevance(queries, keys)
    assert torch.equal(dense_index, chunked_index)
    torch.testing.assert_close(chunked_values, dense_values, atol=1e-6, rtol=0)


def test_a_worker_measures_a_cell_and_a_cell_that_does_not_fit_is_skipped():
    module = bench()
    result = module.run_worker("model", "hf_xcv", 4, 16, threads=1, timeout=600)
    assert result["status"] == "ok" and result["seconds"] > 0 and result["mib"] > 0
    skipped = module.run_worker("relevance", "dense", 4096, 16384, threads=1, timeout=600)
    assert skipped["status"] == "skipped" and "GiB" in skipped["detail"]
    assert module.predicted_mib("relevance", "chunked", 4096, 16384) == 0.0
