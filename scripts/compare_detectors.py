"""Side by side: the held-out test mAP that trained detectors' model cards record, e.g. DETR against Deformable DETR
trained on the same scenes for the same number of steps.

    python scripts/compare_detectors.py outputs/detr-shapes outputs/deformable-detr-shapes \
        [--output outputs/detector-comparison.json]

Prints one row per run folder (model type, parameters, optimizer steps, learning rates, test mAP, mAP@50, mAP@75)
and writes the same rows as JSON (``--output``; beside the first folder without it). The numbers are the ones the
training run measured and recorded in the card's model-index (``scripts/detect_samples.py`` checks that a reload
in a fresh process scores the same).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from reloading import recorded_metrics
from transformers import AutoModelForObjectDetection

METRICS = ("map", "map_50", "map_75")


def run_row(folder: Path) -> dict[str, Any]:
    """What one run folder records: model, size, steps, rates and the card's test metrics."""
    config = json.loads((folder / "config.json").read_text())
    train = json.loads((folder / "xcv_run.json").read_text())["train"]
    results = json.loads((folder / "all_results.json").read_text())
    metrics = recorded_metrics(folder)
    row = {
        "run": folder.name,
        "model_type": config["model_type"],
        "parameters": AutoModelForObjectDetection.from_pretrained(folder).num_parameters(),
        "steps": results["completed_steps"],
        "learning_rate": train["learning_rate"],
        "lr_backbone": train["lr_backbone"],
    }
    return row | {metric: metrics[metric] for metric in METRICS}


def table(rows: list[dict[str, Any]]) -> str:
    header = ["run", "model_type", "parameters", "steps", "lr", "lr_backbone", "test mAP", "mAP@50", "mAP@75"]
    cells = [
        [r["run"], r["model_type"], f"{r['parameters']:,}", str(r["steps"]), f"{r['learning_rate']:g}",
         f"{r['lr_backbone']:g}", *(f"{r[m]:.4f}" for m in METRICS)]
        for r in rows
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    lines = [header, ["-" * w for w in widths], *cells]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", type=Path, nargs="+", help="trained run folders (DETR first, say)")
    parser.add_argument("--output", type=Path, help="the JSON written (default: detector-comparison.json beside)")
    args = parser.parse_args()
    rows = [run_row(folder) for folder in args.folders]
    print(table(rows))
    if len({row["steps"] for row in rows}) > 1:
        print("note: the runs trained for different numbers of steps")
    output = args.output or args.folders[0].parent / "detector-comparison.json"
    output.write_text(json.dumps(rows, indent=2))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
