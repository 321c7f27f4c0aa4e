"""Part 7 of the main job: reload the ListOps classifiers of the demo in a fresh process through
AutoModelForSequenceClassification, score the held-out test expressions, and fail when the reloaded score differs
from the model card or full attention is not clearly above chance (twice the 10 % of ten balanced classes).

    python scripts/check_lra.py --task_settings '{"min_length": 192, "max_length": 384}' \
        outputs/lra-listops-full outputs/lra-listops-performer

The test split is generated again with the training run's settings (the generators are deterministic).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from reloading import recorded_metrics
from transformers import AutoModelForSequenceClassification

from hf_xcv.cli.train_lra import DataArguments, collate, load_data
from hf_xcv.data.lra import decode_listops

CHANCE = 0.10


def score(folder: Path, test) -> tuple[float, torch.nn.Module]:
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(test), 64):  # the training script's evaluation batches
            batch = collate([test[i] for i in range(start, min(start + 64, len(test)))])
            labels = batch.pop("labels")
            correct += (model(**batch).logits.argmax(-1) == labels).sum().item()
    return correct / len(test), model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--task_settings", default=None, help="the generator settings of the training runs")
    args = parser.parse_args()
    # each split has its own random stream: one training sample gives the same test split
    settings = {**json.loads(args.task_settings or "{}"), "num_train": 1, "num_validation": 1}
    test = load_data(DataArguments(task="listops", task_settings=json.dumps(settings)))["test"].with_format("numpy")
    failures = []
    for name in args.folders:
        folder = Path(name)
        accuracy, model = score(folder, test)
        card = recorded_metrics(folder)["accuracy"]
        print(f"{folder.name}: {model.config.attention_type} attention, test accuracy {accuracy:.4f} (card {card:.4f})")
        if abs(accuracy - card) > 1.5 / len(test):  # one near-tie may flip with another batch
            failures.append(f"{folder}: the reloaded model scores {accuracy:.4f}, the card says {card:.4f}")
        if model.config.attention_type == "full" and accuracy < 2 * CHANCE:
            failures.append(f"{folder}: full attention at {accuracy:.4f} is not clearly above chance ({CHANCE})")
    row = test[0]
    expression = " ".join(decode_listops(row["input_ids"].tolist()))
    batch = collate([row])
    batch.pop("labels")
    predicted = model(**batch).logits.argmax(-1).item()
    print(f"a test expression ({len(expression.split())} symbols): {expression[:120]} ...")
    print(f"  value {int(row['label'])}, predicted by {model.config.attention_type}: {predicted}")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
