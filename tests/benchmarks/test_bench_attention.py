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
    assert "Targets (0/0 PASS)" in report  # the targets are at 8K and 16K: none is measured in a quick run


def test_flop_table_counts_every_matmul_and_shares_follow(bench, quick):
    """Counted forward FLOPs: sdpa and eager compute the same matmuls (projections + 4 L^2 C); linear's core adds
    2 x 2 L C D to the projections' 4 x 2 L C^2; share = measured speed-up over sdpa / the FLOP ratio."""
    rows, results = quick
    for length in LENGTHS:
        projections = 4 * 2 * length * 512 * 512
        sdpa, eager = results[("full (sdpa)", length)], results[("full (eager)", length)]
        assert sdpa["gflops"] * 1e9 == pytest.approx(projections + 4 * length**2 * 512)
        assert eager["gflops"] == pytest.approx(sdpa["gflops"])
        assert results[("linear", length)]["gflops"] * 1e9 >= projections + 2 * 2 * length * 512 * 64
        share = bench.flop_shares(results, rows, LENGTHS)[("linear", length)]
        assert share["ceiling"] == pytest.approx(sdpa["gflops"] / results[("linear", length)]["gflops"])
        assert share["share"] == pytest.approx(share["measured"] / share["ceiling"])
    table = bench.format_flops(results, rows, LENGTHS)
    assert re.search(r"\| linear \| [\d.]+ \([\d.]+x / [\d.]+x / \d+ %\)", table), table


def test_plot_is_written(bench, quick, tmp_path):
    rows, results = quick
    bench.plot(results, rows, LENGTHS, str(tmp_path / "attention.png"))
    data = (tmp_path / "attention.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_worker_process_reports_one_result(bench):
    result = bench.run_in_subprocess(bench.Row("full", "sdpa"), 128, repeats=1, threads=1, timeout=300)
    assert result["status"] == "ok", result
    assert result["ms"] > 0 and result["mib"] > 0 and result["threads"] == 1 and result["gflops"] > 0
    assert result["hf_xcv"] == str(REPO_ROOT)


def test_a_baseline_row_runs_the_package_of_its_commit(bench):
    """--baseline-commit: the worker imports hf_xcv from that commit's files, not from the working tree."""
    row = bench.Row("linear", commit="HEAD")
    assert row.label == "linear @HEAD" and bench.Row.from_key(row.key) == row
    result = bench.run_in_subprocess(row, 128, repeats=1, threads=1, timeout=300)
    assert result["status"] == "ok", result
    assert result["hf_xcv"] == str(bench.baseline_tree("HEAD")) != str(REPO_ROOT)
    assert (bench.baseline_tree("HEAD") / "hf_xcv" / "attention" / "registry.py").is_file()


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
    rows = bench.rows_for(["full", "linear", "local", "longformer", "synthesizer_dense"], baseline="abc1234")
    flops = {"full (sdpa)": 150.0, "linear": 18.0, "local": 26.0}
    results = {}
    for length, scale in ((8192, 1), (16384, 2)):
        results[("full (sdpa)", length)] = cell(3000.0 * scale**2, 120.0 * scale)
        results[("linear", length)] = cell(300.0 * scale, 110.0 * scale)  # 10x of an 8.33x ceiling
        results[("local", length)] = cell(1500.0 * scale, 125.0 * scale**1.5)  # 2x of 5.77x; grows 2.8x
        results[("longformer", length)] = cell(900.0 * scale, 170.0 * scale)  # 1.42x sdpa: within 1.5x
        results[("synthesizer_dense", length)] = cell(2900.0 * scale**2, 9000.0 * scale**2)
        results[("linear @abc1234", length)] = cell(400.0 * scale, 170.0 * scale)
        results[("local @abc1234", length)] = cell(1400.0 * scale, 460.0 * scale)
        for label, count in flops.items():
            results[(label, length)]["gflops"] = count * scale
    lines = bench.check_targets(results, rows, [8192, 16384])
    assert "PASS    linear at 8K: peak memory <= 1x sdpa's: 0.92x (110 MiB vs sdpa 120 MiB)" in lines
    assert "FAIL    local at 16K: peak memory <= 1x sdpa's: 1.47x (354 MiB vs sdpa 240 MiB)" in lines
    assert "PASS    longformer at 8K: peak memory <= 1.5x sdpa's: 1.42x (170 MiB vs sdpa 120 MiB)" in lines
    assert "PASS    linear: peak memory 16K / 8K <= 2.1x (linear growth): 2.00x" in lines
    assert "FAIL    local: peak memory 16K / 8K <= 2.1x (linear growth): 2.83x" in lines
    assert (
        "PASS    linear at 8K: >= 75% of its FLOP ceiling over sdpa: 10.00x (120%: 10.00x of a 8.33x ceiling)" in lines
    )
    assert "FAIL    local at 8K: >= 75% of its FLOP ceiling over sdpa: 2.00x (35%: 2.00x of a 5.77x ceiling)" in lines
    assert "PASS    linear at 8K: not slower than @abc1234 (<= 1.05x): 0.75x (300 ms vs 400 ms)" in lines
    assert "FAIL    local at 16K: not slower than @abc1234 (<= 1.05x): 1.07x (3000 ms vs 2800 ms)" in lines
    assert not any(line.startswith("PASS    synthesizer_dense") for line in lines)  # quadratic: no target
    assert any(line.startswith("MISSING longformer at 8K: >=") for line in lines) is False  # not a FLOP entry
    missing = bench.check_targets({}, bench.rows_for(["linformer"]), [8192])
    assert missing == [
        "MISSING linformer at 8K: peak memory <= 1x sdpa's: not measured",
        "MISSING linformer at 8K: >= 75% of its FLOP ceiling over sdpa: not measured",
    ]
