"""training/train_image_restoration.py with IPT: multi-task pre-training (one task per batch) on the built-in photos
and on a user's folder, each task scored against its baseline in the results and the card, fine-tuning one task
from the checkpoint, exact resume, two processes, and IPT's bad options refused before the folder is claimed."""

from __future__ import annotations

import json
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, accelerate_launcher, check, load_script, run_script
from safetensors.torch import load_file

SCRIPT = REPO_ROOT / "training" / "train_image_restoration.py"
run = partial(run_script, SCRIPT)
TWO_TASKS = '{"tasks": ["sr_x2", "denoise_30"]}'
QUICK = ["--preset", "ipt-test-tiny", "--config_overrides", TWO_TASKS, "--per_device_train_batch_size", "4",
         "--eval_every_epochs", "0", "--disable_tqdm", "--pictures", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, module_env):
    out = tmp_path_factory.mktemp("ipt") / "run"
    check(run(["--output_dir", str(out), "--max_train_steps", "4", *QUICK], module_env))
    return out


def test_multi_task_pre_training_scores_every_task_against_its_baseline(pretrained):
    results = json.loads((pretrained / "all_results.json").read_text())
    test = results["test"]
    for task in ("sr_x2", "denoise_30"):
        for metric in ("psnr", "ssim", "baseline_psnr", "baseline_ssim"):
            assert np.isfinite(test[f"{metric}_{task}"])
    assert test["num_images"] == 3 and results["validation"]["num_images"] == 1
    # the baselines are the inputs' own scores: bicubic x2 upsampling is far better than noise of sigma 30
    assert test["baseline_psnr_sr_x2"] > test["baseline_psnr_denoise_30"] + 3
    card = (pretrained / "README.md").read_text()
    assert "psnr_sr_x2" in card and "denoise_30" in card and "IPT" in card
    assert "| task | PSNR | SSIM | baseline PSNR | baseline SSIM |" in card and 'task="sr_x2"' in card
    assert (pretrained / "restorations.png").exists()
    config = json.loads((pretrained / "config.json").read_text())
    assert config["model_type"] == "xcv_ipt" and config["tasks"] == ["sr_x2", "denoise_30"]
    processor = json.loads((pretrained / "preprocessor_config.json").read_text())
    assert processor["image_processor_type"] == "IPTImageProcessor" and processor["rgb_range"] == 255


def test_fine_tuning_one_task_scores_only_it(pretrained, module_env, tmp_path):
    out = tmp_path / "ft"
    args = ["--model_name_or_path", str(pretrained), "--tasks", "denoise_30", "--max_train_steps", "2",
            "--per_device_train_batch_size", "2", "--eval_every_epochs", "0", "--disable_tqdm",
            "--pictures", "0"]  # fmt: skip
    check(run(["--output_dir", str(out), *args], module_env))
    test = json.loads((out / "all_results.json").read_text())["test"]
    assert "psnr_denoise_30" in test and "psnr_sr_x2" not in test
    before, after = load_file(pretrained / "model.safetensors"), load_file(out / "model.safetensors")
    assert torch.equal(before["tails.sr_x2.conv.weight"], after["tails.sr_x2.conv.weight"])  # not trained
    assert not torch.equal(before["tails.denoise_30.conv.weight"], after["tails.denoise_30.conv.weight"])


def test_a_users_folder_trains_on_two_processes_and_scores_every_image_once(folder, module_env, tmp_path):
    out = tmp_path / "ddp"
    args = ["--output_dir", str(out), "--dataset", str(folder), "--max_train_steps", "2", *QUICK]
    check(run(args, module_env, accelerate_launcher(2)))
    results = json.loads((out / "all_results.json").read_text())
    assert results["world_size"] == 2
    assert results["test"]["num_images"] == 2 and results["validation"]["num_images"] == 1


def test_a_folder_of_clean_images_without_references_trains(folder, module_env, tmp_path):
    import shutil

    clean = tmp_path / "clean"
    shutil.copytree(folder, clean)
    for split in ("train", "validation", "test"):
        shutil.rmtree(clean / split / "ref")  # IPT reads hr/ only: no reference needed
    out = tmp_path / "run"
    check(run(["--output_dir", str(out), "--dataset", str(clean), "--max_train_steps", "1", *QUICK], module_env))
    assert json.loads((out / "all_results.json").read_text())["test"]["num_images"] == 2


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(module_env, tmp_path):
    """Stop after 3 steps (checkpoints every 2), resume to 5: the tasks, crops and noise drawn replay exactly."""
    common = ["--max_train_steps", "5", "--checkpointing_steps", "2", *QUICK, "--pictures", "0"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    check(run(["--output_dir", str(straight), *common], module_env))
    check(run(["--output_dir", str(resumed), "--stop_after_steps", "3", *common], module_env))
    log = check(run(["--output_dir", str(resumed), "--resume_from_checkpoint", "latest", *common], module_env))
    assert "resumed from" in log.stdout
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def test_training_lowers_the_loss_and_draws_one_task_per_batch():
    import hf_xcv
    from hf_xcv.cli import restoration_tasks
    from hf_xcv.data import load_photo

    torch.manual_seed(0)
    model = hf_xcv.IPTForImageRestoration(hf_xcv.preset_config("ipt-test-tiny", tasks=["sr_x2", "denoise_30"]))
    processor = hf_xcv.IPTImageProcessor()
    photo = np.moveaxis(load_photo("astronaut"), -1, 0)
    batch = {"images": [photo[:, 100:148, 100:148], photo[:, 300:348, 200:248]], "names": ["a", "b"]}
    scales = {"sr_x2": 2, "denoise_30": 1}
    state = SimpleNamespace(epoch=0, batches_in_epoch=0)  # the runner's TrainerState: the task follows the step
    loss_of = restoration_tasks.training_objective(model, processor, scales, 12, True, torch.device("cpu"), state, 0)
    seen = []
    original = model.forward

    def spy(*args, **kwargs):
        seen.append(kwargs["task"])
        assert kwargs["labels"].shape[-1] == 12 * scales[kwargs["task"]]
        return original(*args, **kwargs)

    model.forward = spy
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    losses = []
    for step in range(30):
        torch.manual_seed(step % 2)  # the same two draws again and again: the loss on them must fall
        state.batches_in_epoch = step % 2
        loss = loss_of(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert set(seen) == {"sr_x2", "denoise_30"}
    assert np.mean(losses[-4:]) < 0.7 * np.mean(losses[:4])


def test_the_recipe_fills_unset_options_per_family():
    script = load_script(SCRIPT)
    import hf_xcv

    for preset, expected in (("ipt-test-tiny", (5e-5, 1.0, 300, 64)), ("ttsr-test-tiny", (1e-4, 0.0, 200, 9))):
        args = script.parse_args(["--output_dir", "x"])[2]
        script.apply_recipe(args, hf_xcv.preset_config(preset))
        got = (args.learning_rate, args.max_grad_norm, args.num_train_epochs, args.per_device_train_batch_size)
        assert got == expected


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tasks", "sr_x4"], "--tasks 'sr_x4': the model's tasks are ['sr_x2', 'denoise_30']"),
        (["--losses", "all", "--vgg19_weights", "x.pth"], "IPT trains with L1"),
        (["--crop_size", "12"], "--crop_size 12 must be at least 24"),
        (["--crop_size", "25"], "a multiple of 2"),
        (["--config_overrides", '{"tasks": ["sr_x2"], "image_size": 300}'], "too small for sr_x2"),
    ],
)
def test_bad_ipt_options_are_refused_before_the_folder_is_claimed(args, message, module_env, tmp_path):
    result = run(["--output_dir", str(tmp_path / "run"), "--max_train_steps", "1", *QUICK, *args], module_env)
    assert result.returncode != 0 and message in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def test_ttsr_refuses_ipt_options(module_env, tmp_path):
    for args, message in ((["--tasks", "sr_x4"], "--tasks is for models of named tasks"),
                          (["--contrastive_loss_weight", "0.1"], "--contrastive_loss_weight is IPT's")):  # fmt: skip
        result = run(["--output_dir", str(tmp_path / "run"), "--preset", "ttsr-test-tiny", *args], module_env)
        assert result.returncode != 0 and message in result.stderr, result.stderr[-2000:]


def test_every_process_draws_the_same_task_for_a_step():
    """The task follows the run's seed and the step, not the process's RNG (which differs per rank): the batches of
    one step across a distributed run are all one task, as the paper's."""
    import hf_xcv
    from hf_xcv.cli import restoration_tasks

    model = hf_xcv.IPTForImageRestoration(hf_xcv.preset_config("ipt-test-tiny", tasks=["sr_x2", "denoise_30"]))
    seen: dict[int, set] = {}
    state = SimpleNamespace(epoch=0, batches_in_epoch=0)
    photo = np.zeros((3, 24, 24), np.uint8)
    loss_of = restoration_tasks.training_objective(
        model, hf_xcv.IPTImageProcessor(), {"sr_x2": 2, "denoise_30": 1}, 12, False, torch.device("cpu"), state, 0
    )

    def record(**kwargs):
        seen.setdefault(state.batches_in_epoch, set()).add(kwargs["task"])
        return SimpleNamespace(loss=torch.zeros(()))

    model.forward = record
    for step in range(8):
        for rank in range(2):  # each rank's RNG is seeded differently by the runner
            torch.manual_seed(1000 * rank + step)
            state.batches_in_epoch = step
            loss_of({"images": [photo], "names": ["x"]})
    assert all(len(tasks) == 1 for tasks in seen.values())  # one task per step on every rank
    assert set.union(*seen.values()) == {"sr_x2", "denoise_30"}  # and both tasks over the steps


def test_user_named_tasks_are_refused_before_the_folder_is_claimed(module_env, tmp_path):
    args = ["--config_overrides", '{"tasks": ["deblur"]}', "--preset", "ipt-test-tiny", "--max_train_steps", "1"]
    result = run(["--output_dir", str(tmp_path / "run"), *args], module_env)
    assert result.returncode != 0 and "['deblur'] have no built-in degradation" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "run").exists()
