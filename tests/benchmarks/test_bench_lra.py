"""benchmarks/bench_lra.py: which entries it runs, resuming per cell, the tables and the plot from stored cells."""

from __future__ import annotations

import argparse
import json
import sys

import pytest
from helpers import REPO_ROOT, load_script

bench = load_script(REPO_ROOT / "benchmarks" / "bench_lra.py")
Row = bench.cost.Row


def train(accuracy: float, steps: int = 600) -> dict:
    return {"status": "ok", "test_accuracy": accuracy, "validation_accuracy": accuracy, "steps": steps, "seed": 0,
            "command": "python -m hf_xcv.train lra --task listops", "test_samples": 1000, "batch_size": 16}  # fmt: skip


def timed(steps_per_second: float, mib: float, length: int) -> dict:
    return {"status": "ok", "steps_per_second": steps_per_second, "mib": mib, "sequence_length": length}


LENGTHS = {"listops": 512, "image": 1024, "pathfinder": 1024}
STORED = {  # row key -> task -> (accuracy, steps/s, MiB)
    "full:eager": {"listops": (20.0, 2.0, 400.0), "image": (40.0, 1.0, 800.0), "pathfinder": (60.0, 1.0, 800.0)},
    "full:sdpa": {"listops": (21.0, 4.0, 100.0), "image": (41.0, 2.0, 200.0), "pathfinder": (61.0, 2.0, 200.0)},
    "linformer": {"listops": (15.0, 8.0, 50.0), "image": (30.0, 4.0, 100.0), "pathfinder": (54.0, 4.0, 100.0)},
    "isab": {"listops": (12.0, 4.0, 50.0), "image": (25.0, 2.0, 100.0), "pathfinder": (50.0, 2.0, 100.0)},
}


@pytest.fixture
def stored(tmp_path):
    for key, tasks in STORED.items():
        for task, (acc, speed, mib) in tasks.items():
            cell = {"task": task, "row": key, "train": train(acc), "time": timed(speed, mib, LENGTHS[task])}
            bench.save_cell(tmp_path, task, Row.from_key(key), cell)
    failed = {"task": "image", "row": "lsh", "train": {"status": "timeout", "detail": "no result within 5 s"}}
    bench.save_cell(tmp_path, "image", Row("lsh"), failed)
    return tmp_path


def test_every_bidirectional_sequence_entry_runs():
    entries = bench.sequence_entries()
    assert "xl" not in entries and "compressive" not in entries  # causal only
    assert not {"axial", "local_2d", "shifted_window"} & set(entries)  # need a 2-D grid
    assert {"full", "linformer", "performer", "lsh", "bigbird", "isab", "synthesizer_random"} <= set(entries)
    assert len(entries) == 17
    rows = bench.cost.rows_for(entries)
    assert [row.label for row in rows[:2]] == ["full (eager)", "full (sdpa)"] and len(rows) == 18


def test_the_accuracy_table_has_lra_layout_and_published_numbers(stored):
    cells = bench.stored_cells(stored)
    table = bench.accuracy_table(cells, bench.rows_in(cells), bench.tasks_in(cells))
    lines = table.splitlines()
    assert lines[0] == "| model | listops | image | pathfinder | avg | LRA name |"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    # ours (LRA's) per task; the mean over the three tasks, LRA's mean of the same three beside it
    assert rows["full (eager)"] == (
        "| full (eager) | 20.00 (36.37) | 40.00 (42.44) | 60.00 (71.40) | 40.00 (50.07) | Transformer |"
    )
    assert "| linformer | 15.00 (35.70) | 30.00 (38.56) | 54.00 (76.34) | 33.00 (50.20) | Linformer |" in table
    assert "| isab | 12.00 | 25.00 | 50.00 | 29.00 | - |" in table  # not in the paper
    assert "| lsh | - (37.27) | timeout (38.07) | - (68.50) | - (47.95) | Reformer |" in table  # failed, unrun
    assert lines[-1].startswith("| chance | 10.00 | 10.00 | 50.00 |")


def test_the_cost_table_gives_ratios_to_eager_full_attention(stored):
    cells = bench.stored_cells(stored)
    table = bench.cost_table(cells, bench.rows_in(cells), bench.tasks_in(cells))
    assert table.splitlines()[0] == (
        "| model | listops steps/s | image steps/s | pathfinder steps/s | listops MiB | image MiB | pathfinder MiB |"
    )
    assert "| linformer | 8 (4.00x) | 4 (4.00x) | 4 (4.00x) | 50 (0.12x) | 100 (0.12x) | 100 (0.12x) |" in table
    assert "| full (sdpa) | 4 (2.00x) | 2 (2.00x) | 2 (2.00x) | 100 (0.25x) | 200 (0.25x) | 200 (0.25x) |" in table


def test_shortcut_baselines_score_what_a_rule_without_the_task_gets(tmp_path):
    from hf_xcv.data.lra import load_listops_dataset, load_pathfinder_dataset

    listops = load_listops_dataset(num_train=200, num_validation=10, num_test=100, min_length=10, max_length=40)
    # MAX and MIN expressions: the outermost operator alone already says much (chance is 10 %)
    assert 20 < bench.root_operator_baseline(listops) < 60
    small = dict(num_train=200, num_validation=2, num_test=200, image_size=16, path_length=8, num_distractors=0)
    assert bench.mark_distance_baseline(load_pathfinder_dataset(**small)) < 60
    assert bench.mark_distance_baseline(load_pathfinder_dataset(**small, match_distance=99)) > 60  # the leak it guards
    for task, settings in (("listops", {"num_train": 50, "num_validation": 5, "num_test": 20, "max_length": 30}),):
        bench.data_dir(tmp_path, task, {**settings, "min_length": 10})
    stored = bench.shortcut_baselines(tmp_path)
    assert set(stored) == {"listops"} and stored["listops"]["rule"] == "the outermost operator's commonest value"
    assert json.loads((tmp_path / "baselines.json").read_text()) == stored


def test_data_made_with_other_settings_is_refused(tmp_path):
    settings = {"num_train": 20, "num_validation": 5, "num_test": 5, "min_length": 10, "max_length": 20}
    bench.data_dir(tmp_path, "listops", settings)
    with pytest.raises(ValueError, match="was generated with"):
        bench.data_dir(tmp_path, "listops", {**settings, "max_length": 30})


def test_the_report_lists_failures_settings_and_a_command(stored):
    report = bench.build_report(
        bench.stored_cells(stored), ["machine: test"], {"listops": {"rule": "r", "accuracy": 26.6}}
    )
    assert (
        "| shortcut baseline | 26.60 | - | - |" in report
        and "Shortcut baseline of listops: r (26.60 % on test)" in report
    )
    assert report.startswith("- machine: test")
    assert "- image / lsh (train): timeout: no result within 5 s" in report
    assert "- listops: length [512], steps [600], batch [16], seeds [0]" in report
    assert "a cell's command: `python -m hf_xcv.train lra --task listops`" in report


def test_relative_speed_is_the_geometric_mean_over_tasks(stored):
    cells = bench.stored_cells(stored)
    tasks = bench.tasks_in(cells)
    assert bench.relative_speed(cells, tasks, Row("linformer")) == pytest.approx(4.0)
    assert bench.relative_speed(cells, tasks, Row("lsh")) is None  # not timed
    assert bench.mean_accuracy(cells, tasks, Row("isab")) == pytest.approx(29.0)


def test_the_plot_is_a_png_with_one_point_per_complete_row(stored):
    path = stored / "plot.png"
    assert bench.plot(bench.stored_cells(stored), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert not bench.plot({}, stored / "none.png") and not (stored / "none.png").exists()


def test_cells_are_resumed_one_by_one(stored):
    cells = [(task, Row.from_key(key)) for key in STORED for task in LENGTHS] + [("image", Row("lsh"))]
    assert bench.pending(stored, cells, "train", retry=False) == []
    assert bench.pending(stored, cells, "train", retry=False, budget={"steps": 600, "seed": 0}) == []
    # cells trained with another budget are run again, not mixed into the table
    assert len(bench.pending(stored, cells, "train", retry=False, budget={"steps": 800, "seed": 0})) == 12
    assert bench.pending(stored, cells, "train", retry=True) == [("image", Row("lsh"))]
    assert bench.pending(stored, cells, "time", retry=False) == [("image", Row("lsh"))]
    assert not list(stored.glob("cells/*/*.tmp"))  # cells are written whole


def test_each_task_has_its_step_budget_and_stale_cells_are_found_per_task(stored):
    args = argparse.Namespace(steps=None, quick=False)
    assert {task: bench.steps_for(task, args) for task in bench.TASKS} == bench.DEFAULT_STEPS
    assert bench.DEFAULT_STEPS["pathfinder"] > bench.DEFAULT_STEPS["listops"]  # Pathfinder's recipe (see train_lra)
    assert bench.steps_for("pathfinder", argparse.Namespace(steps=50, quick=False)) == 50  # --steps: every task
    assert bench.steps_for("pathfinder", argparse.Namespace(steps=None, quick=True)) == bench.QUICK_STEPS
    # the stored cells were trained for 600 steps: under the per-task defaults every one is stale; with
    # --steps 600 none is; each task is held to its own budget
    cells = [(task, Row.from_key(key)) for key in STORED for task in LENGTHS]
    args = argparse.Namespace(steps=None, quick=False, seed=0, output=stored, retry_failed=False)
    assert sorted(bench.to_run("train", cells, args), key=str) == sorted(cells, key=str)
    assert bench.to_run("train", cells, argparse.Namespace(**{**vars(args), "steps": 600})) == []
    pathfinder = [cell for cell in cells if cell[0] == "pathfinder"]
    for task, row in pathfinder:
        cell = bench.load_cell(stored, task, row)
        cell["train"]["steps"] = bench.DEFAULT_STEPS["pathfinder"]
        bench.save_cell(stored, task, row, cell)
    assert not set(pathfinder) & set(bench.to_run("train", cells, args))
    assert len(bench.to_run("train", cells, args)) == len(cells) - len(pathfinder)
    # --retime: every cost cell again, the trained ones untouched
    timed = [cell for cell in cells if bench.load_cell(stored, *cell).get("time", {}).get("status") == "ok"]
    assert timed and not set(timed) & set(bench.to_run("time", cells, args))
    retime = argparse.Namespace(**{**vars(args), "retime": True})
    assert bench.to_run("time", cells, retime) == cells
    assert bench.to_run("train", cells, retime) == bench.to_run("train", cells, args)


def test_a_training_command_resumes_a_stopped_cell(tmp_path):
    run_dir = tmp_path / "run"
    fresh = bench.train_command("image", Row("full", "eager"), tmp_path / "data", run_dir, 600, 3)
    assert fresh[fresh.index("--attn_implementation") + 1] == "eager" and fresh[fresh.index("--seed") + 1] == "3"
    assert "--resume_from_checkpoint" not in fresh and "--overwrite_output_dir" not in fresh
    (run_dir / "checkpoints").mkdir(parents=True)
    assert "--overwrite_output_dir" in bench.train_command("image", Row("lsh"), tmp_path, run_dir, 600, 0)
    (run_dir / "checkpoints" / "LATEST").write_text("step-00000150")
    resumed = bench.train_command("image", Row("lsh"), tmp_path, run_dir, 600, 0)
    assert resumed[resumed.index("--resume_from_checkpoint") + 1] == "latest"


def test_quick_run_of_one_task_end_to_end(tmp_path, monkeypatch):
    """Both phases in their own processes (training script, cost worker), then the stored cells' report."""
    monkeypatch.setattr(sys, "argv", ["bench_lra.py", "--quick", "--tasks", "image", "--entries", "full",
                                      "--output", str(tmp_path), "--threads", "1", "--repeats", "1"])  # fmt: skip
    bench.main()
    cells = bench.stored_cells(tmp_path)
    assert sorted(cells) == [("image", "full:eager"), ("image", "full:sdpa")]
    for cell in cells.values():
        assert cell["train"]["status"] == "ok" and cell["train"]["steps"] == bench.QUICK_STEPS
        assert cell["time"]["status"] == "ok" and cell["time"]["sequence_length"] == 64
        assert cell["time"]["mib"] > 0 and cell["time"]["steps_per_second"] > 0
    report = (tmp_path / "report.md").read_text()
    assert "| full (eager) |" in report and (tmp_path / "accuracy_vs_speed.png").exists()
    first = json.loads(bench.cell_path(tmp_path, "image", Row("full", "eager")).read_text())
    bench.main()  # everything stored: nothing reruns
    assert json.loads(bench.cell_path(tmp_path, "image", Row("full", "eager")).read_text()) == first


def test_unknown_names_are_refused(monkeypatch, capsys):
    for argv, message in (
        (["--tasks", "text"], "unknown names ['text']"),
        (["--entries", "xl"], "sequence entries"),
        (["--jobs", "0"], "--jobs and --steps must be >= 1"),
    ):
        monkeypatch.setattr(sys, "argv", ["bench_lra.py", *argv])
        with pytest.raises(SystemExit):
            bench.main()
        assert message in capsys.readouterr().err


def test_the_cost_worker_measures_one_cell_in_process(tmp_path):
    data = bench.data_dir(tmp_path, "listops", bench.data_settings("listops", quick=True))
    result = bench.measure_cost("listops", Row("performer"), data, repeats=1, batch_size=4)
    assert result["status"] == "ok" and result["batch_size"] == 4 and result["sequence_length"] == 48


def test_a_cell_is_started_afresh_only_when_its_final_folder_is_whole(tmp_path, monkeypatch):
    """A results file without the config and weights beside it (a run killed while moving its final files in) is
    no finished run: its checkpoints are kept and resumed. A whole final folder of other settings is replaced."""
    row = Row("full", "eager")
    run_dir = tmp_path / "runs" / "image" / "full-eager"
    (run_dir / "checkpoints" / "step-00000150").mkdir(parents=True)
    (run_dir / "checkpoints" / "LATEST").write_text("step-00000150")
    (run_dir / "all_results.json").write_text(json.dumps({"test": {"accuracy": 0.5}, "completed_steps": 600}))
    commands = []
    monkeypatch.setattr(bench, "data_dir", lambda *_: tmp_path / "data")
    monkeypatch.setattr(bench.subprocess, "run", lambda command, **_: commands.append(command) or Done(1))
    args = argparse.Namespace(quick=True, data_settings=None, steps=None, seed=0, train_threads=1, timeout=5.0)
    cell = bench.run_training("image", row, tmp_path, args)
    assert (run_dir / "checkpoints" / "step-00000150").is_dir()  # not deleted
    assert commands[-1][commands[-1].index("--resume_from_checkpoint") + 1] == "latest"
    assert cell["status"] == "error"
    for name in ("config.json", "model.safetensors"):  # now a whole final folder
        (run_dir / name).write_text("{}")
    bench.run_training("image", row, tmp_path, args)
    assert not run_dir.exists() and "--resume_from_checkpoint" not in commands[-1]


class Done:
    """What subprocess.run returns, for a training run that failed."""

    def __init__(self, returncode: int):
        self.returncode, self.stdout, self.stderr = returncode, "", "failed"
