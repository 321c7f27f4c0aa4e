"""benchmarks/bench_restoration.py compares like with like: its dense relevance (the original's) and hf_xcv's chunked
one give the same matches and soft attention, a worker cell returns a result, and a cell that would not fit is
skipped with its need. Timings are never asserted. (The whole model against the original's forward pass with the
same weights: tests/test_ttsr_conversion.py.)"""

from __future__ import annotations

import sys

import torch
from helpers import REPO_ROOT, load_script


def bench():
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))  # it imports bench_attention's helpers
    return load_script(REPO_ROOT / "benchmarks" / "bench_restoration.py")


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


def test_ipt_tile_counts_are_the_tiles_each_tiling_runs():
    from hf_xcv.conversion.ipt_reference import official_chop
    from hf_xcv.models.ipt.modeling_ipt import tiled

    module = bench()
    calls = []

    def predict(tiles):  # x2 nearest upsampling, counting the tiles
        calls.append(tiles.shape[0])
        return tiles.repeat_interleave(2, -1).repeat_interleave(2, -2)

    for side in (12, 15, 24, 30):
        image = torch.rand(1, 3, side, side)
        calls.clear()
        official_chop(predict, image, 2, 12, tile_batch_size=5)
        assert sum(calls) == module.ipt_tiles("official", side, 12, None)
        for overlap in (3, 9):
            calls.clear()
            tiled(predict, image, 12, overlap, 2, 5)
            assert sum(calls) == module.ipt_tiles("hf_xcv@equal", side, 12, overlap)
    assert module.ipt_tiles("official", 192, 48, None) == 196 and module.ipt_tiles("hf_xcv", 192, 48, 12) == 25


def test_the_ipt_calls_restore_the_same_image_with_the_same_network():
    module = bench()
    config = module.ipt_config("ipt-test-tiny")
    assert module.ipt_overlaps(config) == {"official": None, "hf_xcv@equal": 9, "hf_xcv@default": 3}
    for side in (12, 17):
        outputs = {}
        for method in module.IPT_METHODS:
            torch.manual_seed(0)  # the same random weights for the three
            function, arguments = module.build_ipt(method, side, "ipt-test-tiny", None, None)
            with torch.no_grad():
                outputs[method] = function(*arguments)
            assert outputs[method].shape == (1, 3, 2 * side, 2 * side) and torch.isfinite(outputs[method]).all()
        if side == 12:  # one tile: every tiling gives the network's output for it
            torch.testing.assert_close(outputs["official"], outputs["hf_xcv@equal"])
            torch.testing.assert_close(outputs["hf_xcv@default"], outputs["hf_xcv@equal"])


def test_the_default_run_is_ttsr_alone_and_quick_picks_tiny_sizes():
    module = bench()
    args = module.parse_args([])
    assert args.models == "ttsr" and args.cases == module.DEFAULT_CASES and args.ipt_preset == "ipt-sr-x4"
    quick = module.parse_args(["--models", "ttsr,ipt", "--quick"])
    assert (quick.cases, quick.ipt_preset, quick.ipt_sizes) == ("4x16", "ipt-test-tiny", "12,24")


def test_a_quick_run_of_the_ipt_section_prints_its_table(capsys):
    module = bench()
    args = module.parse_args(["--models", "ipt", "--quick", "--threads", "1"])
    cell = module.run_ipt_worker("official", 12, args)  # one cell in its worker process
    assert cell["status"] == "ok" and cell["seconds"] > 0 and cell["mib"] > 0

    def in_process(method, side, args):  # the other cells here: only the table is checked
        function, arguments = module.build_ipt(method, side, args.ipt_preset, args.ipt_task, args.tile_batch_size)
        module.call(function, arguments)
        return {"status": "ok", "seconds": 1.0, "mib": 1.0}

    module.ipt_table(args, run=in_process)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("IPT (ipt-test-tiny, task sr_x2, 12x12 tiles, tile_batch_size 64)")
    assert lines[2].startswith("| LR (output) | tiles: official / @9 / @3 |") and lines[2].count("|") == 10
    rows = lines[4:]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| 12x12 (24x24)", "4 / 1 / 1"],
        ["| 24x24 (48x48)", "36 / 25 / 9"],
    ]
    # 24 x 24 = 0.576 kilopixels in, 48 x 48 = 2.304 out, per second of 1.0
    assert rows[1].endswith("| 1.00x / 1.00x | 1.00x / 1.00x | 0.6 / 0.6 / 0.6 | 2.3 / 2.3 / 2.3 |")
