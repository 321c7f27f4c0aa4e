"""The built-in digits dataset and the batch collator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import ClassLabel, Image

from hf_xcv import ViTImageProcessor
from hf_xcv.data import ImageClassificationCollator, image_classification_transform, load_digits_dataset, random_shift
from hf_xcv.data.digits import _stratified_split


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
    labels = np.concatenate([np.asarray(split["label"]) for split in digits.values()])
    index = _stratified_split(np.sort(labels), (0.1, 0.1), seed=0)
    together = np.concatenate(list(index.values()))
    assert len(together) == len(set(together.tolist())) == 1797  # disjoint and complete


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
    processor = ViTImageProcessor(size={"height": 16, "width": 16})
    dataset = digits["train"].with_transform(image_classification_transform(processor))
    batch = ImageClassificationCollator()([dataset[i] for i in range(4)])
    assert batch["pixel_values"].shape == (4, 3, 16, 16) and batch["pixel_values"].dtype == torch.float32
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == digits["train"]["label"][:4]


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
