"""hf_xcv.training.runner: what both training scripts share, called directly in this process."""

from __future__ import annotations

import json

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from huggingface_hub import ModelCard
from torch.utils.data import DataLoader, TensorDataset

from hf_xcv.training import CheckpointManager, noam_factor
from hf_xcv.training.runner import (
    FINAL_STAGING,
    LoopParts,
    RunArguments,
    build_accelerator,
    build_scheduler,
    card_hyperparameters,
    count_total_steps,
    parse_overrides,
    prepare_run,
    resume_state,
    save_final,
    step_seed,
    train_loop,
)

D_MODEL, WARMUP = 16, 3


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    """Each test builds its own Accelerator; accelerate keeps its state per process."""
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def test_overrides_parse_pairs_and_json():
    assert parse_overrides("hidden_dropout_prob=0.1,pooling=mean,qkv_bias=false") == {
        "hidden_dropout_prob": 0.1,
        "pooling": "mean",
        "qkv_bias": False,
    }
    assert parse_overrides('{"image_size": [32, 32], "attention_kwargs": {}}') == {
        "image_size": [32, 32],
        "attention_kwargs": {},
    }
    assert parse_overrides(None) == {}
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides("dropout")


def test_the_card_records_what_bounded_the_run_and_how_long_it_ran():
    """max_train_steps overrides the epochs: a 60-step run's card shows no num_train_epochs of 50, but the steps and
    the epochs it ran."""
    args = RunArguments(output_dir="run", num_train_epochs=50, max_train_steps=60)
    hyper = card_hyperparameters(args, {"world_size": 2, "completed_steps": 60, "epochs": 7.5})
    assert "num_train_epochs" not in hyper and "output_dir" not in hyper
    assert [hyper[k] for k in ("max_train_steps", "completed_steps", "epochs", "world_size")] == [60, 60, 7.5, 2]
    hyper = card_hyperparameters(RunArguments(output_dir="run", num_train_epochs=3), {"world_size": 1, "epochs": 3.0})
    assert hyper["num_train_epochs"] == 3 and hyper["epochs"] == 3.0 and "max_train_steps" not in hyper


def test_step_seeds_differ_per_micro_batch_and_process():
    seeds = {step_seed(7, micro_step, rank, 2) for micro_step in range(50) for rank in range(2)}
    assert len(seeds) == 100 and all(0 <= seed < 2**63 for seed in seeds)
    assert step_seed(7, 3, 1, 2) != step_seed(8, 3, 1, 2)


def test_total_steps_count_optimizer_steps_of_one_process():
    args = RunArguments(output_dir="x", num_train_epochs=3, gradient_accumulation_steps=2)
    assert count_total_steps(args, batches_per_epoch=9, num_processes=2) == 3 * 3  # 5 batches -> 3 steps
    args.max_train_steps = 4
    assert count_total_steps(args, batches_per_epoch=9, num_processes=2) == 4


def test_schedulers_by_name():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    noam = build_scheduler(optimizer, "noam", WARMUP, 10, d_model=D_MODEL, lr_factor=2.0)
    assert noam.get_last_lr()[0] == pytest.approx(noam_factor(0, D_MODEL, WARMUP, 2.0))
    with pytest.raises(ValueError, match="d_model"):
        build_scheduler(optimizer, "noam", WARMUP, 10)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    linear = build_scheduler(optimizer, "linear", 2, 10)
    for _ in range(6):
        optimizer.step()
        linear.step()
    assert linear.get_last_lr()[0] == pytest.approx(0.5)  # 4 of the 8 decay steps done


def run_toy(out, **overrides) -> tuple[torch.nn.Module, LoopParts, bool, list[tuple[int, bool]]]:
    """A dropout MLP on 20 samples (5 batches an epoch, accumulated in pairs), built afresh as a script would."""
    args = RunArguments(
        output_dir=str(out), max_train_steps=7, per_device_train_batch_size=4, gradient_accumulation_steps=2,
        checkpointing_steps=2, disable_tqdm=True, **overrides,
    )  # fmt: skip
    accelerator = build_accelerator(args)
    prepare_run(accelerator, args)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(20, 4), torch.randn(20, 1))
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
    scheduler = build_scheduler(optimizer, "noam", WARMUP, 7, d_model=D_MODEL)
    loader = DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    ckpt = CheckpointManager(out, accelerator)
    parts = LoopParts(accelerator, model, optimizer, scheduler, loader, ckpt, total_steps=7)
    reports = []
    state, stopped = train_loop(
        parts,
        resume_state(ckpt, args),
        args,
        lambda batch: torch.nn.functional.mse_loss(model(batch[0]), batch[1]),
        lambda state, epoch_ended: reports.append((state.completed_steps, epoch_ended)),
    )
    return model, parts, stopped, reports


def test_a_stopped_and_resumed_loop_ends_where_an_uninterrupted_one_does(tmp_path):
    straight, parts, stopped, reports = run_toy(tmp_path / "straight")
    assert not stopped
    assert reports == [(1, False), (2, False), (3, True), (4, False), (5, False), (6, True), (7, False)]
    # one scheduler step per optimizer step, though every step accumulates two micro-batches
    assert parts.scheduler.get_last_lr()[0] == pytest.approx(noam_factor(7, D_MODEL, WARMUP))
    _, _, stopped, _ = run_toy(tmp_path / "resumed", stop_after_steps=5)
    assert stopped
    resumed, _, _, reports = run_toy(tmp_path / "resumed", resume_from_checkpoint="latest")
    assert reports == [(5, False), (6, True), (7, False)]  # from the checkpoint of step 4
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)


def test_prepare_run_records_every_argument_section(tmp_path):
    args = RunArguments(output_dir=str(tmp_path / "run"), seed=3)
    out = prepare_run(build_accelerator(args), args, data=RunArguments(output_dir="data-section"))
    recorded = json.loads((out / "xcv_run.json").read_text())
    assert recorded["train"]["seed"] == 3 and recorded["data"]["output_dir"] == "data-section"


class Saved:
    """Stands in for a processor or tokenizer."""

    def save_pretrained(self, folder) -> None:
        (folder / "component.json").write_text("{}")


def test_save_final_moves_in_complete_files_only(tmp_path):
    args = RunArguments(output_dir=str(tmp_path))
    accelerator = build_accelerator(args)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    model.save_pretrained = lambda folder: (folder.mkdir(), (folder / "model.bin").write_text("w"))
    (tmp_path / FINAL_STAGING).mkdir()
    (tmp_path / FINAL_STAGING / "stale.txt").write_text("from a killed run")
    save_final(accelerator, model, [Saved()], tmp_path, {"test": 1.0}, lambda m: ModelCard("---\nlicense: mit\n---\n"))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["README.md", "all_results.json", "component.json", "model.bin"]  # no staging, nothing stale
    assert json.loads((tmp_path / "all_results.json").read_text()) == {"test": 1.0}
