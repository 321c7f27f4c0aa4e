"""Runs a training script's ``main`` in each process of a multi-process run, ending one of the ways a run
ends (finished, ``--stop_after_steps``, an error in a training step), and checks after each that nothing
distributed is left alive. Started by tests/training/test_teardown.py under ``accelerate launch``:
``teardown_worker.py OUT TASK ENDING``; each process prints one ``TEARDOWN {json}`` line."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from hf_xcv.cli import train_image_classification, train_object_detection
from hf_xcv.training import runner

SCRIPTS = {
    "image-classification": (
        train_image_classification,
        ["--max_train_samples", "64", "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "64",
         "--eval_every_epochs", "0", "--disable_tqdm", "--preset", "vit-test-tiny"],
    ),
    "object-detection": (
        train_object_detection,
        ["--shapes_train_size", "8", "--per_device_train_batch_size", "2", "--eval_every_epochs", "0",
         "--disable_tqdm", "--preset", "detr-test-tiny", "--shortest_edge", "32", "--longest_edge", "48",
         "--pictures", "0"],
    ),
}  # fmt: skip
ENDINGS = {
    "finished": ["--max_train_steps", "2"],
    "stopped": ["--max_train_steps", "4", "--stop_after_steps", "1", "--checkpointing_steps", "1"],
    "failed": ["--max_train_steps", "4"],
}


class InjectedFailure(RuntimeError):
    pass


def fail_at_second_step(real):
    calls = []

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise InjectedFailure("a training step failed")
        return real(*args, **kwargs)

    return step


def main(out: Path, task: str, ending: str) -> None:
    script, quick = SCRIPTS[task]
    if ending == "failed":
        runner._optimizer_step = fail_at_second_step(runner._optimizer_step)
    try:
        outcome = "returned" if script.main(["--output_dir", str(out), *quick, *ENDINGS[ending]]) else "stopped"
    except InjectedFailure:
        outcome = "raised"
    gc.collect()
    alive = sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
    from accelerate.state import PartialState

    report = {"task": task, "ending": ending, "outcome": outcome, "group": dist.is_initialized(), "ddp_alive": alive,
              "state_reset": not PartialState._shared_state}  # fmt: skip
    print("TEARDOWN " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
