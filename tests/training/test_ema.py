"""The EMA of the weights (hf_xcv.training.ema): timm's ModelEmaV3 decay and warm-up in closed form, the swap in and
out, a resumed run of the training script with the EMA of an uninterrupted one, bit for bit, and two processes (DDP
and FSDP2, gloo on the CPU) with the EMA of one process on the whole batch.

Run as a script (``python test_ema.py OUT PORT``), this file is the two processes' worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from hf_xcv.training.ema import EMA_WEIGHTS_NAME, ModelEma, holds_ema_weights

WORLD, BATCH, STEPS, LR = 2, 4, 3, 0.5
EMA_SETTINGS = {"decay": 0.8, "use_warmup": True, "warmup_gamma": 1.0, "warmup_power": 2 / 3}


def timm_decay(step: int, decay: float, warmup: bool, gamma: float = 1.0, power: float = 2 / 3, after: int = 0,
               least: float = 0.0) -> float:  # fmt: skip
    """timm's ModelEmaV3.get_decay, written out: decay 0 for the first update, then the ramp, clamped."""
    t = max(0, step - after - 1)
    if t == 0:
        return 0.0
    return max(min(1 - (1 + t / gamma) ** -power, decay), least) if warmup else decay


def steps_of(weights: list[torch.Tensor], model: nn.Linear, ema: ModelEma) -> None:
    for step, value in enumerate(weights, start=1):
        with torch.no_grad():
            model.weight.copy_(value)
        ema.update(model, step)


@pytest.mark.parametrize("warmup", [False, True], ids=["constant", "warmup"])
def test_the_ema_equals_the_closed_form_after_k_steps(warmup):
    torch.manual_seed(0)
    model = nn.Linear(4, 3, bias=False)
    ema = ModelEma(model, decay=0.9, use_warmup=warmup)
    weights = [torch.randn(3, 4) for _ in range(7)]
    steps_of(weights, model, ema)
    # ema_k = sum_t w_t * p_t, w_t = (1 - d_t) * prod_{s > t} d_s (d_1 = 0: the first update copies the weights)
    decays = [timm_decay(step, 0.9, warmup) for step in range(1, 8)]
    expected = torch.zeros(3, 4, dtype=torch.float64)
    for t, value in enumerate(weights):
        share = (1 - decays[t]) * torch.tensor(decays[t + 1 :], dtype=torch.float64).prod()
        expected += share * value.double()
    torch.testing.assert_close(ema.params["weight"].double(), expected, atol=1e-6, rtol=1e-6)
    if not warmup:  # the constant decay's closed form: d^(k-1) p_1 + sum_{t>1} (1 - d) d^(k-t) p_t
        d, k = 0.9, len(weights)
        closed = d ** (k - 1) * weights[0].double()
        closed += sum((1 - d) * d ** (k - t) * weights[t - 1].double() for t in range(2, k + 1))
        torch.testing.assert_close(ema.params["weight"].double(), closed, atol=1e-6, rtol=1e-6)
    assert ema.num_updates == 7


def test_the_decay_is_timms_with_its_warm_up_clamps_and_delay():
    ema = ModelEma(nn.Linear(1, 1), decay=0.99, min_decay=0.3, update_after_step=2, use_warmup=True,
                   warmup_gamma=2.0, warmup_power=0.75)  # fmt: skip
    for step in range(1, 200, 7):
        expected = timm_decay(step, 0.99, True, gamma=2.0, power=0.75, after=2, least=0.3)
        assert ema.get_decay(step) == pytest.approx(expected, rel=1e-12), step
    assert [ema.get_decay(step) for step in (1, 2, 3)] == [0.0, 0.0, 0.0]  # the first after+1 updates copy
    assert ema.get_decay(10**7) == 0.99 and ema.get_decay(None) == 0.99
    assert ModelEma(nn.Linear(1, 1)).get_decay(5) == 0.9998  # timm's train.py default, no warm-up


def test_buffers_are_copied_and_half_precision_weights_averaged_in_float32():
    model = nn.BatchNorm1d(2).to(torch.bfloat16)
    ema = ModelEma(model, decay=0.5)
    assert ema.params["weight"].dtype == torch.float32
    model.running_mean.fill_(3.0)
    with torch.no_grad():
        model.weight.fill_(2.0)
    ema.update(model, 1)
    ema.update(model, 2)  # weight: 2 both times; running_mean copied, not averaged
    assert torch.equal(ema.buffers["running_mean"], torch.full((2,), 3.0, dtype=torch.bfloat16))
    with torch.no_grad():
        model.weight.fill_(1.0)
    ema.update(model, 3)
    assert torch.equal(ema.params["weight"], torch.full((2,), 1.5))


def test_the_ema_weights_swap_in_and_the_raw_ones_come_back_bit_for_bit():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    ema = ModelEma(model, decay=0.5)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param))
    ema.update(model, 2)
    raw = {name: param.detach().clone() for name, param in model.named_parameters()}
    with ema.swapped_in(model):
        assert all(torch.equal(param, ema.params[name]) for name, param in model.named_parameters())
    assert all(torch.equal(param, raw[name]) for name, param in model.named_parameters())
    with ema.swapped_in(model, lazily=True):
        assert torch.equal(model[0].weight, raw["0.weight"])  # nothing ran yet
        model(torch.randn(1, 3))
        assert torch.equal(model[0].weight, ema.params["0.weight"])
    assert all(torch.equal(param, raw[name]) for name, param in model.named_parameters())
    assert not model._forward_pre_hooks and not model[0]._forward_pre_hooks


def test_the_saved_ema_reloads_and_continues_bit_for_bit(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    weights = [torch.randn(3, 4) for _ in range(6)]
    straight = ModelEma(model, **EMA_SETTINGS)
    steps_of(weights, model, straight)
    first = ModelEma(model, **EMA_SETTINGS)
    steps_of(weights[:3], model, first)
    first.save(tmp_path)
    resumed = ModelEma(nn.Linear(4, 3), **EMA_SETTINGS)
    resumed.load(tmp_path)
    assert resumed.num_updates == 3
    for step, value in enumerate(weights[3:], start=4):
        with torch.no_grad():
            model.weight.copy_(value)
        resumed.update(model, step)
    for name in straight.params:
        assert torch.equal(straight.params[name], resumed.params[name]), name
    with pytest.raises(FileNotFoundError, match="without the EMA"):
        resumed.load(tmp_path / "elsewhere")


# ---- the training script: a resumed run has the EMA of an uninterrupted one ----


def test_a_resumed_run_has_the_ema_of_an_uninterrupted_one_and_saves_both_weights(tmp_path):
    """Stop after 5 steps (a checkpoint at 4), resume to 8: dropout and augmentation draw random numbers; the EMA (with
    warm-up) of every checkpoint, the final EMA model and the raw weights equal the uninterrupted run's bit for bit."""
    from safetensors.torch import load_file

    import hf_xcv
    from hf_xcv.cli import train_image_classification as script

    common = [
        "--max_train_steps", "8", "--checkpointing_steps", "4", "--per_device_train_batch_size", "16",
        "--max_train_samples", "64", "--eval_every_epochs", "1", "--disable_tqdm", "--preset", "vit-test-tiny",
        "--config_overrides", "hidden_dropout_prob=0.1", "--learning_rate", "3e-3",
        "--model_ema", "--model_ema_decay", "0.9", "--model_ema_warmup",
    ]  # fmt: skip
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    results = script.main(["--output_dir", str(straight), *common])
    assert script.main(["--output_dir", str(resumed), "--stop_after_steps", "5", *common]) is None
    assert (resumed / "checkpoints" / "step-00000004" / EMA_WEIGHTS_NAME).is_file()
    script.main(["--output_dir", str(resumed), "--resume_from_checkpoint", "latest", *common])
    for file in ("model.safetensors", "raw_weights/model.safetensors", f"checkpoints/step-00000008/{EMA_WEIGHTS_NAME}"):
        a, b = load_file(straight / file), load_file(resumed / file)
        assert a.keys() == b.keys()
        assert all(torch.equal(a[key], b[key]) for key in a), file
    # the folder holds the EMA weights and says so; the raw ones beside them; both scored
    ema, raw = load_file(straight / "model.safetensors"), load_file(straight / "raw_weights/model.safetensors")
    assert any(not torch.equal(ema[key], raw[key]) for key in ema)
    checkpoint = load_file(straight / "checkpoints/step-00000008" / EMA_WEIGHTS_NAME)
    assert all(torch.equal(ema[key], checkpoint[key]) for key in ema)
    model = hf_xcv.ViTForImageClassification.from_pretrained(straight)
    assert holds_ema_weights(model) == {**results["ema_weights"], "updates": 8}
    raw_model = hf_xcv.ViTForImageClassification.from_pretrained(straight, subfolder="raw_weights")
    assert holds_ema_weights(raw_model) is None
    recorded = json.loads((straight / "all_results.json").read_text())
    assert recorded["ema_weights"]["decay"] == 0.9 and set(recorded["raw_weights"]) == {"validation", "test"}
    assert "| weights | EMA of the weights (decay 0.9, warm-up, 8 updates)" in (straight / "README.md").read_text()


# ---- two processes equal one on the whole batch ----


def build() -> nn.Module:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from model_testing import tiny_config

    import hf_xcv

    torch.manual_seed(0)
    return hf_xcv.ViTForImageClassification(tiny_config("xcv_vit")).eval()  # eval: no dropout, the same function


def batches() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        {"pixel_values": torch.randn(BATCH, 3, 16, 16, generator=generator),
         "labels": torch.randint(0, 3, (BATCH,), generator=generator)}
        for _ in range(STEPS)
    ]  # fmt: skip


def train(model: nn.Module, ema_of: nn.Module, rows: slice) -> ModelEma:
    """SGD steps on ``rows`` of each batch, the EMA updated after each."""
    ema = ModelEma(ema_of, **EMA_SETTINGS)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step, batch in enumerate(batches(), start=1):
        model(**{key: value[rows] for key, value in batch.items()}).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ema.update(ema_of, step)
    return ema


def worker(rank: int, out: Path, port: int) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    rows = slice(rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD)
    results = {}

    model = build()
    ema = train(DistributedDataParallel(model), model, rows)
    results["ddp"] = ema.full_state_dict()

    model = build()
    for layer in model.vit.encoder.layers:
        fully_shard(layer)
    fully_shard(model)
    ema = train(model, model, rows)
    assert all(type(tensor).__name__ == "DTensor" for tensor in ema.params.values())
    results["fsdp"] = ema.full_state_dict()
    ema.save(out, main_process=rank == 0)
    dist.barrier()
    reloaded = ModelEma(model, **EMA_SETTINGS)
    reloaded.load(out)  # each process takes its shards of the whole file
    results["fsdp_reloaded"] = reloaded.full_state_dict()
    pixels = batches()[0]["pixel_values"]
    with torch.no_grad(), ema.swapped_in(model):
        results["fsdp_ema_logits"] = model(pixel_values=pixels).logits
    with torch.no_grad():
        results["fsdp_raw_logits"] = model(pixel_values=pixels).logits
    torch.save(results, out / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    from helpers import REPO_ROOT, free_port

    out = tmp_path_factory.mktemp("ema-distributed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, __file__, str(out), str(free_port())]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD)]


def test_two_processes_keep_the_ema_of_one_process_on_the_whole_batch(two_processes):
    model = build()
    ema = train(model, model, slice(None))
    expected = ema.full_state_dict()
    for mode in ("ddp", "fsdp", "fsdp_reloaded"):
        for rank, results in enumerate(two_processes):
            got = results[mode]
            assert got.keys() == expected.keys()
            for name, tensor in expected.items():
                torch.testing.assert_close(got[name], tensor, atol=1e-5, rtol=1e-4, msg=f"{mode} rank {rank} {name}")
    for name in expected:  # DDP: every process holds the same average; FSDP2's saved one reloads bit for bit
        assert torch.equal(two_processes[0]["ddp"][name], two_processes[1]["ddp"][name])
        assert torch.equal(two_processes[0]["fsdp"][name], two_processes[0]["fsdp_reloaded"][name])
    pixels = batches()[0]["pixel_values"]
    with torch.no_grad(), ema.swapped_in(model):
        logits = model(pixel_values=pixels).logits
    torch.testing.assert_close(two_processes[0]["fsdp_ema_logits"], logits, atol=1e-5, rtol=1e-4)
    with torch.no_grad():  # the raw weights came back into the shards
        torch.testing.assert_close(two_processes[0]["fsdp_raw_logits"], model(pixel_values=pixels).logits,
                                   atol=1e-5, rtol=1e-4)  # fmt: skip


if __name__ == "__main__":
    import torch.multiprocessing as mp

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    mp.spawn(worker, args=(Path(sys.argv[1]), int(sys.argv[2])), nprocs=WORLD)


# ---- transformers' Trainer: the EMA and layer-wise learning-rate decay together ----


def trainer_run(out: Path, resume: bool = False):
    import numpy as np
    from transformers import Trainer, TrainingArguments

    import hf_xcv
    from hf_xcv.data import ImageClassificationCollator, image_classification_transform, load_digits_dataset
    from hf_xcv.metrics import Accuracy
    from hf_xcv.training import EmaCallback, layer_decay_parameter_groups

    def accuracy(prediction) -> dict[str, float]:
        predictions = np.argmax(prediction.predictions, axis=-1)
        return Accuracy().compute(predictions=predictions, references=prediction.label_ids)

    digits = load_digits_dataset()
    torch.manual_seed(0)
    config = hf_xcv.preset_config("vit-test-tiny", num_labels=10, image_size=8, patch_size=2)
    model = hf_xcv.ViTForImageClassification(config)
    transform = image_classification_transform(hf_xcv.XcvViTImageProcessor(size={"height": 8, "width": 8}))
    groups = layer_decay_parameter_groups(model, learning_rate=3e-3, weight_decay=0.05, layer_decay=0.5)
    callback = EmaCallback(decay=0.8, use_warmup=True)
    args = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=32, per_device_eval_batch_size=256, max_steps=6,
        warmup_steps=2, eval_strategy="steps", eval_steps=3, save_strategy="steps", save_steps=3,
        report_to="none", use_cpu=True, remove_unused_columns=False, seed=0, logging_steps=3,
    )  # fmt: skip
    trainer = Trainer(
        model=model, args=args, train_dataset=digits["train"].with_transform(transform),
        eval_dataset=digits["validation"].with_transform(transform), data_collator=ImageClassificationCollator(),
        compute_metrics=accuracy, optimizers=(torch.optim.AdamW(groups), None), callbacks=[callback],
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=resume)  # True: the last checkpoint of ``out``
    return trainer, callback


def test_trainer_trains_evaluates_the_ema_weights_saves_and_reloads_them(tmp_path):
    import hf_xcv
    from hf_xcv.training import layer_ids

    trainer, callback = trainer_run(tmp_path / "run")
    model = trainer.model
    evaluations = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    assert [entry["step"] for entry in evaluations] == [3, 6]
    # layer decay: the groups kept their ratios through the schedule (it scales every group's initial rate)
    ids, num_layers = layer_ids(model)
    for group in trainer.optimizer.param_groups:
        assert group["lr"] / group["initial_lr"] == pytest.approx(trainer.lr_scheduler.get_last_lr()[-1] / 3e-3)
        assert group["initial_lr"] == pytest.approx(3e-3 * 0.5 ** (num_layers + 1 - group["layer_id"]))
    # after training the model holds the EMA weights: evaluating them gives the evaluation logged at step 6
    assert holds_ema_weights(model)["updates"] == 6
    assert trainer.evaluate()["eval_loss"] == evaluations[1]["eval_loss"]
    # the evaluation at step 3 was of that step's EMA weights (checkpoint-3/ema.safetensors), not of its raw weights
    checkpoint = tmp_path / "run" / "checkpoint-3"
    raw_model = hf_xcv.ViTForImageClassification.from_pretrained(checkpoint)
    trainer.model = raw_model
    raw_loss = trainer.evaluate()["eval_loss"]
    ema = ModelEma(raw_model)
    ema.load(checkpoint)
    ema.copy_to(raw_model)
    assert trainer.evaluate()["eval_loss"] == evaluations[0]["eval_loss"] != raw_loss
    # saved and reloaded: the EMA weights, and the folder says so
    trainer.model = model
    trainer.save_model(str(tmp_path / "final"))
    reloaded = hf_xcv.ViTForImageClassification.from_pretrained(tmp_path / "final")
    assert holds_ema_weights(reloaded) == callback.ema.describe()
    assert all(torch.equal(param, callback.ema.params[name]) for name, param in reloaded.named_parameters())
    callback.restore_raw_weights(model)
    assert holds_ema_weights(model) is None
    assert all(torch.equal(param, raw) for param, raw in zip(model.parameters(), raw_params(tmp_path)))


def raw_params(tmp_path: Path) -> list[torch.Tensor]:
    """The raw weights of the run's last checkpoint (step 6, the end)."""
    import hf_xcv

    return list(hf_xcv.ViTForImageClassification.from_pretrained(tmp_path / "run" / "checkpoint-6").parameters())


def test_trainer_resumed_mid_run_has_the_ema_of_an_uninterrupted_run(tmp_path):
    import shutil

    _, straight = trainer_run(tmp_path / "straight")
    shutil.copytree(tmp_path / "straight" / "checkpoint-3", tmp_path / "resumed" / "checkpoint-3")  # as if stopped
    _, resumed = trainer_run(tmp_path / "resumed", resume=True)
    assert resumed.ema.num_updates == 6
    for name, tensor in straight.ema.params.items():
        assert torch.equal(tensor, resumed.ema.params[name]), name


def test_the_runner_reports_with_the_ema_weights_and_trains_on_with_its_own(tmp_path):
    """``train_loop``'s report runs the model with the EMA weights (swapped in at its first forward pass); the step
    after it trains the raw weights, which come back bit for bit."""
    from accelerate.state import AcceleratorState, GradientState
    from torch.utils.data import DataLoader, TensorDataset

    from hf_xcv.training.runner import RunArguments, prepare_loop, start_run, train_loop

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    args = RunArguments(output_dir=str(tmp_path / "run"), max_train_steps=4, per_device_train_batch_size=4,
                        checkpointing_steps=100, logging_steps=0, disable_tqdm=True, model_ema=True,
                        model_ema_decay=0.5, learning_rate=0.1, lr_scheduler_type="constant")  # fmt: skip
    accelerator, out = start_run(args)
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    data = TensorDataset(torch.randn(16, 3), torch.randn(16, 1))
    loaders = [DataLoader(data, batch_size=4, shuffle=True)]

    def optimizer_for(module, total_steps):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

    parts, state, _ = prepare_loop(accelerator, out, args, model, loaders, optimizer_for)
    unwrapped = accelerator.unwrap_model(parts.model)
    swapped, raw_before_report = [], []

    def report(state, epoch_ended):
        raw_before_report.append(unwrapped.weight.detach().clone())
        parts.model(torch.zeros(1, 3))  # the evaluation's forward pass: the EMA weights go in
        swapped.append(torch.equal(unwrapped.weight, parts.ema.params["weight"]))

    def loss_of(batch):
        if raw_before_report:  # the step after a report trains the raw weights
            assert torch.equal(unwrapped.weight, raw_before_report[-1])
        inputs, targets = batch
        return ((parts.model(inputs) - targets) ** 2).mean()

    _, stopped = train_loop(parts, state, args, loss_of, report)
    assert not stopped and swapped == [True] * 4
    assert not torch.equal(raw_before_report[-1], parts.ema.params["weight"])  # the average differs from the raw
    assert torch.equal(unwrapped.weight, raw_before_report[-1])  # which came back after the last report
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
