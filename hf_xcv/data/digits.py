"""scikit-learn's handwritten digits as a ``datasets.DatasetDict`` with an Image feature.

1,797 real 8x8 grayscale scans of the digits 0-9 (UCI ML hand-written digits), shipped inside the
scikit-learn wheel, so it works offline. Split stratified by class with a fixed seed.
"""

from __future__ import annotations

import numpy as np
import PIL.Image
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Value

from ..utils.errors import UsageError

DIGIT_NAMES = [str(i) for i in range(10)]


def _stratified_split(labels: np.ndarray, fractions: tuple[float, float], seed: int) -> dict[str, np.ndarray]:
    """Indices of train / validation / test, each class split in the same proportions."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[int]] = {"train": [], "validation": [], "test": []}
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_val = int(round(len(members) * fractions[0]))
        n_test = int(round(len(members) * fractions[1]))
        parts["validation"] += members[:n_val].tolist()
        parts["test"] += members[n_val : n_val + n_test].tolist()
        parts["train"] += members[n_val + n_test :].tolist()
    return {name: np.sort(np.array(index)) for name, index in parts.items()}


def load_digits_dataset(validation_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0) -> DatasetDict:
    """Digits as PIL grayscale images (0-255) with a ClassLabel and the sample's ``id`` in scikit-learn's
    array; splits train / validation / test."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("the digits dataset needs scikit-learn: pip install 'hf_xcv[data]'") from err
    if not (0 < validation_fraction < 1 and 0 < test_fraction < 1 and validation_fraction + test_fraction < 1):
        raise UsageError(
            f"validation_fraction={validation_fraction} and test_fraction={test_fraction} must be in (0, 1) "
            "and sum to less than 1"
        )
    digits = load_digits()
    pixels = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)  # (1797, 8, 8), 0..16 -> 0..255
    labels = digits.target.astype(np.int64)
    features = Features({"image": Image(), "label": ClassLabel(names=DIGIT_NAMES), "id": Value("int64")})
    splits = _stratified_split(labels, (validation_fraction, test_fraction), seed)
    return DatasetDict(
        {
            name: Dataset.from_dict(
                {
                    "image": [PIL.Image.fromarray(pixels[i]) for i in index],
                    "label": labels[index].tolist(),
                    "id": index.tolist(),  # position in sklearn.datasets.load_digits()
                },
                features=features,
            )
            for name, index in splits.items()
        }
    )
