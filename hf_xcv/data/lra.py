"""Long Range Arena–style classification tasks, generated offline: ListOps, Pathfinder and digits as pixel sequences.

Each loader returns a ``datasets.DatasetDict`` with ``train`` / ``validation`` / ``test`` splits of
``input_ids`` (one token per list symbol or pixel), ``attention_mask`` (1 on real tokens; ListOps pads to
``max_length``) and ``label`` (a ClassLabel). Everything is drawn from ``numpy.random.default_rng`` with the
given seed (each split from its own stream), so the same arguments give the same data on every machine.

- :func:`load_listops_dataset` — ListOps (Nangia & Bowman 2018, as the Long Range Arena uses it, Tay et al.
  2021): nested ``[MAX`` / ``[MIN`` / ``[MED`` / ``[SM`` expressions over the digits 0-9, label = the value
  (10 classes). ``MED`` is the median rounded down (``int(numpy.median)``), ``SM`` the sum modulo 10. The LRA
  draws random trees (a digit with probability 0.25, else an operator with 2..``max_args`` arguments, at most
  ``max_depth`` levels) and keeps those whose length is in [``min_length``, ``max_length``]; its lengths run
  to 2,000 tokens. Here a tree is drawn to a length budget instead (each operator splits its budget among its
  arguments at random cut points), which reaches long expressions without discarding most draws. Parentheses
  are left out (LRA's file writes each subtree in them; they carry no information). Classes are balanced
  exactly: expressions are drawn until every label has its share (draws of a full label are discarded).
- :func:`load_pathfinder_dataset` — Pathfinder (Linsley et al. 2018): ``image_size`` x ``image_size`` grey
  images of dashed curved paths; two end points are marked with bright squares; label 1 when both marks
  end the same path, 0 when they end two different paths. Every image holds the same number of paths
  (``2 + num_distractors``), so counting marks, paths or bright pixels says nothing about the label.
  Paths never touch (each keeps one free pixel around the others), so the label is the connectivity of
  the marks along the drawn curves. The distance between the two marks does not tell it either: a layout is kept
  only when an end of the second path lies as far (within ``match_distance`` pixels) from the first mark as the
  first path's other end, and the label only picks which of the two is marked. Difficulty: ``path_length``
  (unit steps per path), ``num_distractors``, ``dash_length`` / ``gap_length`` (gaps make the curve harder to
  follow), ``max_turn`` (curvature) and ``path_intensity`` (the grey of the paths; the marks are white).
  Flattened row by row: 32 x 32 = 1,024 tokens, as the LRA's.
- :func:`load_lra_image_dataset` — scikit-learn's 8 x 8 digits upscaled (bilinear) to 32 x 32 grey levels,
  1,024 pixel tokens: a stand-in for the LRA's sequential grey CIFAR-10, which cannot be downloaded here.

Pixel tasks use the grey level (0-255) itself as the token id (vocabulary 256), as the LRA does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value

from ..utils.errors import UsageError

SPLITS = ("train", "validation", "test")

# ---- ListOps ----

LISTOPS_OPERATORS = ("[MAX", "[MIN", "[MED", "[SM")
LISTOPS_END = "]"
# id 0 pads; ids 1..10 are the digits 0..9, then the operators and the closing bracket.
LISTOPS_VOCAB = ("<pad>", *(str(d) for d in range(10)), *LISTOPS_OPERATORS, LISTOPS_END)
LISTOPS_IDS = {token: i for i, token in enumerate(LISTOPS_VOCAB)}


def apply_listops(operator: str, values: list[int]) -> int:
    """The value of one operator over its arguments' values."""
    if operator == "[MAX":
        return max(values)
    if operator == "[MIN":
        return min(values)
    if operator == "[MED":
        return int(np.median(values))
    if operator == "[SM":
        return sum(values) % 10
    raise UsageError(f"unknown ListOps operator {operator!r}; known: {LISTOPS_OPERATORS}")


def _listops_tree(rng: np.random.Generator, budget: int, max_args: int, depth: int, max_depth: int):
    """(tokens, value) of an expression of at most ``budget`` tokens (a digit when fewer than 4 fit)."""
    if budget < 4 or depth >= max_depth:
        digit = int(rng.integers(10))
        return [str(digit)], digit
    operator = LISTOPS_OPERATORS[int(rng.integers(len(LISTOPS_OPERATORS)))]
    inner = budget - 2  # the operator and its closing bracket
    count = int(rng.integers(2, min(max_args, inner) + 1))
    cuts = np.sort(rng.choice(np.arange(1, inner), size=count - 1, replace=False)) if count > 1 else []
    sizes = np.diff(np.concatenate([[0], cuts, [inner]])).tolist()
    tokens, values = [operator], []
    for size in sizes:
        child, value = _listops_tree(rng, int(size), max_args, depth + 1, max_depth)
        tokens += child
        values.append(value)
    return tokens + [LISTOPS_END], apply_listops(operator, values)


def listops_example(
    rng: np.random.Generator, min_length: int, max_length: int, max_args: int = 10, max_depth: int = 10
) -> tuple[list[str], int]:
    """One expression with ``min_length`` <= length <= ``max_length`` tokens, and its value."""
    for _ in range(1000):
        tokens, value = _listops_tree(rng, int(rng.integers(min_length, max_length + 1)), max_args, 0, max_depth)
        if min_length <= len(tokens) <= max_length:
            return tokens, value
    raise UsageError(
        f"no expression of {min_length}-{max_length} symbols in 1000 draws with max_args={max_args} and "
        f"max_depth={max_depth}: trees that shallow and narrow stay shorter; raise max_depth or max_args, or lower "
        "min_length"
    )


def _balanced(draw: Callable[[], tuple[list, int]], count: int, num_classes: int) -> list[tuple[list, int]]:
    """``count`` draws with every label's share equal (the first ``count % num_classes`` labels get one more)."""
    quota = [count // num_classes + (label < count % num_classes) for label in range(num_classes)]
    kept: list[tuple[list, int]] = []
    while len(kept) < count:
        item = draw()
        if quota[item[1]]:
            quota[item[1]] -= 1
            kept.append(item)
    return kept


def _split_sizes(num_train: int, num_validation: int, num_test: int) -> dict[str, int]:
    sizes = dict(zip(SPLITS, (num_train, num_validation, num_test)))
    for name, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise UsageError(f"num_{name} must be a positive int, got {size!r}")
    return sizes


def _split_rngs(seed: int) -> dict[str, np.random.Generator]:
    """One independent stream per split: changing one split's size leaves the others' samples as they were."""
    return {name: np.random.default_rng([seed, i]) for i, name in enumerate(SPLITS)}


def _sequence_features(num_classes: int, names: list[str] | None = None) -> Features:
    return Features(
        {
            "input_ids": Sequence(Value("int16")),
            "attention_mask": Sequence(Value("int8")),
            "label": ClassLabel(num_classes=num_classes, names=names),
        }
    )


def load_listops_dataset(
    num_train: int = 10000,
    num_validation: int = 1000,
    num_test: int = 1000,
    min_length: int = 256,
    max_length: int = 512,
    max_args: int = 10,
    max_depth: int = 10,
    seed: int = 0,
) -> DatasetDict:
    """ListOps splits (see the module docstring): ``input_ids`` padded with 0 to ``max_length``, a
    ``length`` column with each expression's own length, 10 balanced classes."""
    sizes = _split_sizes(num_train, num_validation, num_test)
    if not (isinstance(min_length, int) and isinstance(max_length, int) and 4 <= min_length <= max_length):
        raise UsageError(f"need 4 <= min_length <= max_length, got min_length={min_length}, max_length={max_length}")
    if not (isinstance(max_args, int) and max_args >= 2) or not (isinstance(max_depth, int) and max_depth >= 1):
        raise UsageError(f"need max_args >= 2 and max_depth >= 1, got max_args={max_args}, max_depth={max_depth}")
    features = _sequence_features(10, [str(d) for d in range(10)])
    features["length"] = Value("int32")
    splits = {}
    for name, rng in _split_rngs(seed).items():
        draw = lambda rng=rng: listops_example(rng, min_length, max_length, max_args, max_depth)  # noqa: E731
        rows = _balanced(draw, sizes[name], 10)
        ids = [[LISTOPS_IDS[t] for t in tokens] + [0] * (max_length - len(tokens)) for tokens, _ in rows]
        mask = [[1] * len(tokens) + [0] * (max_length - len(tokens)) for tokens, _ in rows]
        columns = {"input_ids": ids, "attention_mask": mask, "label": [value for _, value in rows]}
        columns["length"] = [len(tokens) for tokens, _ in rows]
        splits[name] = Dataset.from_dict(columns, features=features)
    return DatasetDict(splits)


def decode_listops(input_ids: list[int]) -> list[str]:
    """Token ids back to symbols, padding dropped."""
    return [LISTOPS_VOCAB[i] for i in input_ids if i != 0]


# ---- Pathfinder ----


@dataclass(frozen=True)
class PathfinderExample:
    """One image: ``image`` (H, W) uint8 as drawn (dashed), ``solid`` the same paths and marks undashed,
    ``label`` 1 when the marks end one path, ``marks`` the two marked end points (row, column)."""

    image: np.ndarray
    solid: np.ndarray
    label: int
    marks: tuple[tuple[int, int], tuple[int, int]]


def _curve(rng: np.random.Generator, size: int, length: int, max_turn: float, margin: int) -> list[tuple[int, int]]:
    """Pixels of a smooth random curve of ``length`` unit steps inside the margin, or [] when it left the image.

    The heading turns by at most ``max_turn`` radians per step; consecutive pixels are 8-neighbours."""
    y, x = rng.uniform(margin, size - 1 - margin, size=2)
    heading = rng.uniform(0, 2 * math.pi)
    pixels = [(round(y), round(x))]
    for _ in range(length - 1):
        heading += rng.uniform(-max_turn, max_turn)
        y, x = y + math.sin(heading), x + math.cos(heading)
        if not (margin <= y <= size - 1 - margin and margin <= x <= size - 1 - margin):
            return []
        pixel = (round(y), round(x))
        if pixel != pixels[-1]:
            pixels.append(pixel)
    return pixels


def _mark(point: tuple[int, int], size: int, radius: int) -> list[tuple[int, int]]:
    y, x = point
    return [
        (i, j)
        for i in range(y - radius, y + radius + 1)
        for j in range(x - radius, x + radius + 1)
        if 0 <= i < size and 0 <= j < size
    ]


def _near(a: set[tuple[int, int]], b: set[tuple[int, int]]) -> bool:
    """Whether a pixel of ``a`` is one of ``b``'s pixels or their 8-neighbours (the two would touch)."""
    return any((y + dy, x + dx) in b for y, x in a for dy in (-1, 0, 1) for dx in (-1, 0, 1))


def pathfinder_example(
    rng: np.random.Generator,
    label: int,
    image_size: int = 32,
    path_length: int = 14,
    num_distractors: int = 1,
    dash_length: int = 2,
    gap_length: int = 1,
    max_turn: float = 0.35,
    mark_radius: int = 1,
    path_intensity: int = 255,
    match_distance: float = 0.5,
    max_tries: int = 10000,
) -> PathfinderExample:
    """Draw one Pathfinder image with the given label (see the module docstring)."""
    margin = mark_radius + 1
    for _ in range(max_tries):
        paths: list[list[tuple[int, int]]] = []
        taken: set[tuple[int, int]] = set()
        for _ in range(2 + num_distractors):
            for _ in range(50):
                pixels = _curve(rng, image_size, path_length, max_turn, margin)
                if len(pixels) < 4:
                    continue
                # the path with its end marks must keep a free pixel to every path drawn so far
                body = set(pixels) | set(_mark(pixels[0], image_size, mark_radius))
                body |= set(_mark(pixels[-1], image_size, mark_radius))
                if not _near(body, taken):
                    paths.append(pixels)
                    taken |= body
                    break
            else:
                break
        if len(paths) < 2 + num_distractors:
            continue
        first, second = paths[0], paths[1]
        # The layout is kept only when it serves both labels alike: an end of the second path lies as far from the
        # first mark as the first path's other end does (within match_distance pixels), so that the distance
        # between the marks tells nothing; the label then only picks which end is marked.
        reach = math.dist(first[0], first[-1])
        ends = [end for end in (second[0], second[-1]) if abs(math.dist(first[0], end) - reach) <= match_distance]
        if not ends:
            continue
        marks = (first[0], first[-1]) if label == 1 else (first[0], ends[int(rng.integers(len(ends)))])
        image = np.zeros((image_size, image_size), np.uint8)
        solid = np.zeros_like(image)
        period = dash_length + gap_length
        for pixels in paths:
            for step, (y, x) in enumerate(pixels):
                solid[y, x] = path_intensity
                if step % period < dash_length:
                    image[y, x] = path_intensity
        for point in marks:
            for y, x in _mark(point, image_size, mark_radius):
                image[y, x] = solid[y, x] = 255
        return PathfinderExample(image, solid, label, marks)
    raise UsageError(
        f"could not place {2 + num_distractors} paths of {path_length} steps apart in a {image_size}x{image_size} "
        f"image (with marks {match_distance} px from equidistant) in {max_tries} tries: lower path_length or "
        "num_distractors, or raise image_size or match_distance"
    )


def load_pathfinder_dataset(
    num_train: int = 10000,
    num_validation: int = 1000,
    num_test: int = 1000,
    image_size: int = 32,
    path_length: int = 14,
    num_distractors: int = 1,
    dash_length: int = 2,
    gap_length: int = 1,
    max_turn: float = 0.35,
    path_intensity: int = 255,
    match_distance: float = 0.5,
    seed: int = 0,
) -> DatasetDict:
    """Pathfinder splits (see the module docstring): ``image_size**2`` pixel tokens, labels alternating
    0 / 1 in a shuffled order (balanced exactly, up to one for odd sizes)."""
    sizes = _split_sizes(num_train, num_validation, num_test)
    checks = {"image_size": (image_size, 8), "path_length": (path_length, 4), "num_distractors": (num_distractors, 0)}
    checks |= {"dash_length": (dash_length, 1), "gap_length": (gap_length, 0)}
    for name, (value, least) in checks.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UsageError(f"{name} must be an int >= {least}, got {value!r}")
    if not 0 <= max_turn <= math.pi:
        raise UsageError(f"max_turn must be in [0, pi] radians, got {max_turn}")
    if isinstance(path_intensity, bool) or not isinstance(path_intensity, int) or not 1 <= path_intensity <= 255:
        raise UsageError(f"path_intensity must be an int grey level in [1, 255], got {path_intensity!r}")
    if not match_distance >= 0:
        raise UsageError(f"match_distance must be >= 0 pixels, got {match_distance}")
    features = _sequence_features(2, ["disconnected", "connected"])
    splits = {}
    for name, rng in _split_rngs(seed).items():
        labels = rng.permutation(np.arange(sizes[name]) % 2)
        images = [
            pathfinder_example(
                rng, int(label), image_size, path_length, num_distractors, dash_length, gap_length, max_turn,
                path_intensity=path_intensity, match_distance=match_distance,
            ).image
            for label in labels
        ]
        ids = np.stack(images).reshape(len(images), -1) if images else np.zeros((0, image_size**2))
        columns = {"input_ids": ids.tolist(), "attention_mask": np.ones_like(ids, np.int8).tolist()}
        splits[name] = Dataset.from_dict(columns | {"label": labels.tolist()}, features=features)
    return DatasetDict(splits)


# ---- digits as pixel sequences ----


def load_lra_image_dataset(image_size: int = 32, seed: int = 0) -> DatasetDict:
    """scikit-learn's digits (hf_xcv.data.load_digits_dataset, its stratified splits), upscaled bilinearly to
    ``image_size`` x ``image_size`` grey levels and flattened row by row into pixel tokens."""
    import PIL.Image

    from .digits import DIGIT_NAMES, load_digits_dataset

    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 8:
        raise UsageError(f"image_size must be an int >= 8 (the digits are 8x8), got {image_size!r}")
    digits = load_digits_dataset(seed=seed)
    features = _sequence_features(10, list(DIGIT_NAMES))
    splits = {}
    for name in SPLITS:
        images = [
            np.asarray(image.convert("L").resize((image_size, image_size), PIL.Image.BILINEAR))
            for image in digits[name]["image"]
        ]
        ids = np.stack(images).reshape(len(images), -1)
        columns = {"input_ids": ids.tolist(), "attention_mask": np.ones_like(ids, np.int8).tolist()}
        splits[name] = Dataset.from_dict(columns | {"label": digits[name]["label"]}, features=features)
    return DatasetDict(splits)


LRA_TASKS: dict[str, Callable[..., DatasetDict]] = {
    "listops": load_listops_dataset,
    "pathfinder": load_pathfinder_dataset,
    "image": load_lra_image_dataset,
}


def load_lra_dataset(task: str, seed: int = 0, **settings) -> DatasetDict:
    """``load_<task>`` by name: ``listops``, ``pathfinder`` or ``image``; ``settings`` go to that loader."""
    if task not in LRA_TASKS:
        raise UsageError(f"unknown LRA task {task!r}; available: {sorted(LRA_TASKS)}")
    return LRA_TASKS[task](seed=seed, **settings)


def collate(rows: list[dict]) -> dict[str, torch.Tensor]:
    """Rows of a numpy-formatted split -> (B, L) input_ids and attention_mask, (B,) labels."""
    return {
        "input_ids": torch.from_numpy(np.stack([row["input_ids"] for row in rows]).astype(np.int64)),
        "attention_mask": torch.from_numpy(np.stack([row["attention_mask"] for row in rows]).astype(np.int64)),
        "labels": torch.tensor([int(row["label"]) for row in rows], dtype=torch.long),
    }
