"""training/train_image_restoration.py: trains TTSR on the built-in photos and on a folder of the user's images,
scores held-out images against bicubic, resumes exactly (the full recipe's discriminator included), runs
data-parallel, and refuses bad options before claiming its folder."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import PIL.Image
import pytest
import torch
import yaml
from helpers import REPO_ROOT, accelerate_launcher, check, run_script
from safetensors.torch import load_file

import hf_xcv
from hf_xcv.cli import restoration_reference as reference
from hf_xcv.data.restoration import RestorationCollator

SCRIPT = REPO_ROOT / "training" / "train_image_restoration.py"
run = partial(run_script, SCRIPT)
HUB_REPO = "testuser/ttsr-photos-run"
QUICK = ["--preset", "ttsr-test-tiny", "--crop_size", "32", "--per_device_train_batch_size", "4",
         "--eval_every_epochs", "0", "--disable_tqdm", "--pictures", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, module_env):
    """The built-in photos: training crops, whole held-out views."""
    out = tmp_path_factory.mktemp("runs") / "photos"
    args = ["--output_dir", str(out), "--max_train_steps", "4", "--checkpointing_steps", "2",
            "--max_train_samples", "16", "--push_to_hub", "--hub_model_id", HUB_REPO, *QUICK]  # fmt: skip
    check(run(args, module_env))  # the tests' Hub server on 127.0.0.1 (conftest.py)
    return out


def test_a_run_leaves_a_hub_ready_folder_with_psnr_next_to_bicubic_in_its_card(finished_run):
    names = {p.name for p in finished_run.iterdir()}
    assert {"config.json", "model.safetensors", "preprocessor_config.json", "README.md", "restorations.png"} <= names
    results = json.loads((finished_run / "all_results.json").read_text())
    assert results["completed_steps"] == 4
    assert results["test"]["num_images"] == 3 and results["validation"]["num_images"] == 1
    # the bicubic baseline of the held-out views (hf_xcv.data.photos: motorcycle, coffee and chelsea, mean 27.31)
    assert results["test"]["bicubic_psnr"] == pytest.approx(27.31, abs=0.01)
    assert 0 < results["test"]["ssim"] <= 1
    meta = yaml.safe_load((finished_run / "README.md").read_text().split("---")[1])
    assert meta["pipeline_tag"] == "image-to-image"
    metrics = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert set(metrics) == {"psnr", "ssim"}  # the model's own; bicubic's are in the text
    assert metrics["psnr"] == pytest.approx(results["test"]["psnr"])
    assert f"scores {results['test']['bicubic_psnr']:.2f} dB" in (finished_run / "README.md").read_text()
    assert PIL.Image.open(finished_run / "restorations.png").size[0] > 4 * 500  # 5 columns of whole views

    from transformers import AutoImageProcessor, AutoModelForImageToImage

    import hf_xcv  # noqa: F401  (registers the model type)

    model = AutoModelForImageToImage.from_pretrained(finished_run)
    assert type(model).__name__ == "TTSRForReferenceSuperResolution"
    assert type(AutoImageProcessor.from_pretrained(finished_run)).__name__ == "TTSRImageProcessor"


def test_push_to_hub_uploads_the_folder_with_its_picture_and_card(finished_run):
    from huggingface_hub import HfApi

    info = HfApi().model_info(HUB_REPO)
    names = {sibling.rfilename for sibling in info.siblings}
    assert {"README.md", "config.json", "model.safetensors", "preprocessor_config.json", "restorations.png"} <= names
    assert not any(name.startswith("checkpoints") for name in names)
    psnr = json.loads((finished_run / "all_results.json").read_text())["test"]["psnr"]
    assert dict((r.metric_type, r.metric_value) for r in info.card_data.eval_results)["psnr"] == pytest.approx(psnr)


def test_a_users_folder_trains_and_two_processes_score_every_image_once(folder, module_env, tmp_path):
    out = tmp_path / "ddp"
    args = ["--output_dir", str(out), "--dataset", str(folder), "--max_train_steps", "2", *QUICK]
    check(run(args, module_env, accelerate_launcher(2)))
    results = json.loads((out / "all_results.json").read_text())
    assert results["world_size"] == 2
    assert results["test"]["num_images"] == 2 and results["validation"]["num_images"] == 1  # no duplicates


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(folder, module_env, tmp_path):
    """Stop after 3 steps (checkpoints every 2), resume to 5: crosses an epoch boundary with augmentation."""
    common = ["--dataset", str(folder), "--max_train_steps", "5", "--checkpointing_steps", "2", *QUICK]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    check(run(["--output_dir", str(straight), *common], module_env))
    check(run(["--output_dir", str(resumed), "--stop_after_steps", "3", *common], module_env))
    assert not (resumed / "model.safetensors").exists()
    log = check(run(["--output_dir", str(resumed), "--resume_from_checkpoint", "latest", *common], module_env))
    assert "resumed from" in log.stdout
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


@pytest.fixture(scope="module")
def vgg19_file(tmp_path_factory) -> Path:
    """Random VGG19 weights in torchvision's layout (features.N.*), standing in for ImageNet's."""
    from hf_xcv.layers.vgg import VGG19Features

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("vgg") / "vgg19.pth"
    torch.save({f"features.{k}": v for k, v in VGG19Features(37).features.state_dict().items()}, path)
    return path


def test_the_full_recipe_trains_and_resumes_with_its_discriminator(folder, vgg19_file, module_env, tmp_path):
    """--losses all: one step of L1 only (num_init_epochs), then every loss with the WGAN-GP discriminator; a run
    stopped after 2 steps and resumed ends as the uninterrupted one, discriminator and its Adam included."""
    preset = ["--preset", "ttsr-test-tiny", "--config_overrides", '{"texture_channels": [64, 128, 256]}']
    common = ["--dataset", str(folder), "--max_train_steps", "3", "--checkpointing_steps", "1", "--losses", "all",
              "--vgg19_weights", str(vgg19_file), "--num_init_epochs", "0", *QUICK, *preset]  # fmt: skip
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    check(run(["--output_dir", str(straight), *common], module_env))
    check(run(["--output_dir", str(resumed), "--stop_after_steps", "2", *common], module_env))
    check(run(["--output_dir", str(resumed), "--resume_from_checkpoint", "latest", *common], module_env))
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert all(torch.equal(a[key], b[key]) for key in a)
    vgg = torch.load(vgg19_file, weights_only=True)  # the texture extractor started from VGG19 (3 Adam steps at 1e-5)
    for ours, theirs in (("slice1.0", 0), ("slice2.5", 5), ("slice3.10", 10)):
        torch.testing.assert_close(a[f"ttsr.texture_extractor.{ours}.weight"], vgg[f"features.{theirs}.weight"],
                                   atol=1e-4, rtol=0)  # fmt: skip


def test_training_lowers_the_loss():
    from hf_xcv.cli import train_image_restoration as script
    from hf_xcv.data import load_photos_dataset

    torch.manual_seed(0)
    model = script.build_model(script.ModelArguments(preset="ttsr-test-tiny"))
    data = load_photos_dataset(crop_size=32, crops_per_photo=1)
    batch = RestorationCollator(hf_xcv.TTSRImageProcessor())([data["train"][i] for i in range(4)])
    args = script.TrainArguments(output_dir="unused", learning_rate=2e-3, lr_texture_extractor=2e-4)
    optimizer, _ = script.build_optimizer(model, args, total_steps=30)
    losses = []
    for _ in range(30):
        loss = model(**reference.model_inputs(batch), labels=batch["labels"]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0]


def test_the_recipe_trains_the_texture_extractor_at_a_tenth_of_the_rate():
    from hf_xcv.cli import train_image_restoration as script

    model = script.build_model(script.ModelArguments(preset="ttsr-test-tiny"))
    args = script.TrainArguments(output_dir="unused")
    script.apply_recipe(args, model.config)  # the options left unset take TTSR's recipe
    optimizer, scheduler = script.build_optimizer(model, args, total_steps=10)
    main, extractor = optimizer.param_groups
    assert (main["lr"], extractor["lr"]) == (1e-4, 1e-5) and main["betas"] == (0.9, 0.999) and main["eps"] == 1e-8
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(".texture_extractor." in names[id(p)] for p in extractor["params"])
    assert len(main["params"]) + len(extractor["params"]) == len(names)
    for _ in range(10):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == 1e-4  # constant, as the original's never-firing step decay


def test_augmentation_moves_the_low_and_high_resolution_images_together_and_the_reference_apart():

    generator = torch.Generator().manual_seed(0)
    lr = torch.rand(16, 3, 6, 6, generator=generator)
    ref = torch.rand(16, 3, 24, 24, generator=generator)
    batch = {
        "pixel_values": lr,
        "upsampled_pixel_values": lr.repeat_interleave(4, -1).repeat_interleave(4, -2),
        "labels": lr.repeat_interleave(4, -1).repeat_interleave(4, -2) * 2,
        "reference_pixel_values": ref,
        "degraded_reference_pixel_values": ref + 1,
    }
    torch.manual_seed(3)
    out = reference.augment(batch)
    upsampled = out["pixel_values"].repeat_interleave(4, -1).repeat_interleave(4, -2)
    assert torch.equal(out["upsampled_pixel_values"], upsampled) and torch.equal(out["labels"], upsampled * 2)
    assert torch.equal(out["degraded_reference_pixel_values"], out["reference_pixel_values"] + 1)
    moved_lr = [not torch.equal(a, b) for a, b in zip(out["pixel_values"], lr)]
    moved_ref = [not torch.equal(a, b) for a, b in zip(out["reference_pixel_values"], ref)]
    assert any(moved_lr) and any(moved_ref) and moved_lr != moved_ref  # independent draws


def test_a_saved_dataset_without_names_scores_every_held_out_image(folder, module_env, tmp_path):
    """Rows of a save_to_disk DatasetDict get names of their own: the evaluation gathers its scores by name."""
    from hf_xcv.data import load_restoration_folder

    data = load_restoration_folder(folder).remove_columns("name")
    data["test"] = data["test"].select([0, 1, 0])  # three rows, two of them the same image
    data.save_to_disk(tmp_path / "saved")
    out = tmp_path / "run"
    check(run(["--output_dir", str(out), "--dataset", str(tmp_path / "saved"), "--max_train_steps", "1", *QUICK],
              module_env))  # fmt: skip
    assert json.loads((out / "all_results.json").read_text())["test"]["num_images"] == 3


def bad_pair_folder(folder: Path, tmp_path: Path) -> Path:
    """The user folder with a validation reference too small for one relevance patch."""
    import shutil

    copy = tmp_path / "bad-pair"
    shutil.copytree(folder, copy)
    reference = next((copy / "validation" / "ref").iterdir())
    PIL.Image.open(reference).crop((0, 0, 8, 8)).save(reference)
    return copy


@pytest.mark.parametrize(
    "args, message",
    [
        (["--losses", "all"], "--losses all needs --vgg19_weights"),
        (["--losses", "gan"], "--losses 'gan' is not allowed"),
        (["--preset", "vit-test-tiny"], "not an image-restoration preset"),
        (["--crop_size", "8"], "--crop_size 8 must be a multiple of 4 and at least 12"),
        (["--per_device_eval_batch_size", "2"], "holds images of 3 sizes"),
        (["BAD_PAIR"], "validation image 'rocket0': image 0: the low-resolution image"),
    ],
)
def test_bad_options_are_refused_before_the_folder_is_claimed(args, message, folder, module_env, tmp_path):
    if args == ["BAD_PAIR"]:
        args = ["--dataset", str(bad_pair_folder(folder, tmp_path)), "--crop_size", "32"]
    result = run(["--output_dir", str(tmp_path / "run"), "--max_train_steps", "1", *args], module_env)
    assert result.returncode != 0 and message in result.stderr
    assert not (tmp_path / "run").exists()


def test_vgg19_initialises_only_a_texture_extractor_of_its_widths(vgg19_file, capsys, tmp_path):
    from hf_xcv.cli import train_image_restoration as script

    reduced = script.build_model(script.ModelArguments(preset="ttsr-test-tiny", vgg19_weights=str(vgg19_file)))
    assert "keeps PyTorch's initialisation" in capsys.readouterr().out  # the perceptual loss still reads the file
    vgg_wide = script.build_model(
        script.ModelArguments(preset="ttsr-test-tiny", vgg19_weights=str(vgg19_file),
                              config_overrides='{"texture_channels": [64, 128, 256]}')
    )  # fmt: skip
    weights = torch.load(vgg19_file, weights_only=True)
    assert torch.equal(vgg_wide.ttsr.texture_extractor.slice1[0].weight, weights["features.0.weight"])
    assert list(reduced.config.texture_channels) == [4, 8, 16]
    reduced.save_pretrained(tmp_path / "tuned")
    hf_xcv.TTSRImageProcessor(size_divisibility_mode="pad").save_pretrained(tmp_path / "tuned")
    processor = script.build_processor(
        script.ModelArguments(model_name_or_path=str(tmp_path / "tuned")), reduced.config
    )
    assert processor.size_divisibility_mode == "pad"  # fine-tuning keeps the checkpoint's processor
