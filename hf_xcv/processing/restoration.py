"""Image restoration's own processing: the restoration tasks by name, the synthetic degradations that make their
training pairs (IPT, Chen et al. 2021: bicubic downsampling for super-resolution, Gaussian noise for denoising, rain
streaks for deraining), PIL's bicubic resampling of the original pipelines, and the way from a model's value range
back to 8-bit pixels.

Images are (3, H, W) uint8 arrays with values 0-255, as the image processors hold them. Every random degradation
takes ``generator``, a :data:`hf_xcv.utils.generators.RandomSource`: a ``torch.Generator``, a
``numpy.random.Generator``, an int seed (the same as ``torch.Generator().manual_seed(seed)``) or None (fresh,
unrepeatable randomness). One generator or seed gives the same degradation bit for bit on every call; a generator
passed on from image to image gives each its own draw, reproducibly.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import PIL.Image
import torch
from scipy.ndimage import gaussian_filter

from ..utils.errors import UsageError
from ..utils.generators import RandomSource, as_generator, numpy_generator

# The scale of reference-based super-resolution, TTSR's x4: its texture transformer and cross-scale integration are
# built for it (the author, TTSR #11, #52). The built-in photos and a folder's images are cut to its multiples by
# default; named tasks (IPT) carry their own scales.
SCALE = 4

# The IPT pre-training tasks, in the official order (``--scale 2+3+4+1+1+1``: x2, x3, x4, denoise 30, denoise 50,
# derain): the default when a checkpoint's layout does not say which tasks it holds.
PRETRAINING_TASKS = ("sr_x2", "sr_x3", "sr_x4", "denoise_30", "denoise_50", "derain")
_SR = re.compile(r"sr_x([0-9]+)")
_DENOISE = re.compile(r"denoise_([0-9]+)")
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class RestorationTask:
    """A task by name: ``sr_x<N>`` (x N super-resolution of bicubically downsampled images), ``denoise_<sigma>``
    (Gaussian noise of that standard deviation on 0-255 values), ``derain`` (synthetic rain streaks), or a
    user-named task (``kind="custom"``: the user brings the degraded images; ``scale`` from the config)."""

    name: str
    kind: str  # "sr", "denoise", "derain" or "custom"
    scale: int = 1
    sigma: float = 0.0


def parse_task(name: str, scale: int | None = None) -> RestorationTask:
    """The task called ``name``; ``scale`` sets a user-named task's output scale (1 by default). ValueError for a
    name that is no identifier (lower case, digits, underscores) or an SR factor the upsampler cannot build (powers of
    2, or 3)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(
            f"task name {name!r} is not allowed: lower-case letters, digits and underscores, starting with a letter "
            "(sr_x2, sr_x3, sr_x4, denoise_30, denoise_50, derain, or a name of your own)"
        )
    if match := _SR.fullmatch(name):
        factor = int(match.group(1))
        if factor != 3 and (factor < 2 or factor & (factor - 1)):
            raise UsageError(f"task {name!r}: the upsampler builds x3 and powers of 2 (x2, x4, x8, ...), not x{factor}")
        if scale is not None and scale != factor:
            raise UsageError(f"task {name!r} is x{factor} super-resolution; a scale of {scale} contradicts its name")
        return RestorationTask(name, "sr", factor)
    if scale is not None and scale != 1 and (_DENOISE.fullmatch(name) or name == "derain"):
        raise UsageError(f"task {name!r} keeps the image size; a scale of {scale} contradicts its name")
    if match := _DENOISE.fullmatch(name):
        sigma = int(match.group(1))
        if sigma <= 0:
            raise UsageError(f"task {name!r}: the noise level must be positive")
        return RestorationTask(name, "denoise", 1, float(sigma))
    if name == "derain":
        return RestorationTask(name, "derain")
    factor = 1 if scale is None else scale
    if not isinstance(factor, int) or isinstance(factor, bool) or (factor != 3 and factor & (factor - 1)) or factor < 1:
        raise UsageError(f"task {name!r}: scale must be 1, 3 or a power of 2, got {scale!r}")
    return RestorationTask(name, "custom", factor)

# ----------------------------------------------------------------------------------------------------------------
# resampling and value ranges


def bicubic_resize(array: np.ndarray, height: int, width: int) -> np.ndarray:
    """(3, H, W) uint8 -> (3, height, width) uint8 with PIL's bicubic filter, as the original data pipeline (PIL
    rounds and clips)."""
    image = PIL.Image.fromarray(np.ascontiguousarray(np.moveaxis(array, 0, -1)), mode="RGB")
    return np.moveaxis(np.asarray(image.resize((width, height), PIL.Image.BICUBIC)), -1, 0)


def check_scale(scale: Any) -> int:
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise UsageError(f"scale={scale!r} must be a positive integer")
    return scale


def mod_crop(image: np.ndarray, scale: int = SCALE, name: str = "the image") -> np.ndarray:
    """``image`` (H, W, ...) with its bottom rows and right columns cut so that H and W are multiples of ``scale``.

    Raises:
        ValueError: a side shorter than ``scale``.
    """
    height, width = image.shape[:2]
    if height < scale or width < scale:
        raise UsageError(f"{name} is {height}x{width}, smaller than the scale {scale} on a side")
    return image[: height - height % scale, : width - width % scale]


def quantize(images: torch.Tensor, value_range: tuple[float, float]) -> torch.Tensor:
    """Images with values in ``value_range`` (a model's: TTSR's (-1, 1), IPT's (0, rgb_range)) -> uint8 0-255 of
    the same shape, scaled, rounded and clamped: how the originals save their outputs (``quantize``)."""
    low, high = value_range
    return ((images.detach().float().cpu() - low) * (255.0 / (high - low))).round().clamp(0, 255).to(torch.uint8)


def to_uint8(images: torch.Tensor, value_range: tuple[float, float]) -> list[np.ndarray]:
    """(B, 3, H, W) in ``value_range`` -> B (H, W, 3) uint8 arrays (:func:`quantize`)."""
    return [image.permute(1, 2, 0).numpy() for image in quantize(images, value_range)]


# ----------------------------------------------------------------------------------------------------------------
# the degradations

# Rain streak defaults: light rain, as Rain100L (sparse, thin, one direction per image).
RAIN_DENSITY = 0.004
RAIN_LENGTH = (10, 30)
RAIN_ANGLE = (-20.0, 20.0)
RAIN_BRIGHTNESS = (100.0, 200.0)
RAIN_SOFTNESS = 0.6


def _check_image(image: Any, what: str = "the image") -> None:
    """ValueError unless ``image`` is a non-empty (3, H, W) uint8 array."""
    if not isinstance(image, np.ndarray):
        raise UsageError(f"{what} must be a (3, H, W) uint8 numpy array, got {type(image).__name__}")
    if image.ndim != 3 or image.shape[0] != 3 or 0 in image.shape:
        raise UsageError(f"{what} must be a (3, H, W) uint8 array (RGB, channels first), got shape {image.shape}")
    if image.dtype != np.uint8:
        raise UsageError(f"{what} must hold uint8 values 0-255, got dtype {image.dtype}")


def bicubic_downscale(hr: np.ndarray, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """A super-resolution pair: ``hr`` (3, H, W) uint8 mod-cropped (bottom rows and right columns cut) to sides that
    are multiples of ``scale``, and that crop resized to 1/``scale`` with PIL's bicubic filter (uint8, PIL rounds).

    Benchmark low-resolution images are made with MATLAB's ``imresize`` instead (a slightly different antialiased
    kernel): use the released LR files to reproduce published numbers.

    Returns:
        ``(hr_cropped, lr)``: (3, s*h, s*w) and (3, h, w) uint8.

    Raises:
        ValueError: not a (3, H, W) uint8 image, a scale that is no positive int, a side shorter than ``scale``.
    """
    _check_image(hr, "the high-resolution image")
    check_scale(scale)
    cropped = mod_crop(np.moveaxis(hr, 0, -1), scale, "the high-resolution image")  # (H', W', 3) view
    cropped = np.ascontiguousarray(np.moveaxis(cropped, -1, 0))
    height, width = cropped.shape[1:]
    return cropped, bicubic_resize(cropped, height // scale, width // scale)


def add_gaussian_noise(image: np.ndarray, sigma: float, generator: RandomSource = None) -> np.ndarray:
    """``image`` (3, H, W) uint8 plus white Gaussian noise of standard deviation ``sigma`` (on 0-255 values),
    clamped to [0, 255] and **not rounded**: a float32 (3, H, W) array.

    This is the official IPT code's noise: the PyTorch test (``trainer.py``) adds ``torch.randn(hr.size()) *
    sigma`` and clamps to [0, 255]; the MindSpore training and test data add ``np.random.randn(*shape) * sigma``
    and clip; neither rounds the noisy image to 8 bits. With a ``torch.Generator`` (or an int seed) the noise is
    ``torch.randn(image.shape, generator=generator) * sigma`` in float32, so that ``torch.manual_seed(s)`` before
    the official code draws the same noise as ``seed=s`` here; with a ``numpy.random.Generator`` it is
    ``generator.standard_normal(image.shape) * sigma`` in float64, as the MindSpore code, then stored as float32.

    Raises:
        ValueError: not a (3, H, W) uint8 image, or ``sigma`` negative or not finite.
    """
    _check_image(image)
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not math.isfinite(sigma) or sigma < 0:
        raise UsageError(f"sigma={sigma!r} must be a finite number >= 0 (the noise's standard deviation on 0-255)")
    generator = as_generator(generator)
    if isinstance(generator, np.random.Generator):
        noisy = image + generator.standard_normal(image.shape) * sigma
        return np.clip(noisy, 0.0, 255.0).astype(np.float32)
    noise = torch.randn(image.shape, generator=generator).mul_(sigma)
    return (torch.from_numpy(image.astype(np.float32)) + noise).clamp_(0.0, 255.0).numpy()


def _range(value: Any, name: str, low: float, high: float = math.inf, integer: bool = False) -> tuple[Any, Any]:
    """A setting given as a number or a (low, high) range, as a (low, high) pair within [``low``, ``high``]."""
    values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    kind = int if integer else (int, float)
    if len(values) != 2 or any(isinstance(v, bool) or not isinstance(v, kind) or not math.isfinite(v) for v in values):
        what = "an integer" if integer else "a number"
        raise UsageError(f"{name}={value!r} must be {what} or a (low, high) pair of them")
    if values[0] < low or values[1] > high or values[0] > values[1]:
        raise UsageError(f"{name}={value!r}: values must lie in [{low}, {high}], a range (low, high) with low <= high")
    return values


def _draw(rng: np.random.Generator, value: Any, name: str, low: float, high: float = math.inf) -> float:
    """One value of a number-or-range setting, drawn uniformly (no draw for a single number)."""
    lo, hi = _range(value, name, low, high)
    return float(rng.uniform(lo, hi)) if lo < hi else float(lo)


def _line_offsets(length: int, angle: float) -> np.ndarray:
    """The (dy, dx) pixel offsets of a ``length``-pixel line through (0, 0), ``angle`` degrees off the vertical
    (positive: leaning right at the bottom): the support of a motion-blur line kernel, each pixel once."""
    steps = np.linspace(-(length - 1) / 2, (length - 1) / 2, 2 * length)  # oversampled so the line has no gaps
    radians = math.radians(angle)
    offsets = np.rint(np.stack([steps * math.cos(radians), steps * math.sin(radians)], axis=1)).astype(np.int64)
    return np.unique(offsets, axis=0)


def add_rain_streaks(
    image: np.ndarray,
    generator: RandomSource = None,
    *,
    density: float | tuple[float, float] = RAIN_DENSITY,
    length: int | tuple[int, int] = RAIN_LENGTH,
    angle: float | tuple[float, float] = RAIN_ANGLE,
    brightness: float | tuple[float, float] = RAIN_BRIGHTNESS,
    softness: float = RAIN_SOFTNESS,
) -> np.ndarray:
    """``image`` (3, H, W) uint8 with synthetic rain streaks added, clipped to [0, 255]: a float32 (3, H, W) array.

    The streak layer is made as rain is commonly synthesised for Rain100L-style data (the official IPT instead adds
    pre-rendered streak images of RainTrainL, a one-channel layer added to every channel and clipped):

    1. seeds: each pixel of the image (and of a margin as wide as a streak, so that streaks also enter from
       outside) starts a streak with probability ``density``, of a brightness drawn uniformly from ``brightness``;
    2. elongation: the seeds are spread along a line of ``length`` pixels at ``angle`` degrees off the vertical
       (one length and one angle per image, as a motion-blur line kernel), overlapping streaks adding up;
    3. softening: a Gaussian blur of ``softness`` pixels (0: none) gives the streaks soft edges;
    4. the grey layer is added to the three channels and the sum clipped to [0, 255] (not rounded).

    Each of ``density``, ``length``, ``angle`` and ``brightness`` is a number or a (low, high) range drawn uniformly
    per image (``length`` in whole pixels, both ends included; ``brightness`` is on 0-255 values, before the
    softening). The draws come from ``generator`` (see the module's docstring).

    Raises:
        ValueError: not a (3, H, W) uint8 image, or a setting out of range.
    """
    _check_image(image)
    if isinstance(softness, bool) or not isinstance(softness, (int, float)) or not softness >= 0:
        raise UsageError(f"softness={softness!r} must be a number >= 0 (the Gaussian blur's sigma in pixels)")
    lengths = _range(length, "length", 1, integer=True)
    bright = _range(brightness, "brightness", 0.0)
    rng = numpy_generator(generator)
    rain_density = _draw(rng, density, "density", 0.0, 1.0)
    line = int(rng.integers(lengths[0], lengths[1] + 1))
    offsets = _line_offsets(line, _draw(rng, angle, "angle", -90.0, 90.0))
    height, width = image.shape[1:]
    margin = int(np.abs(offsets).max())
    seeds = np.nonzero(rng.random((height + 2 * margin, width + 2 * margin)) < rain_density)
    values = rng.uniform(bright[0], bright[1], seeds[0].size)
    ys = seeds[0][:, None] - margin + offsets[None, :, 0]  # (seeds, line pixels)
    xs = seeds[1][:, None] - margin + offsets[None, :, 1]
    inside = (ys >= 0) & (ys < height) & (xs >= 0) & (xs < width)
    layer = np.zeros((height, width))
    np.add.at(layer, (ys[inside], xs[inside]), np.broadcast_to(values[:, None], ys.shape)[inside])
    if softness > 0:
        layer = gaussian_filter(layer, softness, mode="constant")
    return np.clip(image + layer[None], 0.0, 255.0).astype(np.float32)


def degrade(
    hr: np.ndarray, task: RestorationTask | str, generator: RandomSource = None
) -> tuple[np.ndarray, np.ndarray]:
    """A training pair for ``task`` made from a clean image ``hr`` (3, H, W) uint8.

    ``sr_x<N>``: :func:`bicubic_downscale` (the clean image is mod-cropped to multiples of N); ``denoise_<sigma>``:
    :func:`add_gaussian_noise`; ``derain``: :func:`add_rain_streaks` with its defaults.

    Returns:
        ``(degraded, clean)``: the degraded image as float32 (3, h, w) values in [0, 255] (for SR the bicubic
        image, whole numbers; for noise and rain not rounded, as the official pipelines) and the clean target,
        uint8 (``hr`` itself, or its mod-cropped copy for SR).

    Raises:
        ValueError: a custom task (its degradation is the user's: bring the degraded images), an unknown task name,
            or a bad image.
    """
    task = parse_task(task) if isinstance(task, str) else task
    if not isinstance(task, RestorationTask):
        raise UsageError(f"task must be a task name or a RestorationTask, got {type(task).__name__}")
    if task.kind == "sr":
        clean, lr = bicubic_downscale(hr, task.scale)
        return lr.astype(np.float32), clean
    if task.kind == "denoise":
        return add_gaussian_noise(hr, task.sigma, generator), hr
    if task.kind == "derain":
        return add_rain_streaks(hr, generator), hr
    raise UsageError(
        f"task {task.name!r} is a custom task: hf_xcv does not know its degradation, so bring the degraded images "
        "with their clean targets yourself (image processor: images=degraded, labels=clean)"
    )
