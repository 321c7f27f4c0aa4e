"""Built-in datasets and the collators that turn them into batches."""

from ..processing.restoration import mod_crop
from .augment import (
    ImageClassificationEvalTransform,
    ImageClassificationTrainTransform,
    RandAugment,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    image_classification_eval_transform,
    image_classification_train_transform,
)
from .coco import (
    find_split,
    load_coco_detection,
    load_coco_split,
    load_detection_dataset,
    load_detection_folder,
    split_role,
    write_coco_detection,
)
from .detection import check_detection_dataset, detection_transform
from .digits import DIGIT_NAMES, load_digits_dataset
from .image_classification import (
    ImageClassificationCollator,
    check_classification_dataset,
    encode_labels,
    image_classification_transform,
    random_shift,
)
from .mixup import MixDraw, MixupCutmix, MixupCutmixCollator
from .photos import (
    load_photo,
    load_photos_dataset,
    load_restoration_folder,
    panned_views,
    photo_features,
    training_crops,
)
from .shapes import (
    SHAPE_CATEGORIES,
    detection_features,
    detection_label_maps,
    detection_label_names,
    load_shapes_dataset,
)
from .translation import load_number_translation_dataset, tokenize_translation_batch, translation_texts

__all__ = [
    "DIGIT_NAMES",
    "ImageClassificationCollator",
    "ImageClassificationEvalTransform",
    "ImageClassificationTrainTransform",
    "RandAugment",
    "RandomErasing",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "MixDraw",
    "MixupCutmix",
    "MixupCutmixCollator",
    "SHAPE_CATEGORIES",
    "check_classification_dataset",
    "check_detection_dataset",
    "detection_features",
    "detection_label_maps",
    "detection_label_names",
    "detection_transform",
    "encode_labels",
    "find_split",
    "image_classification_eval_transform",
    "image_classification_train_transform",
    "image_classification_transform",
    "load_coco_detection",
    "load_coco_split",
    "load_detection_dataset",
    "load_detection_folder",
    "load_digits_dataset",
    "load_number_translation_dataset",
    "load_photo",
    "load_photos_dataset",
    "load_restoration_folder",
    "load_shapes_dataset",
    "mod_crop",
    "panned_views",
    "photo_features",
    "random_shift",
    "split_role",
    "tokenize_translation_batch",
    "training_crops",
    "translation_texts",
    "write_coco_detection",
]
