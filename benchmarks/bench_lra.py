"""Long Range Arena–style quality next to cost: every bidirectional attention entry (and full attention with eager
and sdpa) trained on every task of hf_xcv.data.lra with the same budget in steps; accuracy, training steps per
second and peak memory in one table, LRA's published numbers beside ours.

    python benchmarks/bench_lra.py [--tasks listops,image,pathfinder] [--entries a,b] [--steps N] [--seed 0]
        [--jobs 1] [--threads N] [--output benchmarks/results/lra] [--report-only] [--quick]

What runs, per (task, row) cell, each in its own process (a crash, a timeout or an out-of-memory kill loses one
cell, not the run):

1. **Accuracy** (phase ``train``): ``hf-xcv-train lra --task T --attention_type E`` for the task's optimizer steps
   (``DEFAULT_STEPS``, or ``--steps`` for every task) with the script's recipe for the task (AdamW 1e-3, warm-up
   10 %, cosine; batch 16 and weight decay 0.01, Pathfinder batch 128 without decay), seed ``--seed``, on the
   task's data generated once into ``<output>/data/<task>`` (the generators' defaults, ``--data_seed`` 0), with
   the task's preset (``xformer-lra-<task>``: the same model for every entry) and each entry's settings at the
   task length (``hf_xcv.attention.attention_kwargs_at_length``). Reported: accuracy on the test split (1,000
   generated samples; the digits' 179). ``--jobs N`` trains N cells at once (each with its share of the
   threads); the phase's timing is not used.
2. **Cost** (phase ``time``, always one cell at a time, after every accuracy cell): in a fresh process, the same
   model on one training batch of the task: peak memory of a training step (forward, backward, AdamW step) as
   the growth of the resident set, measured as benchmarks/bench_attention.py measures it (glibc mapping each
   tensor on its own, peak-RSS counter reset after a warm-up step), then the median time of ``--repeats``
   steps -> training steps per second. Use a quiet machine for this phase.

Resumable: every cell writes ``<output>/cells/<task>/<row>.json`` when a phase of it ends, and a rerun skips
what is there (``--retry-failed`` reruns the cells that failed; ``--retime`` measures every cost cell again and
keeps the accuracy; delete a file to rerun a cell). A stopped
training run resumes from its last checkpoint. ``--report-only`` rebuilds the table and the plot from the
stored cells.

The report (printed, and written to ``<output>/report.md``): LRA Table 1's layout (accuracy per task and the
average, chance level alongside), then per task the training steps per second and peak MiB with ratios to eager
full attention (LRA Table 2's layout). Where the paper has the entry, its accuracy is shown beside ours:
``ours (LRA)``; LRA's tasks are far larger (2K-token ListOps, CIFAR-10 instead of digits, 5K-50K steps of
6-layer models), so the comparison is of the ordering, not of the values. The plot
(``<output>/accuracy_vs_speed.png``): mean accuracy over the tasks against mean training steps per second
relative to eager full attention, one point per row.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_attention as cost  # noqa: E402  (RSS measurement and the worker protocol, shared)
import results_file  # noqa: E402  (the commit and date of the run)

TASKS = ("listops", "image", "pathfinder")  # LRA Table 1's order (Text and Retrieval have no offline stand-in)
CHANCE = {"listops": 10.0, "image": 10.0, "pathfinder": 50.0}
# Optimizer steps per cell: each task with the training script's recipe for it (the recipe of its preset,
# xformer-lra-<task>: batches of 16 for ListOps and the digits, LRA's Pathfinder recipe of large batches, 128,
# without weight decay).
DEFAULT_STEPS = {"listops": 400, "image": 400, "pathfinder": 3000}
QUICK_STEPS = 4
# The tasks at the scale of a background run on 2 CPU cores (accuracy phase with --jobs 2: ~1 hour for ListOps and
# the digits, about 4.3 hours for Pathfinder's 3,000 steps of batch 128):
# 256-token pixel sequences and ListOps up to 384 tokens. The digits are 8x8 scans, so 16x16 loses nothing
# against 32x32; LRA's lengths (32x32 = 1,024 pixels, ListOps up to 2K) are --data_settings away.
BENCH_SETTINGS = {
    "listops": {"min_length": 192, "max_length": 384},
    "image": {"image_size": 16},
    "pathfinder": {"image_size": 16, "path_length": 8, "num_distractors": 0, "gap_length": 0, "path_intensity": 128},
}
# Data of --quick (a smoke test): a few short samples per split.
QUICK_SETTINGS = {
    "listops": {"num_train": 64, "num_validation": 16, "num_test": 16, "min_length": 24, "max_length": 48},
    "pathfinder": {
        "num_train": 64,
        "num_validation": 16,
        "num_test": 16,
        "image_size": 12,
        "path_length": 6,
        "num_distractors": 0,
    },
    "image": {"image_size": 8},
}

# LRA Table 1 (Tay et al. 2021; ../shared/research/xformers.md section 3.1): the paper's name and its accuracy
# on the tasks that have a stand-in here. Its Sparse Transformer row is shown beside both sparse patterns.
LRA_NAMES = {
    "full": "Transformer",
    "local": "Local Attention",
    "sparse_strided": "Sparse Trans.",
    "sparse_fixed": "Sparse Trans.",
    "longformer": "Longformer",
    "linformer": "Linformer",
    "lsh": "Reformer",
    "sinkhorn": "Sinkhorn Trans.",
    "synthesizer_dense": "Synthesizer",
    "bigbird": "BigBird",
    "linear": "Linear Trans.",
    "performer": "Performer",
}
LRA_ACCURACY = {  # ListOps, Image, Pathfinder
    "Transformer": (36.37, 42.44, 71.40),
    "Local Attention": (15.82, 41.46, 66.63),
    "Sparse Trans.": (17.07, 44.24, 71.71),
    "Longformer": (35.63, 42.22, 69.71),
    "Linformer": (35.70, 38.56, 76.34),
    "Reformer": (37.27, 38.07, 68.50),
    "Sinkhorn Trans.": (33.67, 41.23, 67.45),
    "Synthesizer": (36.99, 41.61, 69.45),
    "BigBird": (36.05, 40.83, 74.87),
    "Linear Trans.": (16.13, 42.34, 75.30),
    "Performer": (18.01, 42.77, 77.05),
}


def sequence_entries() -> list[str]:
    """Every registry entry a bidirectional sequence model can use: not causal-only, no 2-D grid."""
    from hf_xcv.cli.train_lra import bidirectional_entries

    return bidirectional_entries()


def published(row: cost.Row, task: str) -> float | None:
    name = LRA_NAMES.get(row.entry)
    return LRA_ACCURACY[name][TASKS.index(task)] if name else None


# ---- the cells ----


def cell_path(output: Path, task: str, row: cost.Row) -> Path:
    return output / "cells" / task / f"{row.key.replace(':', '-')}.json"


def load_cell(output: Path, task: str, row: cost.Row) -> dict[str, Any]:
    path = cell_path(output, task, row)
    return json.loads(path.read_text()) if path.exists() else {}


def save_cell(output: Path, task: str, row: cost.Row, cell: dict[str, Any]) -> None:
    """Written whole or not at all (a temporary file moved into place)."""
    path = cell_path(output, task, row)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(cell, indent=1, sort_keys=True) + "\n")
    os.replace(staging, path)


def data_settings(task: str, quick: bool, overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The generator's settings of ``task`` in this benchmark (``--data_settings`` over the defaults)."""
    return {**(QUICK_SETTINGS if quick else BENCH_SETTINGS)[task], **(overrides or {}).get(task, {})}


def data_dir(output: Path, task: str, settings: dict[str, Any]) -> Path:
    """The task's data on disk, generated on first use (every cell of the task reads this one copy); the settings
    it was made with are stored beside it, and other settings are refused (they would mix two datasets)."""
    path, record = output / "data" / task, output / "data" / f"{task}.json"
    if (path / "dataset_dict.json").exists():
        made_with = json.loads(record.read_text()) if record.exists() else None
        if made_with != settings:
            raise ValueError(
                f"{path} was generated with {made_with}, not {settings}: use another --output or delete the folder "
                "(and the cells made from it)"
            )
        return path
    from hf_xcv.data.lra import load_lra_dataset

    data = load_lra_dataset(task, seed=0, **settings)
    staging = path.with_name(path.name + ".tmp")
    for leftover in (staging, path):  # of a run killed while saving
        shutil.rmtree(leftover, ignore_errors=True)
    data.save_to_disk(str(staging))
    record.write_text(json.dumps(settings, sort_keys=True))
    os.replace(staging, path)
    return path


def steps_for(task: str, args: argparse.Namespace) -> int:
    """The optimizer steps of ``task``'s cells: ``--steps``, else ``--quick``'s, else the task's default."""
    return args.steps or (QUICK_STEPS if args.quick else DEFAULT_STEPS[task])


def tasks_of(cells: list[tuple[str, cost.Row]]) -> list[str]:
    return list(dict.fromkeys(task for task, _ in cells))


def train_command(task: str, row: cost.Row, data: Path, run_dir: Path, steps: int, seed: int) -> list[str]:
    command = [sys.executable, "-m", "hf_xcv.train", "lra", "--task", task, "--dataset", str(data)]
    command += ["--attention_type", row.entry, "--output_dir", str(run_dir), "--max_train_steps", str(steps)]
    command += ["--seed", str(seed), "--disable_tqdm", "--checkpointing_steps", str(max(50, steps // 4))]
    if row.backend:
        command += ["--attn_implementation", row.backend]
    if (run_dir / "checkpoints" / "LATEST").exists():
        command += ["--resume_from_checkpoint", "latest"]
    elif run_dir.exists():
        command += ["--overwrite_output_dir"]  # a run stopped before its first checkpoint
    return command


def run_training(task: str, row: cost.Row, output: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Phase ``train`` of one cell: the training script in its own process; its accuracy and command."""
    from hf_xcv.training.checkpointing import final_complete

    run_dir = output / "runs" / task / row.key.replace(":", "-")
    # A finished run of other settings (a stale cell): start afresh. Finished means the whole final folder (config,
    # weights, a results file that parses): a results file alone (an older run killed while moving its final files
    # in) is no evidence, and the run's checkpoints are resumed instead.
    if final_complete(run_dir):
        shutil.rmtree(run_dir)
    data = data_dir(output, task, data_settings(task, args.quick, args.data_settings))
    command = train_command(task, row, data, run_dir, steps_for(task, args), args.seed)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.train_threads))
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "detail": f"no result within --timeout {args.timeout:.0f} s"}
    results_file = run_dir / "all_results.json"
    if done.returncode != 0 or not final_complete(run_dir):
        status = "killed" if done.returncode < 0 else "error"
        tail = (done.stderr.strip().splitlines() or [""])[-1]
        return {"status": status, "detail": f"exit code {done.returncode}: {tail}"}
    results = json.loads(results_file.read_text())
    shown = [part if part != sys.executable else "python" for part in command]
    return {
        "status": "ok",
        "test_accuracy": 100 * results["test"]["accuracy"],
        "validation_accuracy": 100 * results["validation"]["accuracy"],
        "test_samples": results["test"]["num_samples"],
        "steps": results["completed_steps"],
        "batch_size": results["training"].get("per_device_train_batch_size"),
        "seed": args.seed,
        "wall_seconds": time.perf_counter() - start,
        "threads": args.train_threads,
        "command": " ".join(shown),
        "data_settings": data_settings(task, args.quick, args.data_settings),
    }


def measure_cost(task: str, row: cost.Row, data: Path, repeats: int, batch_size: int) -> dict[str, Any]:
    """Phase ``time`` in this (fresh) process: the task's model on one training batch; RSS growth of one training
    step (forward, backward, AdamW) after a warm-up step, then the median time of ``repeats`` steps."""
    import torch
    from datasets import load_from_disk

    from hf_xcv.cli.train_lra import ModelArguments, build_config, collate, sequence_shape
    from hf_xcv.models.xformer import XFormerForSequenceClassification

    libc = cost._glibc()
    cost._map_tensors_alone(libc)
    torch.manual_seed(0)
    splits = load_from_disk(str(data))
    length, vocab = sequence_shape(splits)
    model_args = ModelArguments(attention_type=row.entry, attn_implementation=row.backend or "sdpa")
    config = build_config(model_args, task, length, splits["train"].features["label"].names, vocab)
    model = XFormerForSequenceClassification(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train = splits["train"].with_format("numpy")
    batch = collate([train[i] for i in range(min(batch_size, len(train)))])

    def step() -> None:
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up: the optimizer's state and one-time initialisation stay out of the measurement
    gc.collect()
    if libc is not None:
        libc.malloc_trim(0)
    before = cost._status_kib("VmRSS")
    cost._reset_peak_rss()
    step()
    peak = cost._status_kib("VmHWM")
    cost._allocate_as_usual(libc)
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {
        "status": "ok",
        "steps_per_second": 1 / statistics.median(times),
        "mib": max(peak - before, 4) / 1024,
        "times_ms": [1000 * t for t in times],
        "batch_size": batch["input_ids"].shape[0],
        "sequence_length": length,
        "threads": torch.get_num_threads(),
        "load": os.getloadavg()[0],
    }


def run_cost(task: str, row: cost.Row, output: Path, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", task, row.key]
    command += ["--output", str(output), "--repeats", str(args.repeats)] + (["--quick"] if args.quick else [])
    command += ["--data_settings", json.dumps(args.data_settings)] if args.data_settings else []
    command += ["--threads", str(args.threads)] if args.threads else []
    return cost.worker_result(command, args.timeout)


def worker_main(task: str, key: str, args: argparse.Namespace) -> None:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        data = data_dir(args.output, task, data_settings(task, args.quick, args.data_settings))
        result = measure_cost(task, cost.Row.from_key(key), data, args.repeats, batch_size=16)
    except Exception as error:  # one failed cell, reported in the table
        result = {"status": "error", "detail": f"{type(error).__name__}: {error}"}
    print("RESULT " + json.dumps(result), flush=True)


def pending(
    output: Path, cells: list[tuple[str, cost.Row]], phase: str, retry: bool, budget: dict[str, Any] | None = None
) -> list[tuple[str, cost.Row]]:
    """The cells whose ``phase`` has no stored result, failed (with ``retry``), or (``train``) was trained with
    another ``budget`` (steps, seed): a rerun with other settings does not mix old cells into the table."""
    todo = []
    for task, row in cells:
        done = load_cell(output, task, row).get(phase)
        stale = done is not None and done.get("status") == "ok" and budget is not None
        stale = stale and any(done.get(key) != value for key, value in budget.items())
        if done is None or stale or (retry and done.get("status") != "ok"):
            todo.append((task, row))
    return todo


def to_run(phase: str, cells: list[tuple[str, cost.Row]], args: argparse.Namespace) -> list[tuple[str, cost.Row]]:
    """``pending`` cells of ``phase``; a training cell is also run again when it was trained with another budget
    than its task's (``steps_for``, ``--seed``)."""
    if phase == "time" and getattr(args, "retime", False):
        return list(cells)  # the attention implementations changed: every cost cell is measured again
    if phase != "train":
        return pending(args.output, cells, phase, args.retry_failed)
    todo = []
    for task in tasks_of(cells):
        budget = {"steps": steps_for(task, args), "seed": args.seed}
        todo += pending(args.output, [cell for cell in cells if cell[0] == task], phase, args.retry_failed, budget)
    return todo


def run_phase(phase: str, cells: list[tuple[str, cost.Row]], args: argparse.Namespace, jobs: int) -> None:
    """Run ``phase`` for every cell that has no result of it yet, ``jobs`` at a time; each result stored at once."""
    todo = to_run(phase, cells, args)
    run = run_training if phase == "train" else run_cost
    print(f"phase {phase}: {len(todo)} of {len(cells)} cells to run", flush=True)

    def one(task: str, row: cost.Row) -> None:
        start = time.perf_counter()
        result = run(task, row, args.output, args)
        cell = load_cell(args.output, task, row)  # the other phase's result, if any
        cell.update({"task": task, "row": row.key, phase: result})
        save_cell(args.output, task, row, cell)
        print(f"  {phase} {task:>10} {row.label:>20}: {summary(phase, result)} ({time.perf_counter() - start:.0f} s)")

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in [pool.submit(one, task, row) for task, row in todo]:
            future.result()


def summary(phase: str, result: dict[str, Any]) -> str:
    if result["status"] != "ok":
        return f"{result['status']}: {result.get('detail', '')}"
    if phase == "train":
        return f"test accuracy {result['test_accuracy']:.2f} % after {result['steps']} steps"
    return f"{result['steps_per_second']:.2f} steps/s, {result['mib']:.1f} MiB"


# ---- shortcut baselines: what the simplest rule that ignores the task's structure scores ----


def root_operator_baseline(data: Any) -> float:
    """ListOps: predict the commonest value (on train) of expressions with the same outermost operator; test %."""
    votes: dict[int, dict[int, int]] = {}
    for ids, label in zip(data["train"]["input_ids"], data["train"]["label"]):
        counts = votes.setdefault(ids[0], {})
        counts[label] = counts.get(label, 0) + 1
    best = {root: max(counts, key=counts.get) for root, counts in votes.items()}
    test = data["test"]
    hits = sum(best.get(ids[0]) == label for ids, label in zip(test["input_ids"], test["label"]))
    return 100 * hits / len(test)


def mark_distances(data: Any) -> tuple[list[float], list[int]]:
    """Pathfinder: the distance between the two marks (centres of white 3x3 squares) of every image."""
    import numpy as np

    ids = np.asarray(data["input_ids"], dtype=np.int64)
    side = math.isqrt(ids.shape[1])
    white = ids.reshape(-1, side, side) == 255
    full = white[:, :-2, :-2].copy()  # a 3x3 square of white whose top-left corner is here
    for dy in range(3):
        for dx in range(3):
            full &= white[:, dy : side - 2 + dy, dx : side - 2 + dx]
    distances = []
    for squares in full:
        centres = np.argwhere(squares)
        distances.append(
            float(np.max(np.linalg.norm(centres[:, None] - centres[None], axis=-1))) if len(centres) else 0.0
        )
    return distances, list(data["label"])


def mark_distance_baseline(data: Any) -> float:
    """Pathfinder: the best threshold on the marks' distance (either side, chosen on train), scored on test (%)."""
    distances, labels = mark_distances(data["train"])
    best = (0.0, 0.0, True)
    for threshold in sorted(set(distances)):
        for near in (True, False):
            hits = sum(((d <= threshold) == near) == bool(y) for d, y in zip(distances, labels))
            best = max(best, (hits / len(labels), threshold, near))
    _, threshold, near = best
    distances, labels = mark_distances(data["test"])
    return 100 * sum(((d <= threshold) == near) == bool(y) for d, y in zip(distances, labels)) / len(labels)


BASELINES = {
    "listops": ("the outermost operator's commonest value", root_operator_baseline),
    "pathfinder": ("a threshold on the distance between the marks", mark_distance_baseline),
}


def shortcut_baselines(output: Path) -> dict[str, dict[str, Any]]:
    """task -> {"rule", "accuracy", "data_settings"} for the tasks with a baseline, computed from the generated data
    when it is there (and stored in ``<output>/baselines.json``, so that ``--report-only`` needs no data)."""
    path = output / "baselines.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    for task, (rule, score) in BASELINES.items():
        data, record = output / "data" / task, output / "data" / f"{task}.json"
        if not (data / "dataset_dict.json").exists() or not record.exists():
            continue
        settings = json.loads(record.read_text())
        if stored.get(task, {}).get("data_settings") != settings:
            from datasets import load_from_disk

            stored[task] = {"rule": rule, "accuracy": score(load_from_disk(str(data))), "data_settings": settings}
    if stored:
        path.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    return stored


# ---- the report ----


def stored_cells(output: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(task, row key) -> the stored cell, for every file under ``<output>/cells``."""
    cells = {}
    for path in sorted((output / "cells").glob("*/*.json")):
        cell = json.loads(path.read_text())
        cells[(cell["task"], cell["row"])] = cell
    return cells


def _ok(cell: dict[str, Any] | None, phase: str) -> dict[str, Any] | None:
    part = (cell or {}).get(phase)
    return part if part and part.get("status") == "ok" else None


def rows_in(cells: dict[tuple[str, str], dict[str, Any]]) -> list[cost.Row]:
    keys = {key for _, key in cells}
    return [row for row in cost.rows_for(sorted({cost.Row.from_key(k).entry for k in keys})) if row.key in keys]


def tasks_in(cells: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    present = {task for task, _ in cells}
    return [task for task in TASKS if task in present]


def accuracy(cells: dict, task: str, row: cost.Row) -> float | None:
    part = _ok(cells.get((task, row.key)), "train")
    return part["test_accuracy"] if part else None


def mean_accuracy(cells: dict, tasks: list[str], row: cost.Row) -> float | None:
    values = [accuracy(cells, task, row) for task in tasks]
    return None if None in values or not values else sum(values) / len(values)


def relative_speed(cells: dict, tasks: list[str], row: cost.Row) -> float | None:
    """Geometric mean over the tasks of steps/s relative to eager full attention."""
    ratios = []
    for task in tasks:
        mine, ref = _ok(cells.get((task, row.key)), "time"), _ok(cells.get((task, cost.EAGER.key)), "time")
        if not mine or not ref:
            return None
        ratios.append(mine["steps_per_second"] / ref["steps_per_second"])
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None


def _status(cell: dict[str, Any] | None, phase: str) -> str:
    part = (cell or {}).get(phase)
    return part["status"] if part else "-"


def accuracy_table(cells: dict, rows: list[cost.Row], tasks: list[str], baselines: dict | None = None) -> str:
    """LRA Table 1's layout: test accuracy (%) per task and the mean, ``ours (LRA)`` where the paper has it."""
    header = ["model", *tasks, "avg", "LRA name"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        values = []
        for task in tasks:
            value, paper = accuracy(cells, task, row), published(row, task)
            text = f"{value:.2f}" if value is not None else _status(cells.get((task, row.key)), "train")
            values.append(text + (f" ({paper:.2f})" if paper is not None else ""))
        mean = mean_accuracy(cells, tasks, row)
        name = LRA_NAMES.get(row.entry)
        papers = [published(row, task) for task in tasks]
        paper_mean = f" ({sum(papers) / len(papers):.2f})" if name else ""
        values.append((f"{mean:.2f}" if mean is not None else "-") + paper_mean)
        lines.append("| " + " | ".join([row.label, *values, name or "-"]) + " |")
    lines.append("| " + " | ".join(["chance", *(f"{CHANCE[t]:.2f}" for t in tasks), "", ""]) + " |")
    if baselines:
        values = [f"{baselines[t]['accuracy']:.2f}" if t in baselines else "-" for t in tasks]
        lines.append("| " + " | ".join(["shortcut baseline", *values, "", ""]) + " |")
    return "\n".join(lines)


def cost_table(cells: dict, rows: list[cost.Row], tasks: list[str]) -> str:
    """LRA Table 2's layout: training steps per second (speed-up over eager full) and peak MiB (ratio) per task."""
    header = ["model"] + [f"{t} steps/s" for t in tasks] + [f"{t} MiB" for t in tasks]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        speeds, memories = [], []
        for task in tasks:
            mine, ref = _ok(cells.get((task, row.key)), "time"), _ok(cells.get((task, cost.EAGER.key)), "time")
            if not mine:
                status = _status(cells.get((task, row.key)), "time")
                speeds.append(status)
                memories.append(status)
                continue
            speed, memory = mine["steps_per_second"], mine["mib"]
            speeds.append(f"{cost._number(speed)} ({cost._ratio(speed / ref['steps_per_second'] if ref else None)})")
            memories.append(f"{cost._number(memory)} ({cost._ratio(memory / ref['mib'] if ref else None)})")
        lines.append("| " + " | ".join([row.label, *speeds, *memories]) + " |")
    return "\n".join(lines)


def failures(cells: dict) -> list[str]:
    lines = []
    for (task, key), cell in sorted(cells.items()):
        for phase in ("train", "time"):
            part = cell.get(phase)
            if part and part["status"] != "ok":
                lines.append(f"- {task} / {key} ({phase}): {part['status']}: {part.get('detail', '')}")
    return lines


def settings_lines(cells: dict, tasks: list[str]) -> list[str]:
    lines = []
    for task in tasks:
        trained = [_ok(cell, "train") for (t, _), cell in cells.items() if t == task]
        timed = [_ok(cell, "time") for (t, _), cell in cells.items() if t == task]
        steps = sorted({part["steps"] for part in trained if part})
        seeds = sorted({part["seed"] for part in trained if part})
        batches = sorted({part["batch_size"] for part in trained if part and part.get("batch_size")})
        length = sorted({part["sequence_length"] for part in timed if part})
        made = sorted({json.dumps(part.get("data_settings"), sort_keys=True) for part in trained if part})
        lines.append(
            f"- {task}: length {length or '?'}, steps {steps}, batch {batches or '?'}, seeds {seeds}, "
            f"data {', '.join(made) or '?'}"
        )
    return lines


def build_report(cells: dict, header: list[str] | None = None, baselines: dict | None = None) -> str:
    rows, tasks = rows_in(cells), tasks_in(cells)
    example = next((part["command"] for cell in cells.values() if (part := _ok(cell, "train"))), None)
    parts = [
        *(f"- {line}" for line in header or []),
        "",
        "Test accuracy (%) after the same number of steps for every row; LRA's published accuracy (Table 1 of Tay "
        "et al. 2021, 2K-token ListOps, grey CIFAR-10, 32x32 Pathfinder, large models) in brackets where the paper "
        "has the entry; avg = mean over these tasks:",
        "",
        accuracy_table(cells, rows, tasks, baselines),
        "",
        *(
            f"Shortcut baseline of {task}: {entry['rule']} ({entry['accuracy']:.2f} % on test)."
            for task, entry in sorted((baselines or {}).items())
            if task in tasks
        ),
        "",
        "Training cost at the task length, batch 16: optimizer steps per second (speed-up over eager full attention) "
        "and peak memory of a step in MiB (ratio to eager full attention):",
        "",
        cost_table(cells, rows, tasks),
        "",
        "Per task (what every row shares):",
        *settings_lines(cells, tasks),
        *([f"- a cell's command: `{example}`"] if example else []),
        "",
        "Cells that failed:" if failures(cells) else "Every stored cell succeeded.",
        *failures(cells),
    ]
    return "\n".join(parts)


def plot(cells: dict, path: Path) -> bool:
    """Mean accuracy against relative speed, one point per row; False (and no file) when nothing is complete."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, tasks = rows_in(cells), tasks_in(cells)
    points = [(row, relative_speed(cells, tasks, row), mean_accuracy(cells, tasks, row)) for row in rows]
    points = [(row, x, y) for row, x, y in points if x is not None and y is not None]
    if not points:
        return False
    figure, axes = plt.subplots(figsize=(8, 5.5), dpi=110)
    for row, x, y in points:
        colour = "tab:red" if row.entry == "full" else "tab:blue"
        axes.scatter([x], [y], color=colour, s=28, zorder=3)
        axes.annotate(row.label, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    chance = sum(CHANCE[t] for t in tasks) / len(tasks)
    axes.axhline(chance, color="grey", linestyle=":", linewidth=1, label=f"chance ({chance:.1f} %)")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("training steps per second relative to eager full attention (geometric mean over tasks)")
    axes.set_ylabel(f"mean test accuracy over {', '.join(tasks)} (%)")
    axes.set_title("hf_xcv LRA-style benchmark: accuracy against speed")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=str, default=",".join(TASKS))
    parser.add_argument("--entries", type=str, default=None, help="registry names (default: every sequence entry)")
    parser.add_argument("--steps", type=int, default=None, help=f"optimizer steps of every cell ({DEFAULT_STEPS})")
    parser.add_argument("--seed", type=int, default=0, help="training seed of every cell")
    parser.add_argument(
        "--data_settings", type=json.loads, default=None,
        help='generator settings per task over the benchmark\'s, JSON: \'{"image": {"image_size": 32}}\'',
    )  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1, help="accuracy cells trained at once")
    parser.add_argument(
        "--threads", type=int, default=None, help="threads of the cost phase, and shared by --jobs in the other"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per cost cell")
    parser.add_argument(  # Pathfinder's blocked entries train for 57-84 min on one CPU thread
        "--timeout", type=float, default=14400.0, help="seconds per cell and phase (--retry-failed resumes one)"
    )
    parser.add_argument("--output", type=Path, default=HERE / "results" / "lra")
    parser.add_argument("--retry-failed", action="store_true", help="rerun cells whose phase failed")
    parser.add_argument(
        "--retime",
        action="store_true",
        help="measure every cost cell again (after a change to the implementations); trained cells are kept",
    )
    parser.add_argument("--report-only", action="store_true", help="table and plot from the stored cells")
    parser.add_argument("--quick", action="store_true", help=f"tiny data and {QUICK_STEPS} steps (a smoke test)")
    parser.add_argument("--worker", nargs=2, metavar=("TASK", "ROW"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.output = args.output.resolve()
    if args.worker:
        worker_main(args.worker[0], args.worker[1], args)
        return
    if args.jobs < 1 or (args.steps is not None and args.steps < 1):
        parser.error(f"--jobs and --steps must be >= 1, got --jobs {args.jobs} --steps {args.steps}")
    args.train_threads = max(1, (args.threads or os.cpu_count() or 1) // args.jobs)
    tasks = [task for task in args.tasks.split(",") if task]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        parser.error(f"--tasks has unknown names {unknown}; known: {list(TASKS)}")
    entries = sequence_entries()
    if args.entries:
        chosen = [name for name in args.entries.split(",") if name]
        if sorted(set(chosen) - set(entries)):
            parser.error(f"--entries must be among the sequence entries {entries}, got {chosen}")
        entries = chosen
    header = cost.machine_lines(args.threads)[:2] + results_file.run_lines() + [f"output: {args.output}"]
    if not args.report_only:
        print("\n".join(header), flush=True)
        cells = [(task, row) for task in tasks for row in cost.rows_for(entries)]
        start = time.perf_counter()
        for task in tasks:  # here, before cells run side by side and would make it twice
            data_dir(args.output, task, data_settings(task, args.quick, args.data_settings))
        run_phase("train", cells, args, args.jobs)
        run_phase("time", cells, args, 1)
        header.append(f"this run: {(time.perf_counter() - start) / 60:.1f} min")
    stored = stored_cells(args.output)
    if not stored:
        parser.error(f"no stored cells under {args.output / 'cells'}: run the benchmark first (without --report-only)")
    text = build_report(stored, header, shortcut_baselines(args.output))
    print("\n" + text)
    (args.output / "report.md").write_text(
        f"<!-- written by benchmarks/bench_lra.py: rerun it to replace this file -->\n{text}\n"
    )
    if plot(stored, args.output / "accuracy_vs_speed.png"):
        print(f"plot: {args.output / 'accuracy_vs_speed.png'}")


if __name__ == "__main__":
    main()
