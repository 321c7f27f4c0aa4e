"""Every training program as a user starts it: ``accelerate launch --config_file examples/accelerate/<cfg>.yaml
-m hf_xcv.train <task>``, two gloo processes on the CPU. FSDP2 (sharded weights, gradients, optimizer state and
checkpoints) trains as DDP does: same loss at every step, same final weights (atol 1e-5); one process on the whole
batch trains as two on its halves; two machines of one process each (the multi-node launch of docs/distributed.md)
train as one machine of two; a run stopped after its last sharded checkpoint and resumed ends with the weights of an
uninterrupted one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO_ROOT, check, free_port
from safetensors.torch import load_file

CONFIGS = REPO_ROOT / "examples" / "accelerate"
COMMON = ["--disable_tqdm", "--logging_steps", "1", "--checkpointing_steps", "2"]
# The smallest runs of each program (see tests/training/test_train_*.py). Image classification shifts no image
# (--max_shift 0) and its tiny ViT drops nothing: with nothing drawn at random (each process draws its own), one
# process on the whole batch computes what two compute on its halves.
# Translation trains at a constant 1e-4 instead of the paper's schedule (0.125 at this size): keys' biases get no
# gradient but rounding noise, which Adam (eps 1e-9) turns into steps of the learning rate's size whichever way
# the processes sum it; at 1e-4 the weights still move 30 times the tolerance.
TASKS = {
    "image-classification": ["--preset", "vit-test-tiny", "--max_train_samples", "64", "--per_device_train_batch_size",
                             "8", "--max_shift", "0", "--eval_every_epochs", "0", "--max_train_steps", "4"],
    "object-detection": ["--preset", "detr-test-tiny", "--shapes_train_size", "16", "--per_device_train_batch_size",
                         "4", "--shortest_edge", "48", "--longest_edge", "64", "--eval_every_epochs", "0",
                         "--pictures", "1", "--max_train_steps", "3"],
    "image-restoration": ["--preset", "ttsr-test-tiny", "--crop_size", "32", "--per_device_train_batch_size", "2",
                          "--eval_every_epochs", "0", "--pictures", "1", "--max_train_steps", "3"],
    "translation": ["--preset", "transformer-test-tiny", "--train_size", "96", "--validation_size", "8", "--test_size",
                    "9", "--tokenizer_vocab_size", "300", "--per_device_train_batch_size", "16",
                    "--per_device_eval_batch_size", "4", "--max_new_tokens", "4", "--num_beams", "2",
                    "--lr_scheduler_type", "constant", "--learning_rate", "1e-4", "--max_train_steps", "3"],
    "lra": ["--task", "image", "--task_settings", "image_size=8", "--per_device_train_batch_size", "8",
            "--per_device_eval_batch_size", "256", "--max_train_steps", "3"],
}  # fmt: skip


def command(
    out: Path, task: str, args: list[str], config: str | None, processes: int = 2, where: list[str] | None = None
) -> list[str]:
    """``accelerate launch [--config_file examples/accelerate/<config>.yaml] --num_processes N <where> -m
    hf_xcv.train <task> --output_dir OUT <args>``; ``where``: the machine options, by default a free port here."""
    where = ["--main_process_port", str(free_port())] if where is None else where
    config_file = ["--config_file", str(CONFIGS / f"{config}.yaml")] if config else []
    launcher = [sys.executable, "-m", "accelerate.commands.launch", *config_file, "--num_processes", str(processes)]
    return [*launcher, *where, "-m", "hf_xcv.train", task, "--output_dir", str(out), *args]


def launch(out: Path, task: str, args: list[str], env: dict[str, str], config: str | None, processes: int = 2):
    return subprocess.run(command(out, task, args, config, processes), env=env, cwd=REPO_ROOT, capture_output=True,
                          text=True)  # fmt: skip


def launch_on_two_machines(out: Path, task: str, args: list[str], env: dict[str, str], config: str) -> None:
    """The multi-node launch of docs/distributed.md, as two "machines" of one process each on this one: each runs
    the same command but for its ``--machine_rank``."""
    where = ["--num_machines", "2", "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port())]
    machines = [
        subprocess.Popen(command(out, task, args, config, 2, [*where, "--machine_rank", str(rank)]), env=env,
                         cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in range(2)
    ]  # fmt: skip
    try:
        outputs = [machine.communicate(timeout=300) for machine in machines]
    finally:
        for machine in machines:
            if machine.poll() is None:  # the other machine failed and this one waits for it
                machine.kill()
    for machine, (stdout, stderr) in zip(machines, outputs):
        check(subprocess.CompletedProcess(machine.args, machine.returncode, stdout, stderr))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return dict(
        os.environ,
        HF_HOME=str(tmp_path_factory.mktemp("hf-home")),
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
        OMP_NUM_THREADS="1",  # two processes share the cores; more threads each only slow them down
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory, env, folder):
    """task, config -> the run folder of two processes (launched once, on first use). Object detection's FSDP2
    run is launched as on two machines of one process each."""
    root, done = tmp_path_factory.mktemp("launched"), {}
    extra = {"image-restoration": ["--dataset", str(folder)]}  # a few small photos: quick to score

    def run(task: str, config: str) -> Path:
        if (task, config) not in done:
            out, args = root / f"{task}-{config}", [*TASKS[task], *extra.get(task, []), *COMMON]
            if (task, config) == ("object-detection", "fsdp2"):  # the docs' multi-node example, on one machine
                launch_on_two_machines(out, task, args, env, config)
            else:
                check(launch(out, task, args, env, config))
            done[task, config] = out
        return done[task, config]

    return run


def losses(run: Path) -> list[tuple[int, float]]:
    lines = (run / "train_log.jsonl").read_text().splitlines()
    return [(row["step"], row["loss"]) for row in map(json.loads, lines)]


def assert_same_training(a: Path, b: Path, atol: float = 1e-5) -> float:
    """Same loss at every step and the same final weights; returns the largest weight difference."""
    (steps_a, loss_a), (steps_b, loss_b) = zip(*losses(a)), zip(*losses(b))
    assert steps_a == steps_b
    torch.testing.assert_close(torch.tensor(loss_a), torch.tensor(loss_b), atol=atol, rtol=0)
    weights_a, weights_b = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        torch.testing.assert_close(weights_a[name], weights_b[name], atol=atol, rtol=0, msg=name)
    return max((weights_a[n].float() - weights_b[n].float()).abs().max().item() for n in weights_a)


def numbers(tree: object) -> list[float]:
    if isinstance(tree, dict):
        return [x for key in sorted(tree) for x in numbers(tree[key])]
    if isinstance(tree, list):
        return [x for item in tree for x in numbers(item)]
    return [float(tree)] if isinstance(tree, (int, float)) and not isinstance(tree, bool) else []


@pytest.mark.parametrize("task", TASKS)
def test_fsdp2_trains_as_ddp_does(runs, task):
    fsdp, ddp = runs(task, "fsdp2"), runs(task, "ddp")
    # FSDP2 indeed: each process wrote its shards of the model and optimizer (DDP writes the whole model)
    assert (fsdp / "checkpoints" / "step-00000002" / "pytorch_model_fsdp_0").is_dir()
    assert (ddp / "checkpoints" / "step-00000002" / "model.safetensors").is_file()
    assert_same_training(fsdp, ddp)
    results = [json.loads((run / "all_results.json").read_text()) for run in (fsdp, ddp)]
    assert results[0]["world_size"] == 2
    assert numbers(results[0]) == pytest.approx(numbers(results[1]), rel=1e-3, abs=1e-3)  # scored alike
    pictures = {"image-restoration": "restorations.png", "object-detection": "detections.png"}
    if task in pictures:
        assert (fsdp / pictures[task]).is_file()  # drawn by the main process alone, from the gathered model


def test_one_process_on_the_whole_batch_trains_as_two_on_its_halves(runs, env, tmp_path):
    args = [*TASKS["image-classification"], *COMMON, "--per_device_train_batch_size", "16"]  # the later one counts
    check(launch(tmp_path / "one", "image-classification", args, env, config=None, processes=1))
    assert_same_training(tmp_path / "one", runs("image-classification", "ddp"))


def test_a_run_resumed_from_a_sharded_checkpoint_ends_as_an_uninterrupted_one(runs, env, tmp_path):
    """Stopped after step 3 (its last checkpoint: step 2, one shard of model and optimizer per process), resumed to
    step 4: the weights and the logged losses of the FSDP2 run that was not stopped."""
    args, out = [*TASKS["image-classification"], *COMMON], tmp_path / "resumed"
    check(launch(out, "image-classification", [*args, "--stop_after_steps", "3"], env, "fsdp2"))
    assert (out / "checkpoints" / "LATEST").read_text().strip() == "step-00000002"
    log = check(launch(out, "image-classification", [*args, "--resume_from_checkpoint", "latest"], env, "fsdp2"))
    assert "resumed from" in log.stdout
    straight = runs("image-classification", "fsdp2")
    assert losses(out) == losses(straight)
    a, b = load_file(straight / "model.safetensors"), load_file(out / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
