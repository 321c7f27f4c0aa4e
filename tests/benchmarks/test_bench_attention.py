"""benchmarks/bench_attention.py: the table has every requested row and length, ratios are positive with the
eager full row at 1.0, the worker protocol works, and the dry estimates, grids and target verdicts behave.
Timings are never asserted (a benchmark, not a timed test)."""

from __future__ import annotations

import re

import pytest
from helpers import REPO_ROOT, load_script

from hf_xcv.attention import attention_kwarg_defaults, available_attention_types, validate_attention_kwargs

LENGTHS = [128, 256]


@pytest.fixture(scope="module")
def bench():
    return load_script(REPO_ROOT / "benchmarks" / "bench_attention.py")


@pytest.fixture(scope="module")
def quick(bench):
    """A --quick run of full (eager, sdpa) and linear, in this process, one step per cell."""
    rows = bench.rows_for(["full", "linear"])
    results = bench.run_benchmark(
        rows, LENGTHS, repeats=1, threads=None, runner=bench.run_in_process, log=lambda _: None
    )
    return rows, results


def test_every_cell_is_measured(bench, quick):
    rows, results = quick
    assert [row.label for row in rows] == ["full (eager)", "full (sdpa)", "linear"]
    for row in rows:
        for length in LENGTHS:
            cell = results[(row.label, length)]
            assert cell["status"] == "ok", cell
            assert cell["ms"] > 0 and cell["mib"] > 0


def test_ratios_are_positive_and_eager_is_one(bench, quick):
    rows, results = quick
    ratios = bench.ratios(results, rows, LENGTHS)
    for length in LENGTHS:
        eager = ratios[("full (eager)", length)]
        assert eager["speedup_eager"] == pytest.approx(1.0) and eager["memory_eager"] == pytest.approx(1.0)
        assert ratios[("full (sdpa)", length)]["speedup_sdpa"] == pytest.approx(1.0)
        for row in rows:
            assert all(value > 0 for value in ratios[(row.label, length)].values())


def test_table_has_every_row_and_length(bench, quick):
    rows, results = quick
    table = bench.format_table(results, rows, LENGTHS)
    header, _, *body = table.splitlines()
    assert header.count(" ms (vs eager / sdpa)") == len(LENGTHS) and header.count(" MiB (vs eager / sdpa)") == 2
    assert [line.split(" | ")[0].lstrip("| ") for line in body] == [row.label for row in rows]
    cell = re.compile(r"^([\d.]+) \(([\d.]+)x / ([\d.]+)x\)$")
    for line in body:
        cells = [c.strip() for c in line.strip("|").split("|")][1 : 1 + 2 * len(LENGTHS)]
        matches = [cell.match(c) for c in cells]
        assert all(matches), line
        assert all(float(v) > 0 for m in matches for v in m.groups())
        if line.startswith("| full (eager)"):
            assert all(m.group(2) == "1.00" for m in matches)
    report = bench.report(results, rows, LENGTHS, ["header"], 1.0)
    assert "MISSING linear at 8192" in report  # the targets are at 8K: not measured in a quick run


def test_worker_process_reports_one_result(bench):
    result = bench.run_in_subprocess(bench.Row("full", "sdpa"), 128, repeats=1, threads=1, timeout=300)
    assert result["status"] == "ok", result
    assert result["ms"] > 0 and result["mib"] > 0 and result["threads"] == 1


def test_grids_and_length_tied_settings(bench):
    assert [bench.grid_for(n) for n in (1024, 2048, 4096, 8192, 16384)] == [
        (32, 32),
        (32, 64),
        (64, 64),
        (64, 128),
        (128, 128),
    ]
    for name, (_, tied) in bench.LENGTH_TIED.items():
        if name in available_attention_types():
            settings = attention_kwarg_defaults(name)
            validate_attention_kwargs(name, tied(1024, settings))  # the override names a setting the entry takes
            assert bench.entry_kwargs(name, 1024).items() >= tied(1024, settings).items()


def cell(ms: float, mib: float, before: float = 400.0) -> dict:
    return {"status": "ok", "ms": ms, "mib": mib, "rss_before_mib": before}


def test_dry_estimates_skip_what_cannot_fit(bench, monkeypatch):
    monkeypatch.setattr(bench, "available_mib", lambda: 32 * 1024.0)
    eager, linear, synthesizer = bench.Row("full", "eager"), bench.Row("linear"), bench.Row("synthesizer_random")
    assert bench.dry_check(eager, 16384, [], repeats=3, timeout=600)["status"] == "OOM-risk"  # ~40 GiB
    done = [(4096, cell(100.0, 1600.0)), (8192, cell(400.0, 6400.0))]
    assert bench.dry_check(eager, 16384, done, repeats=3, timeout=600)["status"] == "OOM-risk"  # ~27 GiB
    # The growth alone (16 GiB) would fit; with the (L, L) parameters held before the step it does not.
    done = [(4096, cell(100.0, 1000.0, before=900.0)), (8192, cell(400.0, 4000.0, before=2500.0))]
    assert bench.dry_check(synthesizer, 16384, done, repeats=3, timeout=600)["status"] == "OOM-risk"
    done = [(4096, cell(50.0, 40.0)), (8192, cell(100.0, 80.0))]
    assert bench.dry_check(linear, 16384, done, repeats=3, timeout=600) is None
    assert bench.dry_check(linear, 16384, done, repeats=3, timeout=0.1)["status"] == "too slow"
    assert bench.extrapolate([(4096, 50.0), (8192, 100.0)], 16384) == pytest.approx(200.0)  # linear growth
    assert bench.extrapolate([(1024, 1.0), (2048, 100.0)], 4096) == pytest.approx(400.0)  # clamped at quadratic


def test_target_verdicts(bench):
    rows = bench.rows_for(["full", "linear", "local", "synthesizer_dense"])
    ok = cell
    results = {
        ("full (eager)", 8192): ok(1000.0, 8000.0),
        ("linear", 4096): ok(40.0, 50.0),
        ("linear", 8192): ok(80.0, 100.0),
        ("local", 4096): ok(100.0, 100.0),
        ("local", 8192): ok(500.0, 300.0),
        ("synthesizer_dense", 8192): ok(900.0, 9000.0),
    }
    lines = bench.check_targets(results, rows)
    assert "PASS    linear at 8192: >= 5x faster than eager full: 12.50x (80 ms vs 1000 ms)" in lines
    assert "PASS    linear at 8192: peak memory <= 2.5x its own at 4096: 2.00x (100 MiB vs 50 MiB)" in lines
    assert "FAIL    local at 8192: >= 5x faster than eager full: 2.00x (500 ms vs 1000 ms)" in lines
    assert "FAIL    local at 8192: peak memory <= 2.5x its own at 4096: 3.00x (300 MiB vs 100 MiB)" in lines
    assert any(line.startswith("MISSING linformer at 8192") for line in lines)
    assert not any("synthesizer_dense" in line for line in lines)  # quadratic: no memory target
