"""The training scripts' building blocks, called directly (no training)."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset, DatasetDict
from helpers import load_script
from PIL import Image
from transformers import MarianConfig, MarianMTModel, ViTConfig, ViTForImageClassification, ViTImageProcessor

import hf_xcv


@pytest.fixture(scope="module")
def script(repo_root):
    return load_script(repo_root / "training" / "train_image_classification.py")


@pytest.fixture(scope="module")
def translation(repo_root):
    return load_script(repo_root / "training" / "train_translation.py")


@pytest.fixture(scope="module")
def tokenizer():
    sentences = ["one hundred and two", "cent deux", "forty-one thousand", "quarante et un mille"] * 5
    return hf_xcv.train_tokenizer(sentences, vocab_size=300)


def test_a_saved_dataset_with_plain_integer_labels_gets_correct_names(script, tmp_path):
    image = Image.new("L", (8, 8))
    labels = {"train": [1, 10, 2, 10], "validation": [2, 1], "test": [10, 2]}
    DatasetDict(
        {k: Dataset.from_dict({"image": [image] * len(v), "label": v}) for k, v in labels.items()}
    ).save_to_disk(tmp_path / "data")
    data = script.load_data(script.DataArguments(dataset=str(tmp_path / "data")), seed=0)
    names = data["train"].features["label"].names
    assert names == ["1", "2", "10"]
    assert [names[i] for i in data["test"]["label"]] == ["10", "2"]  # the same mapping in every split
    model, _ = script.build_model_and_processor(script.ModelArguments(preset="vit-test-tiny"), names)
    assert model.config.id2label == {0: "1", 1: "2", 2: "10"}


def test_fine_tuning_takes_overrides_and_refuses_a_preset_too(script, tmp_path):
    hf_xcv.ViTForImageClassification(hf_xcv.preset_config("vit-test-tiny", num_labels=3)).save_pretrained(tmp_path)
    hf_xcv.XcvViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(tmp_path)
    args = script.ModelArguments(model_name_or_path=str(tmp_path), config_overrides="drop_path_rate=0.1")
    model, processor = script.build_model_and_processor(args, ["a", "b", "c", "d", "e"])
    assert model.config.drop_path_rate == 0.1
    assert model.classifier.out_features == 5 and model.config.id2label[4] == "e"
    with pytest.raises(ValueError, match="either --preset or --model_name_or_path"):
        script.build_model_and_processor(
            script.ModelArguments(preset="vit-digits", model_name_or_path=str(tmp_path)), ["a", "b"]
        )
    with pytest.raises(ValueError, match=r"has no field \['drop_pth_rate'\]"):
        script.build_model_and_processor(script.ModelArguments(config_overrides="drop_pth_rate=0.1"), ["a", "b"])
    with pytest.raises(
        ValueError,
        match=r"'xformer-test-tiny' makes a xcv_xformer model; this script needs an image classifier's preset: "
        r".*'swin-digits'.*'vit-digits'",
    ):
        script.build_model_and_processor(script.ModelArguments(preset="xformer-test-tiny"), ["a", "b"])
    with pytest.raises(ValueError, match="unknown preset") as err:
        script.build_model_and_processor(script.ModelArguments(preset="vit-tny"), ["a", "b"])
    assert "vit-digits" in str(err.value) and "transformer-base" not in str(err.value)  # only what fits


def test_fine_tuning_a_checkpoint_with_another_attention(script, tmp_path):
    """--model_name_or_path with --attention_type: the new core is initialised, the rest is the checkpoint's."""
    hf_xcv.ViTForImageClassification(hf_xcv.preset_config("vit-test-tiny", num_labels=3)).save_pretrained(tmp_path)
    hf_xcv.XcvViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(tmp_path)
    args = script.ModelArguments(model_name_or_path=str(tmp_path), attention_type="performer")
    model, _ = script.build_model_and_processor(args, ["a", "b", "c"])
    assert model.config.attention_type == "performer"
    saved = hf_xcv.ViTForImageClassification.from_pretrained(tmp_path)
    assert torch.equal(model.vit.encoder.layers[0].mlp.fc1.weight, saved.vit.encoder.layers[0].mlp.fc1.weight)


def test_fine_tuning_a_transformers_vit_on_grayscale_images(script, tmp_path):
    """transformers' ViTImageProcessor (three means, no RGB conversion) on the grayscale digits: the script
    converts images to the model's channels before the processor, so batches come out RGB."""
    config = ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=64, num_labels=3)  # fmt: skip
    ViTForImageClassification(config).save_pretrained(tmp_path)
    ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(tmp_path)
    args = script.ModelArguments(model_name_or_path=str(tmp_path))
    model, processor = script.build_model_and_processor(args, [str(i) for i in range(10)])
    assert type(processor) is not hf_xcv.XcvViTImageProcessor  # transformers' own class
    data = script.load_data(script.DataArguments(max_train_samples=8), seed=0)
    loaders = script.build_dataloaders(
        data, processor, script.DataArguments(), script.TrainArguments(output_dir=str(tmp_path / "run")), 3
    )
    batch = next(iter(loaders[0]))
    assert batch["pixel_values"].shape[1:] == (3, 16, 16)
    assert model(**batch).loss.isfinite()


def test_a_saved_translation_dataset_is_checked_and_cut(translation, tmp_path):
    pairs = [{"en": f"{n}", "fr": f"{n}!"} for n in range(6)]
    splits = {"train": pairs, "validation": pairs[:2], "test": pairs[2:4]}
    DatasetDict({k: Dataset.from_dict({"translation": v}) for k, v in splits.items()}).save_to_disk(tmp_path / "ok")
    data = translation.load_data(translation.DataArguments(dataset=str(tmp_path / "ok"), max_train_samples=3))
    assert len(data["train"]) == 3 and translation.translation_texts(data["test"], "fr") == ["2!", "3!"]
    with pytest.raises(ValueError, match="has no 'dev' split"):
        translation.load_data(translation.DataArguments(dataset=str(tmp_path / "ok"), eval_split="dev"))
    DatasetDict({k: Dataset.from_dict({"text": ["a"]}) for k in splits}).save_to_disk(tmp_path / "plain")
    with pytest.raises(ValueError, match="no 'translation' column"):
        translation.load_data(translation.DataArguments(dataset=str(tmp_path / "plain")))


def test_a_fresh_translation_model_takes_vocabulary_and_token_ids_from_the_tokenizer(translation, tokenizer):
    args = translation.ModelArguments(preset="transformer-test-tiny", config_overrides="dropout=0.0")
    config = translation.build_model(args, tokenizer).config
    assert config.vocab_size == config.decoder_vocab_size == len(tokenizer)
    assert (config.pad_token_id, config.eos_token_id, config.decoder_start_token_id) == (0, 2, 1)
    assert config.dropout == 0.0
    with pytest.raises(ValueError, match=r"has no field \['dropot'\]"):
        translation.build_model(translation.ModelArguments(config_overrides="dropot=0.1"), tokenizer)


def test_fine_tuning_a_marian_checkpoint_converts_it_and_checks_the_vocabulary(translation, tokenizer, tmp_path):
    def marian(vocab_size: int, folder):
        config = MarianConfig(
            vocab_size=vocab_size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
            pad_token_id=0, decoder_start_token_id=0, eos_token_id=2,
        )  # fmt: skip
        MarianMTModel(config).save_pretrained(folder)
        return str(folder)

    args = translation.ModelArguments(model_name_or_path=marian(400, tmp_path / "big"), config_overrides="dropout=0.3")
    model = translation.build_model(args, tokenizer)
    assert isinstance(model, hf_xcv.TransformerForConditionalGeneration) and model.config.dropout == 0.3
    with pytest.raises(ValueError, match="more than the model's vocabulary"):
        translation.build_model(
            translation.ModelArguments(model_name_or_path=marian(100, tmp_path / "small")), tokenizer
        )
    with pytest.raises(ValueError, match="either --preset or --model_name_or_path"):
        translation.build_model(
            translation.ModelArguments(preset="transformer-numbers", model_name_or_path=args.model_name_or_path),
            tokenizer,
        )


def test_lengths_beyond_the_models_positions_fail_before_training(translation, tokenizer):
    model = translation.build_model(translation.ModelArguments(preset="transformer-test-tiny"), tokenizer)
    data_args = translation.DataArguments(max_source_length=64, max_target_length=65)
    args = translation.TrainArguments(output_dir="unused", max_new_tokens=64)
    with pytest.raises(ValueError, match=r"--max_target_length 65, --max_new_tokens \(\+1 start token\) 65 exceed"):
        translation.check_lengths(model, data_args, args)
    data_args, args = translation.DataArguments(max_target_length=32), translation.TrainArguments(output_dir="unused")
    translation.check_lengths(model, data_args, args)  # unset limits come from the model's 64 positions
    assert (data_args.max_source_length, data_args.max_target_length, args.max_new_tokens) == (64, 32, 63)


def class_folders(root, per_class: int = 8) -> None:
    """An imagefolder in the most common layout: one sub-folder per class, no split folders."""
    import numpy as np
    import PIL.Image

    rng = np.random.default_rng(0)
    for name in ("cat", "dog", "owl"):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            PIL.Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(root / name / f"{i}.png")


def test_class_folders_without_splits_get_seeded_stratified_ones(script, tmp_path):
    class_folders(tmp_path / "pets")
    args = script.DataArguments(dataset=str(tmp_path / "pets"), train_validation_split=0.25, train_test_split=0.25)
    data = script.load_data(args, seed=0)
    assert {split: len(data[split]) for split in data} == {"train": 12, "validation": 6, "test": 6}
    for split in ("validation", "test"):
        assert sorted(set(data[split]["label"])) == [0, 1, 2]  # every class in each part
    again = script.load_data(args, seed=0)
    assert again["test"]["label"] == data["test"]["label"]
    with pytest.raises(
        ValueError, match=r"has no 'validation' split \(hold part of train out as it: --train_validation_split"
    ):
        script.load_data(script.DataArguments(dataset=str(tmp_path / "pets")), seed=0)
    with pytest.raises(ValueError, match="already has a 'validation' split"):
        script.load_data(script.DataArguments(train_validation_split=0.2), seed=0)  # the digits have one
