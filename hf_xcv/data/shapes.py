"""A built-in object-detection dataset of coloured shapes on textured backgrounds, generated offline.

``load_shapes_dataset()`` draws scenes procedurally, so a DETR can be trained and scored with COCO mAP without any
download. Each image (64-96 px a side by default, width and height drawn apart, so batches need padding) has a
muted background texture (smooth blotches, a gradient or stripes, soft or hard), up to ``max_objects`` saturated
shapes of four categories (:data:`SHAPE_CATEGORIES`) at random sizes (their circumscribed circle 15 px across up
to half the shorter side), rotations and colours, and per-pixel noise over everything. Shape colour carries no
information about the category: a model must learn the outline.

The rules that make the annotations exact:

- every shape lies fully inside its image, and its box is the tight box of its rasterised mask (COCO ``xywh`` in
  pixel edges: a shape covering the pixel columns 3..7 has ``x=3, w=5``), so the box is amodal (the whole shape,
  also where a later shape covers it);
- shapes are painted in order, later over earlier; a shape is only placed if every shape before it keeps at least
  :data:`MIN_VISIBLE_FRACTION` of its pixels visible (up to :data:`PLACEMENT_TRIES` tries, then it is left out), so
  no annotated object is hidden, and ``area`` is the count of its pixels still visible in the final image;
- about ``empty_fraction`` of the images have no objects at all; about ``crowd_fraction`` have one crowd region
  (painted first): a cluster of 6-12 small shapes (5-9 px) of one category and colour, annotated as one box with
  ``iscrowd=1`` and the visible area of their union, which COCO evaluation treats as a region to ignore. A crowd
  image also has 0..``max_objects`` ordinary shapes; every other non-empty image has 1..``max_objects``.

Every image is generated from its own seed derived from ``(seed, split, index)``, so the test split does not change
when ``num_train`` does, and the first ``n`` images of a split do not depend on how many follow.
"""

from __future__ import annotations

import colorsys
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import PIL.Image
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, List, Value

from ..utils.checks import is_integer
from ..utils.errors import UsageError

SHAPE_CATEGORIES = ["circle", "square", "triangle", "cross"]
SPLITS = ("train", "validation", "test")
GAP_NAME = "N/A"  # the name of an unused category id (the original DETR's convention for COCO's gaps)
MIN_VISIBLE_FRACTION = 0.5
PLACEMENT_TRIES = 20
MIN_OBJECT_SIZE = 15.0  # diameter of the circle a shape is inscribed in: squares are >= 10.6 px a side
MIN_SIDE = 32
IMAGE_ID_STRIDE = 10_000_000  # image ids of split k are (k + 1) * IMAGE_ID_STRIDE + index: unique across splits
ANNOTATION_ID_STRIDE = 1000  # annotation ids are image_id * ANNOTATION_ID_STRIDE + 1, 2, ...: never 0 (see below)
MAX_OBJECTS_LIMIT = ANNOTATION_ID_STRIDE - 2  # room for the crowd region too
_CROWD_MEMBERS = (6, 12)
_CROWD_MEMBER_SIZE = (5.0, 9.0)
_MIN_COLOUR_DISTANCE = 100.0  # RGB distance from the background and the shapes below, when some colour allows it


@dataclass
class _Shape:
    """One painted object: its full (amodal) mask, what of it is still visible, and how it is painted."""

    category: int
    mask: np.ndarray  # (H, W) bool
    iscrowd: int = 0
    colour: np.ndarray = field(default_factory=lambda: np.zeros(3))
    visible: np.ndarray | None = None  # (H, W) bool; the mask less what later shapes cover

    def __post_init__(self) -> None:
        if self.visible is None:
            self.visible = self.mask.copy()


def detection_features(label_names: list[str]) -> Features:
    """The features of a detection dataset (COCO layout, one row per image) whose category ids index
    ``label_names``; entries named ``"N/A"`` are unused ids.

    A ``ClassLabel`` needs distinct names, so the unused ids are stored as ``"N/A (<id>)"``;
    :func:`detection_label_names` gives them back as ``"N/A"``.
    """
    names = [f"{GAP_NAME} ({index})" if name == GAP_NAME else name for index, name in enumerate(label_names)]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UsageError(f"category names must be distinct; repeated: {repeated}")
    annotation = {
        "id": Value("int64"),
        "category_id": ClassLabel(names=names),
        "bbox": List(Value("float32"), length=4),  # COCO [x, y, width, height], absolute pixels
        "area": Value("float32"),
        "iscrowd": Value("int64"),
    }
    return Features(
        {
            "image": Image(mode="RGB"),
            "image_id": Value("int64"),
            "width": Value("int32"),
            "height": Value("int32"),
            "annotations": List(annotation),
        }
    )


def real_categories(label_names: list[str]) -> list[int]:
    """The category ids ``label_names`` names (those not marked ``GAP_NAME``, an unused id)."""
    return [index for index, name in enumerate(label_names) if name != GAP_NAME]


def is_category(category: Any, label_names: list[str]) -> bool:
    """Whether ``category`` is the integer id of a real category of ``label_names``."""
    return is_integer(category) and 0 <= category < len(label_names) and label_names[category] != GAP_NAME


def _is_gap(name: str) -> bool:
    return name.startswith(f"{GAP_NAME} (") and name.endswith(")") and name[len(GAP_NAME) + 2 : -1].isdigit()


def annotation_column(dataset: Any) -> str:
    """The column holding a detection dataset's boxes: ``"annotations"`` (COCO's layout, :func:`detection_features`)
    or ``"objects"`` (the layout of the Hub's detection datasets: ``{"bbox", "category", "area", "id"}`` per image)."""
    columns = getattr(dataset, "column_names", None) or []
    for column in ("annotations", "objects"):
        if column in columns:
            return column
    raise UsageError(
        f"{getattr(dataset, 'split', None) or 'the dataset'} has neither an 'annotations' column (COCO's layout) nor "
        f"an 'objects' column (a Hub detection dataset's: {{'bbox': [[x, y, w, h], ...], 'category': [...]}}); "
        f"columns: {columns}"
    )


def _category_feature(features: Any, column: str) -> Any:
    """The feature of the category of one box: ``annotations.category_id``, or ``objects.category`` whether
    ``objects`` is a dict of lists (``datasets``' ``Sequence`` of a dict) or a list of dicts (``List`` of a dict)."""
    key = "category_id" if column == "annotations" else "category"
    boxes = features[column]
    if isinstance(boxes, dict):  # a dict of lists
        return boxes[key].feature
    return boxes.feature[key]


def _split_label_names(dataset: Any, where: str) -> list[str]:
    features = getattr(dataset, "features", None)
    column = next((c for c in ("annotations", "objects") if features is not None and c in features), None)
    key = "objects.category" if column == "objects" else "annotations.category_id"
    try:
        category = _category_feature(features, column)
    except (KeyError, TypeError, AttributeError):
        raise UsageError(
            f"{where} has no 'annotations' list with a 'category_id' feature (COCO's layout) nor 'objects' with a "
            "'category' feature (a Hub detection dataset's)"
        ) from None
    if not isinstance(category, ClassLabel):
        raise UsageError(
            f"{where}: {key} is {category}, not a ClassLabel carrying the names of the categories; cast it to one "
            f"(its integers are the class ids), e.g. ClassLabel(names=[...])"
        )
    return [GAP_NAME if _is_gap(name) else name for name in category.names]


def detection_label_names(data: Dataset | DatasetDict | Mapping[str, Dataset]) -> list[str]:
    """The category names of a detection dataset, indexed by category id, ``"N/A"`` at unused ids.

    Read from the features (``annotations.category_id``'s ``ClassLabel``, or ``objects.category``'s in the Hub's
    layout), so they survive ``save_to_disk``/``load_from_disk``, ``with_transform`` and ``map``. For a
    ``DatasetDict`` every split must carry the same names.
    """
    if not isinstance(data, Mapping):
        return _split_label_names(data, "the dataset")
    if not data:
        raise UsageError("the DatasetDict has no splits")
    per_split = {name: _split_label_names(split, f"split {name!r}") for name, split in data.items()}
    first_split, names = next(iter(per_split.items()))
    for split, other in per_split.items():
        if other != names:
            raise UsageError(f"splits {first_split!r} and {split!r} have different categories: {names} vs {other}")
    return names


def detection_label_maps(label_names: list[str]) -> tuple[dict[int, str], dict[str, int]]:
    """A detector config's ``id2label`` and ``label2id`` for ``label_names`` (indexed by category id, ``"N/A"`` at
    the ids no category uses, as :func:`detection_label_names` gives them).

    The class index is the category id (the original DETR's convention: COCO's ids 1..90 make 91 classes), so
    ``id2label`` has every id below the largest, as transformers derives ``num_labels`` from its length (and its
    pipeline names every predicted class through it); an unused id is named ``"N/A (<id>)"``, one name per id, so
    a prediction of it is named and per-class metrics stay apart. ``label2id`` holds the real categories only: the
    inverse of ``id2label`` on them.
    """
    id2label = {i: f"{GAP_NAME} ({i})" if name == GAP_NAME else name for i, name in enumerate(label_names)}
    label2id = {name: i for i, name in enumerate(label_names) if name != GAP_NAME}
    return id2label, label2id


# ----------------------------------------------------------------------------------------------- geometry


def _pixel_centres(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(1, W) x and (H, 1) y coordinates of the pixel centres: pixel column i spans [i, i + 1)."""
    return np.arange(width, dtype=np.float32)[None, :] + 0.5, np.arange(height, dtype=np.float32)[:, None] + 0.5


def _convex_polygon_mask(vertices: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Pixels whose centre lies inside the convex polygon ``vertices`` (K, 2), of either orientation."""
    inside_left = np.ones(np.broadcast_shapes(xs.shape, ys.shape), dtype=bool)
    inside_right = inside_left.copy()
    for (x0, y0), (x1, y1) in zip(vertices.tolist(), vertices[[*range(1, len(vertices)), 0]].tolist()):
        cross = (x1 - x0) * (ys - y0) - (y1 - y0) * (xs - x0)
        inside_left &= cross >= 0
        inside_right &= cross <= 0
    return inside_left | inside_right


def _rotated(points: np.ndarray, angle: float, cx: float, cy: float) -> np.ndarray:
    cos, sin = np.cos(angle), np.sin(angle)
    return points @ np.array([[cos, sin], [-sin, cos]]) + np.array([cx, cy])


def _outline(name: str, xs: np.ndarray, ys: np.ndarray, cx: float, cy: float, size: float, angle: float) -> np.ndarray:
    """Which of the pixel centres ``xs`` (1, W) x ``ys`` (H, 1) the shape covers -> (H, W) bool."""
    radius = size / 2
    if name == "circle":
        return (xs - cx) ** 2 + (ys - cy) ** 2 <= radius**2
    if name == "square":
        half = radius / np.sqrt(2)  # half the side, so the corners touch the circle
        corners = np.array([[-half, -half], [half, -half], [half, half], [-half, half]])
        return _convex_polygon_mask(_rotated(corners, angle, cx, cy), xs, ys)
    if name == "triangle":
        turns = np.array([0.0, 2 * np.pi / 3, 4 * np.pi / 3]) - np.pi / 2  # equilateral, a vertex up
        vertices = radius * np.stack([np.cos(turns), np.sin(turns)], axis=1)
        return _convex_polygon_mask(_rotated(vertices, angle, cx, cy), xs, ys)
    # cross: two bars 0.9 x 0.3 of the size; their corners stay inside the circle (0.47 < 0.5)
    long, short = 0.45 * size, 0.15 * size
    bar = np.array([[-long, -short], [long, -short], [long, short], [-long, short]])
    horizontal = _convex_polygon_mask(_rotated(bar, angle, cx, cy), xs, ys)
    return horizontal | _convex_polygon_mask(_rotated(bar, angle + np.pi / 2, cx, cy), xs, ys)


def shape_mask(category: int, cx: float, cy: float, size: float, angle: float, height: int, width: int) -> np.ndarray:
    """(H, W) bool mask of a shape inscribed in the circle of diameter ``size`` centred at (cx, cy).

    Args:
        category: index into :data:`SHAPE_CATEGORIES`.
        cx, cy: centre in pixels (pixel column i spans [i, i + 1)).
        size: diameter of the circumscribed circle: a shape whose centre is at least ``size / 2`` from every
            border lies inside the image.
        angle: rotation in radians (ignored for the circle).
        height, width: the image's.
    """
    radius = size / 2
    # only the pixels of the circumscribed circle's box can be covered: testing those alone is ~20x faster
    x0, x1 = max(0, int(np.floor(cx - radius))), min(width, int(np.ceil(cx + radius)) + 1)
    y0, y1 = max(0, int(np.floor(cy - radius))), min(height, int(np.ceil(cy + radius)) + 1)
    mask = np.zeros((height, width), dtype=bool)
    xs, ys = np.arange(x0, x1)[None, :] + 0.5, np.arange(y0, y1)[:, None] + 0.5
    mask[y0:y1, x0:x1] = _outline(SHAPE_CATEGORIES[category], xs, ys, cx, cy, size, angle)
    return mask


def tight_box(mask: np.ndarray) -> list[float]:
    """COCO ``[x, y, w, h]`` of the pixels set in ``mask``, in pixel edges."""
    columns, rows = np.flatnonzero(mask.any(axis=0)), np.flatnonzero(mask.any(axis=1))
    x0, y0 = int(columns[0]), int(rows[0])
    return [float(x0), float(y0), float(columns[-1] + 1 - x0), float(rows[-1] + 1 - y0)]


# ----------------------------------------------------------------------------------------------- colours


def _hsv(hue: float, saturation: float, value: float) -> np.ndarray:
    return 255.0 * np.array(colorsys.hsv_to_rgb(hue, saturation, value))


def _muted_colour(rng: np.random.Generator) -> np.ndarray:
    """A background colour: low saturation, so saturated shapes stand out."""
    return _hsv(rng.random(), rng.uniform(0.0, 0.35), rng.uniform(0.2, 0.9))


def _object_colour(rng: np.random.Generator, below: list[np.ndarray]) -> np.ndarray:
    """A saturated colour far from every colour in ``below`` (what the shape is painted over); the best of a
    few draws when none is far enough."""
    best, best_distance = None, -1.0
    for _ in range(8):
        colour = _hsv(rng.random(), rng.uniform(0.55, 1.0), rng.uniform(0.55, 1.0))
        distance = min(float(np.linalg.norm(colour - other)) for other in below)
        if distance >= _MIN_COLOUR_DISTANCE:
            return colour
        if distance > best_distance:
            best, best_distance = colour, distance
    return best


# ----------------------------------------------------------------------------------------------- backgrounds


def _blotches(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Smooth value noise: a coarse grid of muted colours, bilinearly upsampled."""
    grid_h, grid_w = rng.integers(2, 7, size=2)
    grid = np.stack([_muted_colour(rng) for _ in range(grid_h * grid_w)]).reshape(grid_h, grid_w, 3)
    coarse = PIL.Image.fromarray(grid.astype(np.uint8), "RGB").resize((width, height), PIL.Image.BILINEAR)
    return np.asarray(coarse, dtype=np.float32).transpose(2, 0, 1)  # (3, H, W)


def _ramp(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """(H, W) coordinate along a random direction."""
    xs, ys = _pixel_centres(height, width)
    angle = rng.uniform(0, 2 * np.pi)
    return xs * np.cos(angle) + ys * np.sin(angle)


def _gradient(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    ramp = _ramp(rng, height, width)
    t = (ramp - ramp.min()) / max(np.ptp(ramp), 1e-6)  # (H, W) in [0, 1]
    return _mix(_muted_colour(rng), _muted_colour(rng), t)


def _stripes(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Soft (sine) or hard stripes of two muted colours, 5-16 px a period, at any angle."""
    phase = 2 * np.pi * _ramp(rng, height, width) / rng.uniform(5, 16)
    t = 0.5 + 0.5 * np.sin(phase + rng.uniform(0, 2 * np.pi))
    if rng.random() < 0.5:
        t = (t > 0.5).astype(np.float32)
    return _mix(_muted_colour(rng), _muted_colour(rng), t)


def _mix(first: np.ndarray, second: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(3, H, W) blend of two colours by ``t`` (H, W).

    Channels first, in float32: numpy's loops over a last axis of 3 are several times slower.
    """
    first, second = first.astype(np.float32)[:, None, None], second.astype(np.float32)[:, None, None]
    return first + (second - first) * t.astype(np.float32)


_BACKGROUNDS = (_blotches, _gradient, _stripes)


# ----------------------------------------------------------------------------------------------- scenes


def _place(shapes: list[_Shape], candidate: _Shape) -> bool:
    """Add ``candidate`` on top of ``shapes`` unless it would hide too much of one of them."""
    uncovered = [shape.visible & ~candidate.mask for shape in shapes]
    if any(left.sum() < MIN_VISIBLE_FRACTION * shape.mask.sum() for left, shape in zip(uncovered, shapes)):
        return False
    for shape, left in zip(shapes, uncovered):
        shape.visible = left
    shapes.append(candidate)
    return True


def _random_object(rng: np.random.Generator, height: int, width: int) -> _Shape:
    largest = max(MIN_OBJECT_SIZE, 0.5 * min(height, width))
    size = rng.uniform(MIN_OBJECT_SIZE, largest)
    cx, cy = rng.uniform(size / 2, width - size / 2), rng.uniform(size / 2, height - size / 2)
    category = int(rng.integers(len(SHAPE_CATEGORIES)))
    return _Shape(category, shape_mask(category, cx, cy, size, rng.uniform(0, 2 * np.pi), height, width))


def _random_crowd(rng: np.random.Generator, height: int, width: int) -> _Shape:
    """Several small shapes of one category within a square region, as one crowd object."""
    category = int(rng.integers(len(SHAPE_CATEGORIES)))
    region = rng.uniform(18, max(18, min(36, 0.5 * min(height, width))))
    left, top = rng.uniform(0, width - region), rng.uniform(0, height - region)
    union = np.zeros((height, width), dtype=bool)
    for _ in range(rng.integers(_CROWD_MEMBERS[0], _CROWD_MEMBERS[1] + 1)):
        size = rng.uniform(*_CROWD_MEMBER_SIZE)
        cx = rng.uniform(left + size / 2, left + region - size / 2)
        cy = rng.uniform(top + size / 2, top + region - size / 2)
        union |= shape_mask(category, cx, cy, size, rng.uniform(0, 2 * np.pi), height, width)
    return _Shape(category, union, iscrowd=1)


def _random_shapes(rng: np.random.Generator, height: int, width: int, kind: str, max_objects: int) -> list[_Shape]:
    """The shapes of a scene, in painting order; ``kind`` is "empty", "crowd" or "objects"."""
    shapes: list[_Shape] = []
    if kind == "empty":
        return shapes
    if kind == "crowd":
        shapes.append(_random_crowd(rng, height, width))
    for _ in range(rng.integers(0 if kind == "crowd" else 1, max_objects + 1)):
        for _ in range(PLACEMENT_TRIES):
            if _place(shapes, _random_object(rng, height, width)):
                break
    return shapes


def _paint_colours(rng: np.random.Generator, background: np.ndarray, shapes: list[_Shape]) -> None:
    for index, shape in enumerate(shapes):
        below = [background[:, shape.mask].mean(axis=1)]
        below += [earlier.colour for earlier in shapes[:index] if (earlier.mask & shape.mask).any()]
        shape.colour = _object_colour(rng, below)


def render(background: np.ndarray, shapes: list[_Shape], noise: float, rng: np.random.Generator) -> np.ndarray:
    """Paint ``shapes`` in order over ``background`` (3, H, W), add pixel noise of std ``noise`` -> (H, W, 3)
    uint8."""
    canvas = background.astype(np.float32, copy=True)
    for shape in shapes:
        canvas[:, shape.mask] = shape.colour[:, None]
    if noise > 0:
        # uniform noise of std ``noise``: a quarter of the time of Gaussian noise, and as good a nuisance
        canvas += (noise * np.sqrt(12.0)) * (rng.random(canvas.shape, dtype=np.float32) - 0.5)
    pixels = np.clip(canvas + 0.5, 0, 255).astype(np.uint8)  # + 0.5 then truncation: rounding
    return np.ascontiguousarray(pixels.transpose(1, 2, 0))


def annotations(shapes: list[_Shape], image_id: int) -> list[dict[str, Any]]:
    """COCO annotations of ``shapes``: amodal tight box, visible area.

    Ids start at 1 within an image: pycocotools' matcher takes an id of 0 for "unmatched".
    """
    return [
        {
            "id": image_id * ANNOTATION_ID_STRIDE + index + 1,
            "category_id": shape.category,
            "bbox": tight_box(shape.mask),
            "area": float(shape.visible.sum()),
            "iscrowd": shape.iscrowd,
        }
        for index, shape in enumerate(shapes)
    ]


@dataclass(frozen=True)
class _SceneConfig:
    min_side: int
    max_side: int
    max_objects: int
    empty_fraction: float
    crowd_fraction: float

    @property
    def crowd_cutoff(self) -> float:
        return self.empty_fraction + self.crowd_fraction


def _bmp_bytes(pixels: np.ndarray) -> bytes:
    """Lossless and uncompressed: noisy pixels barely compress, and PNG would take 30x longer to encode."""
    buffer = io.BytesIO()
    PIL.Image.fromarray(pixels, "RGB").save(buffer, format="BMP")
    return buffer.getvalue()


def _scene(rng: np.random.Generator, config: _SceneConfig, image_id: int) -> dict[str, Any]:
    """One row of the dataset."""
    width, height = (int(side) for side in rng.integers(config.min_side, config.max_side + 1, size=2))
    draw = rng.random()
    kind = "empty" if draw < config.empty_fraction else "crowd" if draw < config.crowd_cutoff else "objects"
    background = _BACKGROUNDS[rng.integers(len(_BACKGROUNDS))](rng, height, width)
    shapes = _random_shapes(rng, height, width, kind, config.max_objects)
    _paint_colours(rng, background, shapes)
    pixels = render(background, shapes, rng.uniform(2.0, 12.0), rng)
    return {
        "image": {"bytes": _bmp_bytes(pixels), "path": None},
        "image_id": image_id,
        "width": width,
        "height": height,
        "annotations": annotations(shapes, image_id),
    }


def _split(config: _SceneConfig, seed: int, split_index: int, count: int) -> Dataset:
    """``count`` scenes, image i from the seed ``(seed, split_index, i)``."""
    first_id = (split_index + 1) * IMAGE_ID_STRIDE
    rows = [_scene(np.random.default_rng([seed, split_index, i]), config, first_id + i) for i in range(count)]
    features = detection_features(SHAPE_CATEGORIES)
    return Dataset.from_dict({key: [row[key] for row in rows] for key in features}, features=features)


def _sides(image_size: Any) -> tuple[int, int]:
    if not (
        isinstance(image_size, (tuple, list))
        and len(image_size) == 2
        and all(isinstance(side, int) for side in image_size)
    ):
        raise UsageError(f"image_size={image_size!r} must be a pair of integers (min_side, max_side)")
    return image_size[0], image_size[1]


def _check_arguments(sizes: dict[str, int], config: _SceneConfig, seed: int) -> None:
    for name, count in sizes.items():
        if not isinstance(count, int) or not 0 <= count < IMAGE_ID_STRIDE:
            raise UsageError(f"num_{name}={count!r} must be an integer in [0, {IMAGE_ID_STRIDE})")
    if not MIN_SIDE <= config.min_side <= config.max_side:
        raise UsageError(
            f"image_size=({config.min_side}, {config.max_side}) must be (min_side, max_side) "
            f"with {MIN_SIDE} <= min_side <= max_side"
        )
    if not isinstance(config.max_objects, int) or not 1 <= config.max_objects <= MAX_OBJECTS_LIMIT:
        raise UsageError(f"max_objects={config.max_objects!r} must be an integer in [1, {MAX_OBJECTS_LIMIT}]")
    for name in ("empty_fraction", "crowd_fraction"):
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise UsageError(f"{name}={getattr(config, name)} must be in [0, 1]")
    if config.crowd_cutoff > 1.0:
        raise UsageError(f"empty_fraction + crowd_fraction = {config.crowd_cutoff} must be at most 1")
    if not isinstance(seed, int) or seed < 0:
        raise UsageError(f"seed={seed!r} must be a non-negative integer")


def load_shapes_dataset(
    num_train: int = 2000,
    num_validation: int = 200,
    num_test: int = 200,
    image_size: tuple[int, int] = (64, 96),
    max_objects: int = 4,
    empty_fraction: float = 0.1,
    crowd_fraction: float = 0.1,
    seed: int = 0,
) -> DatasetDict:
    """The shapes detection dataset, splits train / validation / test, features :func:`detection_features`
    with the names :data:`SHAPE_CATEGORIES`.

    Args:
        num_train, num_validation, num_test: images per split.
        image_size: ``(min_side, max_side)``; width and height are each drawn from it, ``min_side >= 32``.
        max_objects: the most ordinary (non-crowd) shapes in an image.
        empty_fraction: the probability of an image without objects.
        crowd_fraction: the probability of an image with a crowd region (``iscrowd=1``).
        seed: the base of every image's seed.
    """
    sizes = dict(zip(SPLITS, (num_train, num_validation, num_test)))
    config = _SceneConfig(*_sides(image_size), max_objects, float(empty_fraction), float(crowd_fraction))
    _check_arguments(sizes, config, seed)
    return DatasetDict(
        {name: _split(config, seed, split_index, count) for split_index, (name, count) in enumerate(sizes.items())}
    )
