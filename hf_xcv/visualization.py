"""Pictures of detections: predicted and true boxes over an image, and a grid of such pictures for a demo's PNG.

Predictions are solid boxes in a colour per class, captioned "name score" on a band of that colour; ground truth is
a thin dashed box, alternately white and green, so it shows on dark and light backgrounds alike and never looks like
a prediction. Only PIL is needed (its default font).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import PIL.Image
import PIL.ImageDraw
import PIL.ImageFont
import torch

from .processing.images import prepare_image

Colour = tuple[int, int, int]

# matplotlib's tab10 then the light tab20 shades: distinct, and none of them pure white or green
PALETTE: list[Colour] = [
    (31, 119, 180), (255, 127, 14), (214, 39, 40), (148, 103, 189), (140, 86, 75),
    (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (44, 160, 44),
    (174, 199, 232), (255, 187, 120), (255, 152, 150), (197, 176, 213), (196, 156, 148),
    (247, 182, 210), (199, 199, 199), (219, 219, 141), (158, 218, 229), (152, 223, 138),
]  # fmt: skip
GROUND_TRUTH_COLOURS: tuple[Colour, Colour] = ((255, 255, 255), (0, 200, 0))  # the dashes alternate
AUTO_SCALE_SHORT_SIDE = 256  # scale=None upscales until the shorter side reaches this
_DASH = 4  # pixels per dash of a ground-truth box


def class_colour(label: int) -> Colour:
    """The colour of class ``label``'s predicted boxes."""
    return PALETTE[int(label) % len(PALETTE)]


def _font() -> PIL.ImageFont.ImageFont | PIL.ImageFont.FreeTypeFont:
    return PIL.ImageFont.load_default()


def _to_pil(image: Any) -> PIL.Image.Image:
    """PIL / numpy / torch (channels first or last; floats taken to be in [0, 1]) -> RGB PIL image."""
    if isinstance(image, PIL.Image.Image):
        return image.convert("RGB")
    array = prepare_image(image)  # (3, H, W)
    if np.issubdtype(array.dtype, np.floating):
        array = array * 255.0
    pixels = np.clip(np.round(array.astype(np.float64)), 0, 255).astype(np.uint8)
    return PIL.Image.fromarray(np.ascontiguousarray(pixels.transpose(1, 2, 0)), "RGB")


def _as_array(values: Any) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values if values is not None else [], dtype=np.float64)


def _as_boxes(boxes: Any, name: str) -> np.ndarray:
    """(N, 4) xyxy float boxes from a list, numpy array or tensor."""
    array = _as_array(boxes)
    if array.size == 0:
        return np.zeros((0, 4))
    if array.ndim != 2 or array.shape[1] != 4:
        raise ValueError(f"{name} must have shape (N, 4) as [x0, y0, x1, y1], got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or infinite coordinates")
    return array


def _as_vector(values: Any, count: int, name: str) -> np.ndarray:
    array = _as_array(values).reshape(-1)
    if len(array) != count:
        raise ValueError(f"{name} has {len(array)} entries for {count} boxes")
    return array


def _label_text(label: int, label_names: Sequence[str] | None, name: str) -> str:
    if label_names is None:
        return str(label)
    if not 0 <= label < len(label_names):
        raise ValueError(f"{name} {label} is not an index of label_names ({len(label_names)} names)")
    return label_names[label]


def _pixel_box(box: np.ndarray, scale: int, size: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """Pixel-edge box (x0, y0, x1, y1) -> the inclusive pixel rectangle PIL draws, in the scaled image, clipped;
    None if nothing of it is inside."""
    width, height = size
    x0, y0 = max(0, round(box[0] * scale)), max(0, round(box[1] * scale))
    x1, y1 = min(width, round(box[2] * scale)) - 1, min(height, round(box[3] * scale)) - 1
    return (x0, y0, x1, y1) if x1 >= x0 and y1 >= y0 else None


def _caption(draw: PIL.ImageDraw.ImageDraw, text: str, corner: tuple[int, int], colour: Colour, below: bool) -> None:
    """Text on a band of ``colour`` just outside a box's ``corner`` (above its top-left, or below its
    bottom-left for ground truth), moved inside the image where there is no room."""
    font = _font()
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    band_w, band_h = right - left + 4, bottom - top + 2
    image_w, image_h = draw.im.size  # the size of the image being drawn on
    x = min(corner[0], max(0, image_w - band_w))
    y = corner[1] + 1 if below else corner[1] - band_h
    y = min(max(0, y), max(0, image_h - band_h))
    draw.rectangle((x, y, x + band_w - 1, y + band_h - 1), fill=colour)
    ink = (0, 0, 0) if sum(colour) > 382 else (255, 255, 255)  # dark text on light bands, light on dark
    draw.text((x + 2 - left, y + 1 - top), text, fill=ink, font=font)


def _dashed_rectangle(draw: PIL.ImageDraw.ImageDraw, rectangle: tuple[int, int, int, int]) -> None:
    """A 1-pixel rectangle whose dashes alternate between the two ground-truth colours."""
    x0, y0, x1, y1 = rectangle
    perimeter = [(x, y0) for x in range(x0, x1 + 1)] + [(x1, y) for y in range(y0 + 1, y1 + 1)]
    perimeter += [(x, y1) for x in range(x1 - 1, x0 - 1, -1)] + [(x0, y) for y in range(y1 - 1, y0, -1)]
    for colour_index, colour in enumerate(GROUND_TRUTH_COLOURS):
        points = [point for step, point in enumerate(perimeter) if (step // _DASH) % 2 == colour_index]
        if points:
            draw.point(points, fill=colour)


def _draw_ground_truth(
    draw: PIL.ImageDraw.ImageDraw, ground_truth: Mapping[str, Any], label_names: Sequence[str] | None, scale: int
) -> None:
    if not isinstance(ground_truth, Mapping) or "boxes" not in ground_truth:
        raise ValueError("ground_truth must be a mapping with 'boxes' (xyxy) and optionally 'labels', 'iscrowd'")
    boxes = _as_boxes(ground_truth["boxes"], "ground_truth['boxes']")
    labels, crowd = (ground_truth.get(key) for key in ("labels", "iscrowd"))
    labels = None if labels is None else _as_vector(labels, len(boxes), "ground_truth['labels']").astype(int)
    crowd = np.zeros(len(boxes)) if crowd is None else _as_vector(crowd, len(boxes), "ground_truth['iscrowd']")
    for index, box in enumerate(boxes):
        rectangle = _pixel_box(box, scale, draw.im.size)
        if rectangle is None:
            continue
        _dashed_rectangle(draw, rectangle)
        if labels is not None:
            text = _label_text(int(labels[index]), label_names, "ground-truth label")
            text = f"{text} (crowd)" if crowd[index] else text
            _caption(draw, text, (rectangle[0], rectangle[3]), GROUND_TRUTH_COLOURS[1], below=True)


def _auto_scale(width: int, height: int) -> int:
    return max(1, math.ceil(AUTO_SCALE_SHORT_SIDE / min(width, height)))


def draw_detections(
    image: Any,
    boxes: Any,
    labels: Any,
    scores: Any = None,
    label_names: Sequence[str] | None = None,
    ground_truth: Mapping[str, Any] | None = None,
    score_threshold: float = 0.0,
    scale: int | None = None,
    line_width: int = 2,
) -> PIL.Image.Image:
    """A copy of ``image`` with the predicted boxes (and the true ones) drawn on it.

    Args:
        image: PIL image, numpy array or tensor ((H, W, C) or (C, H, W); floats in [0, 1]).
        boxes: (N, 4) predicted boxes ``[x0, y0, x1, y1]`` in pixels of ``image`` (list, numpy or torch).
        labels: (N,) class indices; they pick the colour, and the caption's name from ``label_names``.
        scores: (N,) confidences, shown in the caption and compared with ``score_threshold``.
        label_names: names indexed by class; the number is shown without them.
        ground_truth: ``{"boxes": (M, 4) xyxy, "labels": (M,), "iscrowd": (M,)}`` (labels and iscrowd optional),
            drawn as dashed white/green boxes captioned below with the name ("name (crowd)" for crowd regions).
        score_threshold: predictions scoring below it are left out.
        scale: integer upscaling (nearest neighbour) before drawing, so captions are readable on small images;
            ``None`` picks the smallest that makes the shorter side at least 256 px.
        line_width: of the predicted boxes, in pixels of the output.

    Returns:
        An RGB image of ``scale`` times the input's size.
    """
    picture = _to_pil(image)
    scale = _auto_scale(*picture.size) if scale is None else scale
    if not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale={scale!r} must be a positive integer or None")
    picture = picture.resize((picture.width * scale, picture.height * scale), PIL.Image.NEAREST)
    draw = PIL.ImageDraw.Draw(picture)
    if ground_truth is not None:
        _draw_ground_truth(draw, ground_truth, label_names, scale)
    boxes = _as_boxes(boxes, "boxes")
    labels = _as_vector(labels, len(boxes), "labels").astype(int)
    scores = None if scores is None else _as_vector(scores, len(boxes), "scores")
    order = range(len(boxes)) if scores is None else np.argsort(scores, kind="stable")  # best drawn last, on top
    for index in order:
        if scores is not None and scores[index] < score_threshold:
            continue
        rectangle = _pixel_box(boxes[index], scale, picture.size)
        if rectangle is None:
            continue
        colour = class_colour(labels[index])
        draw.rectangle(rectangle, outline=colour, width=line_width)
        text = _label_text(int(labels[index]), label_names, "label")
        text = text if scores is None else f"{text} {scores[index]:.2f}"
        _caption(draw, text, rectangle[:2], colour, below=False)
    return picture


def detection_grid(
    images: Sequence[Any],
    columns: int = 4,
    titles: Sequence[str] | None = None,
    padding: int = 4,
    background: Colour = (255, 255, 255),
) -> PIL.Image.Image:
    """Tile ``images`` (drawn detections, say) row by row into one picture, an optional title above each.

    Every tile gets the cell of the largest image; the grid has ``min(columns, len(images))`` columns.
    """
    if len(images) == 0:
        raise ValueError("detection_grid needs at least one image")
    if not isinstance(columns, int) or columns < 1:
        raise ValueError(f"columns={columns!r} must be a positive integer")
    if titles is not None and len(titles) != len(images):
        raise ValueError(f"{len(titles)} titles for {len(images)} images")
    tiles = [_to_pil(image) for image in images]
    font = _font()
    title_h = 0
    if titles is not None:
        probe = PIL.ImageDraw.Draw(PIL.Image.new("RGB", (1, 1)))
        title_h = max(probe.textbbox((0, 0), title, font=font)[3] for title in titles) + 2 if any(titles) else 0
    cell_w, cell_h = max(tile.width for tile in tiles), max(tile.height for tile in tiles) + title_h
    columns = min(columns, len(tiles))
    rows = math.ceil(len(tiles) / columns)
    size = (columns * cell_w + (columns + 1) * padding, rows * cell_h + (rows + 1) * padding)
    grid = PIL.Image.new("RGB", size, background)
    draw = PIL.ImageDraw.Draw(grid)
    for index, tile in enumerate(tiles):
        x = padding + (index % columns) * (cell_w + padding)
        y = padding + (index // columns) * (cell_h + padding)
        if titles is not None and titles[index]:
            draw.text((x, y), titles[index], fill=(0, 0, 0), font=font)
        grid.paste(tile, (x, y + title_h))
    return grid
