"""The built-in digits dataset and the batch collator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Image
from PIL import Image as PILImage
from transformers import ViTImageProcessor

from hf_xcv import XcvViTImageProcessor
from hf_xcv.data import (
    ImageClassificationCollator,
    encode_labels,
    image_classification_transform,
    load_digits_dataset,
    random_shift,
)


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset()


def test_digits_splits_are_disjoint_stratified_and_complete(digits):
    assert set(digits) == {"train", "validation", "test"}
    sizes = {name: len(split) for name, split in digits.items()}
    assert sum(sizes.values()) == 1797  # every scan of scikit-learn's digits, none dropped
    assert sizes["validation"] == sizes["test"] == 179
    assert isinstance(digits["train"].features["image"], Image)
    assert isinstance(digits["train"].features["label"], ClassLabel)
    for split in digits.values():
        assert np.bincount(split["label"], minlength=10).min() >= 1
    ids = np.concatenate([np.asarray(split["id"]) for split in digits.values()])
    assert sorted(ids.tolist()) == list(range(1797))  # disjoint and complete: every sample in exactly one split
    from sklearn.datasets import load_digits

    source = load_digits()
    for split in digits.values():
        sample = split[5]
        assert sample["label"] == source.target[sample["id"]]
        expected = np.round(source.images[sample["id"]] * 255 / 16).astype(np.uint8)
        assert np.array_equal(np.asarray(sample["image"]), expected)


def test_digits_are_real_8x8_grayscale_images_and_deterministic(digits):
    image = digits["train"][0]["image"]
    assert image.size == (8, 8) and image.mode == "L"
    assert np.asarray(image).max() <= 255
    again = load_digits_dataset()
    assert again["test"]["label"] == digits["test"]["label"]
    other = load_digits_dataset(seed=1)
    assert other["test"]["label"] != digits["test"]["label"]


def test_bad_split_fractions():
    with pytest.raises(ValueError, match="validation_fraction"):
        load_digits_dataset(validation_fraction=0.6, test_fraction=0.5)


def test_transform_and_collator_make_model_batches(digits):
    processor = XcvViTImageProcessor(size={"height": 16, "width": 16})
    dataset = digits["train"].with_transform(image_classification_transform(processor))
    batch = ImageClassificationCollator()([dataset[i] for i in range(4)])
    assert batch["pixel_values"].shape == (4, 3, 16, 16) and batch["pixel_values"].dtype == torch.float32
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == digits["train"]["label"][:4]


def test_the_transform_converts_images_to_the_models_channels(digits):
    """transformers' ViTImageProcessor converts nothing: a grayscale image breaks its three-channel
    normalisation unless the transform converts it first (RGBA loses its alpha the same way)."""
    theirs = ViTImageProcessor(size={"height": 16, "width": 16})
    ours = XcvViTImageProcessor(size={"height": 16, "width": 16})
    with pytest.raises(ValueError):
        digits["train"].with_transform(image_classification_transform(theirs))[0]
    converted = digits["train"].with_transform(image_classification_transform(theirs, num_channels=3))
    reference = digits["train"].with_transform(image_classification_transform(ours))
    for i in range(3):
        assert converted[i]["pixel_values"].shape == (3, 16, 16)
        np.testing.assert_allclose(converted[i]["pixel_values"], reference[i]["pixel_values"], atol=1e-6)
    rgba = PILImage.new("RGBA", (8, 8), (10, 20, 30, 0))
    transform = image_classification_transform(theirs, num_channels=3)
    assert transform({"image": [rgba]})["pixel_values"][0].shape == (3, 16, 16)
    with pytest.raises(ValueError, match="num_channels must be 1 or 3"):
        image_classification_transform(theirs, num_channels=4)


def test_collator_multilabel_and_errors():
    collator = ImageClassificationCollator()
    batch = collator([{"pixel_values": np.zeros((3, 4, 4)), "labels": [0.0, 1.0]}] * 2)
    assert batch["labels"].dtype == torch.float32 and batch["labels"].shape == (2, 2)
    with pytest.raises(ValueError, match="sample 1 of the batch has no 'pixel_values'"):
        collator([{"pixel_values": np.zeros((3, 4, 4))}, {"image": None}])
    with pytest.raises(ValueError, match=r"sample 1 has pixel_values of shape \(3, 5, 5\)"):
        collator([{"pixel_values": np.zeros((3, 4, 4))}, {"pixel_values": np.zeros((3, 5, 5))}])
    with pytest.raises(ValueError, match="empty batch"):
        collator([])


def test_random_shift_moves_content_and_keeps_shape():
    images = torch.zeros(64, 1, 6, 6)
    images[:, :, 2:4, 2:4] = 1.0
    shifted = random_shift(images, 2, fill=0.0, generator=torch.Generator().manual_seed(0))
    assert shifted.shape == images.shape
    assert torch.equal(shifted.sum(dim=(1, 2, 3)), images.sum(dim=(1, 2, 3)))  # content stays inside
    assert not torch.equal(shifted, images)
    assert torch.equal(random_shift(images, 0, fill=0.0), images)
    # per-channel fill: every pixel is either image (0) or that channel's fill value
    colour = random_shift(torch.zeros(16, 3, 5, 5), 2, fill=[1.0, 2.0, 3.0], generator=torch.Generator().manual_seed(1))
    values = {tuple(pixel) for pixel in colour.permute(0, 2, 3, 1).reshape(-1, 3).tolist()}
    assert values == {(0.0, 0.0, 0.0), (1.0, 2.0, 3.0)}


def test_collator_keeps_integer_tensor_labels_integer():
    collator = ImageClassificationCollator()
    for label in (torch.tensor(1), np.int64(1), np.array(1), 1):
        batch = collator([{"pixel_values": np.zeros((3, 4, 4)), "labels": label}] * 2)
        assert batch["labels"].dtype == torch.long, type(label)
    regression = collator([{"pixel_values": np.zeros((3, 4, 4)), "labels": 0.5}] * 2)
    assert regression["labels"].dtype == torch.float32 and regression["labels"].shape == (2,)
    with pytest.raises(ValueError, match="some samples of the batch have labels and some do not"):
        collator([{"pixel_values": np.zeros((3, 4, 4)), "labels": 1}, {"pixel_values": np.zeros((3, 4, 4))}])


def test_encode_labels_one_mapping_for_all_splits():
    data = DatasetDict(
        train=Dataset.from_dict({"label": [3, 11, 2, 3]}), test=Dataset.from_dict({"label": [11, 2, 40]})
    )
    encoded = encode_labels(data)
    names = encoded["train"].features["label"].names
    assert names == ["2", "3", "11", "40"]  # integers sort numerically, over every split
    assert encoded["train"]["label"][:] == [1, 2, 0, 1]
    assert encoded["test"]["label"][:] == [2, 0, 3]
    words = encode_labels(DatasetDict(train=Dataset.from_dict({"label": ["owl", "cat"]})))
    assert words["train"].features["label"].names == ["cat", "owl"]
    assert words["train"]["label"][:] == [1, 0]
    digits = load_digits_dataset()
    assert encode_labels(digits) is digits  # already a ClassLabel
    with pytest.raises(KeyError, match="no column 'target'"):
        encode_labels(data, "target")
