"""Built-in datasets and the collators that turn them into batches."""

from .digits import DIGIT_NAMES, load_digits_dataset
from .image_classification import (
    ImageClassificationCollator,
    encode_labels,
    image_classification_transform,
    random_shift,
)
from .translation import load_number_translation_dataset, tokenize_translation_batch, translation_texts

__all__ = [
    "DIGIT_NAMES",
    "ImageClassificationCollator",
    "encode_labels",
    "image_classification_transform",
    "load_digits_dataset",
    "load_number_translation_dataset",
    "random_shift",
    "tokenize_translation_batch",
    "translation_texts",
]
