"""benchmarks/bench_attention_device.py, run on the CPU (CI has no accelerator): it compares the fused and plain
paths of the entries it names and writes its table under the run's provenance. Timings are never asserted."""

from __future__ import annotations

import pytest
from helpers import REPO_ROOT, load_script


@pytest.fixture(scope="module")
def bench():
    return load_script(REPO_ROOT / "benchmarks" / "bench_attention_device.py")


def test_a_cpu_run_agrees_and_writes_its_table(bench, tmp_path):
    target = tmp_path / "attention_device.md"
    args = ["--device", "cpu", "--lengths", "256", "--entries", "linear,local,sinkhorn", "--check-length", "64"]
    report = bench.main(args + ["--repeats", "1", "--markdown", str(target)])
    assert set(report["agreement"]) == {"linear", "local", "sinkhorn"}
    for found in report["agreement"].values():  # float32: the two paths sum in different orders
        assert found["output"] <= 1e-5 and found["gradient"] <= 1e-5, found
    for pair in report["cost"].values():
        assert all(cell["ms"] > 0 and cell["mib"] is None for cell in pair)  # no allocator statistics on CPU
    text = target.read_text()
    assert "bench_attention_device.py --device cpu" in text and "- commit: " in text
    assert all(f"| {name} | " in text for name in ("full (sdpa)", "linear", "local", "sinkhorn"))


def test_set_fused_reaches_every_core_that_has_the_flag(bench):
    layer = bench.layer_bench.build_layer(bench.layer_bench.Row("local"), 64)
    bench.set_fused(layer, True)
    assert [module.fused for module in layer.modules() if hasattr(module, "fused")] == [True]


def test_unknown_entries_are_refused(bench):
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--entries", "full"])
