"""The papers' recipes: ``--recipe`` in the image-classification script (values, overrides, the card, exact resume)
and everything of a recipe at once under transformers' Trainer (train-time transforms, Mixup / CutMix in training
steps only, layer-wise learning-rate decay, the EMA evaluated, saved and reloaded)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from hf_xcv.cli import train_image_classification as script
from hf_xcv.training.recipes import RECIPES
from hf_xcv.utils.errors import UsageError

QUICK = ["--preset", "vit-test-tiny", "--max_train_samples", "48", "--per_device_train_batch_size", "16",
         "--eval_every_epochs", "0", "--disable_tqdm"]  # fmt: skip


def resolved(argv: list[str]):
    _, data_args, args = script.parse_args(["--output_dir", "x", *argv])
    recipe = script.apply_recipe(["--output_dir", "x", *argv], data_args, args)
    return recipe, data_args, args


def test_a_recipe_sets_every_option_the_command_line_leaves_and_scales_the_learning_rate():
    recipe, data_args, args = resolved(["--recipe", "deit", "--per_device_train_batch_size", "64",
                                        "--gradient_accumulation_steps", "2", "--mixup_alpha", "0.2"])  # fmt: skip
    deit = RECIPES["deit"]
    assert recipe is deit
    assert args.learning_rate == pytest.approx(5e-4 * 128 / 512)  # linear scaling to the total batch
    assert data_args.mixup_alpha == 0.2  # given on the command line: kept
    assert (data_args.cutmix_alpha, data_args.random_erasing, data_args.rand_augment) == (1.0, 0.25, deit.rand_augment)
    assert (args.model_ema, args.model_ema_decay, args.drop_path_rate, args.max_grad_norm) == (True, 0.99996, 0.1, 0.0)
    assert data_args.max_shift == 0  # the random resized crop replaces the shift
    _, _, swin = resolved(["--recipe", "swin", "--learning_rate", "0.01"])
    assert (swin.learning_rate, swin.max_grad_norm, swin.model_ema) == (0.01, 5.0, False)
    _, _, finetune = resolved(["--recipe", "finetune"])
    assert finetune.layer_decay == 0.75


@pytest.mark.parametrize("spelling", ["--learning-rate", "--learning_r", "--learning_rate=1e-4"])
def test_an_option_given_in_any_spelling_the_parser_takes_wins_over_the_recipe(spelling):
    argv = ["--recipe", "deit", spelling] + ([] if "=" in spelling else ["1e-4"])
    _, _, args = resolved(argv)
    assert args.learning_rate == 1e-4


def test_a_dataset_that_draws_per_epoch_gets_every_epoch_under_a_sharded_sampler():
    """With several processes accelerate's set_epoch stops at the sharded sampler: the runner tells the dataset."""
    from accelerate.data_loader import BatchSamplerShard, DataLoaderShard, SeedableRandomSampler
    from torch.utils.data import BatchSampler

    from hf_xcv.training.runner import set_epoch

    class Draws(torch.utils.data.Dataset):
        epoch = None

        def __len__(self):
            return 8

        def __getitem__(self, index):
            return index

        def set_epoch(self, epoch):
            self.epoch = epoch

    dataset = Draws()
    sampler = BatchSamplerShard(BatchSampler(SeedableRandomSampler(dataset), 2, False), num_processes=2)
    loader = DataLoaderShard(dataset, batch_sampler=sampler)
    loader.set_epoch(3)
    assert dataset.epoch is None  # accelerate's own call does not reach it (the bug this guards against)
    set_epoch(loader, 3)
    assert dataset.epoch == 3


def test_without_a_recipe_the_training_is_plain_and_an_unknown_recipe_is_refused():
    recipe, data_args, args = resolved([])
    assert recipe is None and data_args.rand_augment is None and data_args.crop_scale_min is None
    assert (data_args.mixup_alpha, data_args.cutmix_alpha, data_args.label_smoothing, data_args.hflip) == (0, 0, 0, 0)
    assert args.model_ema is False and args.layer_decay is None and data_args.max_shift == 2
    with pytest.raises(UsageError, match="unknown recipe 'beit'"):
        resolved(["--recipe", "beit"])


def test_a_run_with_the_recipe_resumes_bit_identically_and_its_card_names_the_recipe(tmp_path):
    """RandAugment, crop, flip (per sample, seeded by seed/epoch/index), erasing and Mixup / CutMix (in the loss,
    after the loop's reseed), the EMA: a run stopped and resumed across an epoch ends as the uninterrupted one."""
    common = [*QUICK, "--recipe", "deit", "--max_train_steps", "5", "--checkpointing_steps", "2",
              "--learning_rate", "1e-3"]  # fmt: skip
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    script.main(["--output_dir", str(straight), *common])
    assert script.main(["--output_dir", str(resumed), "--stop_after_steps", "3", *common]) is None
    script.main(["--output_dir", str(resumed), "--resume_from_checkpoint", "latest", *common])
    for name in ("model.safetensors", "raw_weights/model.safetensors"):
        a, b = load_file(straight / name), load_file(resumed / name)
        assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a), name
    card = (straight / "README.md").read_text()
    assert "Trained with the `deit` recipe (Touvron et al. 2021" in card and "Mixup 0.8, CutMix 1.0" in card
    recorded = json.loads((straight / "xcv_run.json").read_text())
    assert recorded["train"]["recipe"] == "deit" and recorded["data"]["rand_augment"] == "rand-m9-mstd0.5-inc1"


def test_trainer_runs_the_whole_recipe_mixing_training_batches_only(tmp_path):
    from transformers import Trainer, TrainingArguments

    import hf_xcv
    from hf_xcv.data import (
        ImageClassificationCollator,
        MixupCutmix,
        image_classification_transform,
        load_digits_dataset,
    )
    from hf_xcv.data.augment import image_classification_train_transform
    from hf_xcv.training import EmaCallback, MixupCallback, holds_ema_weights, layer_decay_parameter_groups

    digits = load_digits_dataset()
    torch.manual_seed(0)
    config = hf_xcv.preset_config("vit-test-tiny", num_labels=10, image_size=8, patch_size=2,
                                  problem_type="single_label_classification", drop_path_rate=0.1)  # fmt: skip
    model = hf_xcv.ViTForImageClassification(config)
    processor = hf_xcv.XcvViTImageProcessor(size={"height": 8, "width": 8})
    train = digits["train"].select(range(96))
    train.set_transform(image_classification_train_transform(processor, num_channels=3))  # RandAugment, crop, erase
    evaluation = digits["validation"].with_transform(image_classification_transform(processor, num_channels=3))
    mixer = MixupCutmix(num_labels=10)  # Mixup 0.8 / CutMix 1.0, smoothing 0.1
    drawn = []
    mix_and_count = lambda pixels, labels: drawn.append(len(labels)) or mixer(pixels, labels)  # noqa: E731
    mix_and_count.num_labels = 10
    ema = EmaCallback(decay=0.9, use_warmup=True)
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=16, per_device_eval_batch_size=200,
        max_steps=4, eval_strategy="steps", eval_steps=2, save_strategy="no", report_to="none", use_cpu=True,
        remove_unused_columns=False, seed=0, logging_steps=1,
    )  # fmt: skip
    groups = layer_decay_parameter_groups(model, learning_rate=1e-3, weight_decay=0.05, layer_decay=0.75)
    trainer = Trainer(
        model=model, args=args, train_dataset=train, eval_dataset=evaluation,
        data_collator=ImageClassificationCollator(), optimizers=(torch.optim.AdamW(groups), None),
        callbacks=[ema, MixupCallback(mix_and_count)],
    )  # fmt: skip
    trainer.train()
    assert drawn == [16] * 4  # every training batch mixed, no evaluation batch
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 4 and all(np.isfinite(losses)) and 1.5 < losses[0] < 3.5  # ~ln 10: the count is right
    # the evaluation after training is of the EMA weights, on class ids as they are
    logged = [entry["eval_loss"] for entry in trainer.state.log_history if "eval_loss" in entry]
    assert holds_ema_weights(model)["updates"] == 4
    batch = ImageClassificationCollator()([evaluation[i] for i in range(len(evaluation))])
    with torch.no_grad():
        logits = model.eval()(pixel_values=batch["pixel_values"]).logits
    plain = torch.nn.functional.cross_entropy(logits, batch["labels"]).item()
    assert logged[-1] == pytest.approx(plain, rel=1e-5)
    trainer.save_model(str(tmp_path / "final"))
    reloaded = hf_xcv.ViTForImageClassification.from_pretrained(tmp_path / "final")
    assert holds_ema_weights(reloaded)["updates"] == 4
    assert all(torch.equal(a, b) for a, b in zip(reloaded.parameters(), model.parameters()))
    assert not model._forward_pre_hooks  # the mixing hook is gone after training


def test_mixup_under_trainer_needs_a_single_label_problem_type():
    import hf_xcv
    from hf_xcv.data import MixupCutmix
    from hf_xcv.training import MixupCallback

    model = hf_xcv.ViTForImageClassification(hf_xcv.preset_config("vit-test-tiny", num_labels=10))
    with pytest.raises(UsageError, match="problem_type"):
        MixupCallback(MixupCutmix(num_labels=10)).on_train_begin(None, None, None, model=model)
