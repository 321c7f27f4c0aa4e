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


# ----------------------------------------------------------------------------------------------------------------
# restoration: LR, bicubic, output and HR side by side

RESTORATION_COLUMNS = ("lr", "bicubic", "output", "hr", "reference")
_RESTORATION_TITLES = {"lr": "LR", "bicubic": "bicubic", "output": "output", "hr": "HR", "reference": "reference"}


def _upscale_factor(lr: PIL.Image.Image, hr: PIL.Image.Image, where: str) -> int:
    """The integer factor from LR to HR, the same along both sides."""
    factor = hr.width // lr.width
    if factor < 1 or (lr.width * factor, lr.height * factor) != hr.size:
        raise ValueError(
            f"{where}: the HR image ({hr.width}x{hr.height}) must be the LR one ({lr.width}x{lr.height}) times an "
            "integer factor along both sides"
        )
    return factor


def _restoration_tiles(row: Mapping[str, Any], where: str) -> tuple[dict[str, PIL.Image.Image], int]:
    """A row's images as RGB tiles (LR upscaled to HR size, nearest neighbour), and the LR-to-HR factor."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where} must be a mapping with 'lr', 'output' and 'hr', got {type(row).__name__}")
    missing = [key for key in ("lr", "output", "hr") if row.get(key) is None]
    if missing:
        raise ValueError(f"{where} lacks {missing}: each row needs 'lr', 'output' and 'hr'")
    unknown = sorted(set(row) - {*RESTORATION_COLUMNS, "title", "captions"})
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: {[*RESTORATION_COLUMNS, 'title', 'captions']}")
    tiles = {key: _to_pil(row[key]) for key in RESTORATION_COLUMNS if row.get(key) is not None}
    hr = tiles["hr"]
    factor = _upscale_factor(tiles["lr"], hr, where)
    if "bicubic" not in tiles:
        tiles["bicubic"] = tiles["lr"].resize(hr.size, PIL.Image.BICUBIC)
    for key in ("bicubic", "output"):
        if tiles[key].size != hr.size:
            raise ValueError(
                f"{where}: '{key}' is {tiles[key].width}x{tiles[key].height} but 'hr' is {hr.width}x{hr.height}"
            )
    tiles["lr"] = tiles["lr"].resize(hr.size, PIL.Image.NEAREST)
    return tiles, factor


def _restoration_captions(
    row: Mapping[str, Any], tiles: dict[str, PIL.Image.Image], factor: int, output_label: str, psnr_channel: str | None
) -> dict[str, str]:
    """Each tile's caption: its title, with the Y-PSNR against HR (shave = factor) for bicubic and output; a row's
    ``title`` leads the LR caption, and its ``captions`` replace any of them."""
    from .metrics.restoration import psnr  # not at import: the metrics pull in evaluate

    captions = dict(_RESTORATION_TITLES, output=output_label)
    if row.get("title"):
        captions["lr"] = f"{row['title']} LR"
    hr = np.asarray(tiles["hr"])
    if psnr_channel is not None and min(hr.shape[:2]) > 2 * factor:
        for key in ("bicubic", "output"):
            value = psnr(np.asarray(tiles[key]), hr, scale=factor, channel=psnr_channel)
            captions[key] = f"{captions[key]} {value:.2f} dB"
    return captions | dict(row.get("captions") or {})


def restoration_panel(
    rows: Sequence[Mapping[str, Any]],
    output_label: str = "output",
    psnr_channel: str | None = "y",
    padding: int = 4,
    background: Colour = (255, 255, 255),
) -> PIL.Image.Image:
    """LR, bicubic, the model's output and HR side by side, one row per image, each tile under a caption
    ("LR", "bicubic 26.84 dB", "TTSR 27.90 dB", "HR"), and a reference column when any row has a reference.

    The tiles hold the given pixels, unscaled, except LR, which is upscaled by nearest neighbour to HR's size so
    that its pixels show as blocks. Rows of different sizes are not scaled either: each column is as wide as its
    widest tile (or caption), each row as high as its highest tile, and smaller tiles sit in the top-left corner of
    their cell, padded with ``background`` (as is a row without a reference in the reference column).

    Args:
        rows: one mapping per image with ``lr``, ``output`` and ``hr`` (PIL images, numpy arrays or tensors,
            channels first or last, floats in [0, 1]), optionally ``bicubic`` (default: PIL's bicubic upscaling of
            ``lr``, TTSR's), ``reference``, ``title`` (leads the LR caption) and ``captions`` (a mapping from column
            name, ``"lr"``, ``"bicubic"``, ``"output"``, ``"hr"``, ``"reference"``, to a caption replacing the
            default). HR must be LR times an integer factor; bicubic and output must have HR's size.
        output_label: the output column's caption ("TTSR", say).
        psnr_channel: the PSNR in the bicubic and output captions, against HR with the border shaved by the
            factor (:func:`hf_xcv.metrics.psnr`): ``"y"`` or ``"rgb"``; None: no PSNR.
        padding: pixels between and around the tiles.
        background: the colour of the padding.
    """
    if len(rows) == 0:
        raise ValueError("restoration_panel needs at least one row")
    laid_out = [_restoration_tiles(row, f"rows[{index}]") for index, row in enumerate(rows)]
    captions = [
        _restoration_captions(row, tiles, factor, output_label, psnr_channel)
        for row, (tiles, factor) in zip(rows, laid_out)
    ]
    columns = [key for key in RESTORATION_COLUMNS if any(key in tiles for tiles, _ in laid_out)]
    widths = [
        max(
            max(tiles[key].width, _text_width(texts[key]))
            for (tiles, _), texts in zip(laid_out, captions)
            if key in tiles
        )
        for key in columns
    ]
    heights = [max(tile.height for tile in tiles.values()) for tiles, _ in laid_out]
    caption_h = _caption_height()
    size = (sum(widths) + (len(columns) + 1) * padding, sum(heights) + len(rows) * (caption_h + padding) + padding)
    panel = PIL.Image.new("RGB", size, background)
    draw = PIL.ImageDraw.Draw(panel)
    y = padding
    for (tiles, _), row_captions, height in zip(laid_out, captions, heights):
        x = padding
        for key, width in zip(columns, widths):
            if key in tiles:
                draw.text((x, y), row_captions[key], fill=(0, 0, 0), font=_font())
                panel.paste(tiles[key], (x, y + caption_h))
            x += width + padding
        y += caption_h + height + padding
    return panel


def _caption_height() -> int:
    """The height of a caption line above a tile: the default font's tallest glyphs and a 2-pixel gap."""
    probe = PIL.ImageDraw.Draw(PIL.Image.new("RGB", (1, 1)))
    return probe.textbbox((0, 0), "Ag|dB", font=_font())[3] + 2


def _text_width(text: str) -> int:
    probe = PIL.ImageDraw.Draw(PIL.Image.new("RGB", (1, 1)))
    return int(probe.textbbox((0, 0), text, font=_font())[2])
