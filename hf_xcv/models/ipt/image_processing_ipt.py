"""IPT image processor: images as the official code feeds them (RGB, values 0-255 scaled to ``[0, rgb_range]``),
training pairs made from clean images by a task's degradation, and the way back to PIL images."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import PIL.Image
import torch
from transformers.image_processing_utils import BatchFeature
from transformers.processing_utils import ImagesKwargs

from ...processing import prepare_rgb8
from ...processing.fixed import FixedPipelineProcessor
from ...processing.restoration import RestorationTask, degrade, parse_task
from ...utils.errors import UsageError
from ...utils.generators import as_generator

SETTINGS = ("rgb_range", "do_convert_rgb")


class IPTImageProcessorKwargs(ImagesKwargs, total=False):
    """The settings of :class:`IPTImageProcessor`."""

    rgb_range: float | None
    do_convert_rgb: bool | None


def _check_rgb_range(rgb_range: Any) -> None:
    number = not isinstance(rgb_range, bool) and isinstance(rgb_range, (int, float))
    if not number or not math.isfinite(rgb_range) or rgb_range <= 0:
        raise UsageError(f"rgb_range={rgb_range!r} must be a positive number (255: the official models')")


def _scaled(array: np.ndarray, rgb_range: float) -> np.ndarray:
    """0-255 values (uint8 or float) -> float32 in [0, rgb_range], as the official ``np2Tensor``."""
    return array.astype(np.float32) * np.float32(rgb_range / 255)


def _size(array: np.ndarray) -> str:
    return f"{array.shape[-2]}x{array.shape[-1]}"


def _check_one_size(arrays: list[np.ndarray], what: str, hint: str = "") -> None:
    sizes = sorted({tuple(array.shape[-2:]) for array in arrays})
    if len(sizes) > 1:
        named = ", ".join(f"{h}x{w}" for h, w in sizes)
        raise UsageError(f"the {what} of one batch have different sizes ({named}): process them one by one{hint}")


class IPTImageProcessor(FixedPipelineProcessor):
    """Makes IPT's inputs as the official code does (``data/common.py``: RGB, values 0-255 times
    ``rgb_range / 255``), in one of three ways:

    * ``processor(images)``: ``pixel_values`` (B, 3, H, W) float32 in ``[0, rgb_range]``: degraded images to
      restore;
    * ``processor(clean_images=..., task="sr_x4", seed=0)``: training or evaluation pairs made from clean images by
      the task's degradation (:func:`hf_xcv.processing.restoration.degrade`: bicubic downscaling, Gaussian noise, rain
      streaks): ``pixel_values`` the degraded images, ``labels`` the clean ones (mod-cropped to multiples of the
      scale for SR). ``seed`` (or ``generator``) makes the draws repeatable;
    * ``processor(images=degraded, labels=clean, task=...)``: pairs the user brings (a custom task's, or real
      degraded photos); the sizes are checked against the task's scale (without ``task``: one whole scale).

    Saved as ``"image_processor_type": "IPTImageProcessor"`` (transformers has no class of that name).

    Args (also accepted per call):
        rgb_range: the value 255 maps to (255, the default, as the official models; 1 for models trained on
            [0, 1]).
        do_convert_rgb: grayscale, palette and RGBA images become RGB (alpha composited on white).

    Images: PIL images, numpy arrays (HW, HWC or CHW) or torch tensors, read as every processor reads them
    (:mod:`hf_xcv.processing.input_policy`: uint8 0-255, floats in [0, 1] or 0-255 levels, 16-bit scaled, alpha on
    white), then rounded to 8 bits as the original reads images; one or a batch of one size.
    """

    valid_kwargs = IPTImageProcessorKwargs
    SETTINGS = SETTINGS
    model_input_names = ["pixel_values"]
    rgb_range = 255
    do_convert_rgb = True

    def check_settings(self) -> None:
        _check_rgb_range(self.rgb_range)

    # ------------------------------------------------------------------------------------------------------------
    # preprocessing

    def __call__(self, images: Any = None, labels: Any = None, **kwargs: Any) -> BatchFeature:
        return self.preprocess(images, labels, **kwargs)

    def preprocess(
        self,
        images: Any = None,
        labels: Any = None,
        return_tensors: str | None = None,
        *,
        clean_images: Any = None,
        task: RestorationTask | str | None = None,
        seed: int | None = None,
        generator: torch.Generator | np.random.Generator | None = None,
        **kwargs: Any,
    ) -> BatchFeature:
        """Degraded ``images`` (with their clean ``labels``), or ``clean_images`` to degrade for ``task`` ->
        ``pixel_values`` (and ``labels``), float32 in ``[0, rgb_range]``. ``return_tensors="pt"`` gives torch
        tensors."""
        rgb_range = kwargs.pop("rgb_range", self.rgb_range)
        to_rgb = kwargs.pop("do_convert_rgb", None)
        to_rgb = self.do_convert_rgb if to_rgb is None else to_rgb
        data_format = kwargs.pop("input_data_format", None)
        data_format = getattr(data_format, "value", data_format)
        if kwargs:
            raise UsageError(f"unknown argument(s) {sorted(kwargs)}; see IPTImageProcessor.preprocess")
        _check_rgb_range(rgb_range)
        task = parse_task(task) if isinstance(task, str) else task
        if task is not None and not isinstance(task, RestorationTask):
            raise UsageError(f"task must be a task name (sr_x4, denoise_30, derain, ...), got {type(task).__name__}")
        if (seed is not None or generator is not None) and clean_images is None:
            raise UsageError("seed and generator draw the degradation of clean_images; these inputs are not degraded")

        def coerce(given: Any, what: str) -> list[np.ndarray]:
            return self._coerce(given, what, bool(to_rgb), data_format)

        if clean_images is not None:
            if images is not None or labels is not None:
                raise UsageError("pass clean_images (degraded here into pixel_values and labels) or images, not both")
            degraded, clean = self._degrade(coerce(clean_images, "clean image"), task, seed, generator)
            data = {"pixel_values": degraded, "labels": clean}
        elif images is None:
            raise UsageError("pass images (to restore, with labels for pairs), or clean_images with a task to degrade")
        elif labels is not None:
            inputs, targets = coerce(images, "image"), coerce(labels, "label")
            self._check_pairs(inputs, targets, task)
            data = {"pixel_values": inputs, "labels": targets}
        else:
            if task is not None:
                raise UsageError(
                    "images are taken as the degraded inputs, as they are: to degrade clean images for a task pass "
                    "clean_images=..., task=...; to check pairs pass labels=... with the task"
                )
            data = {"pixel_values": coerce(images, "image")}
            _check_one_size(data["pixel_values"], "images", " (the model restores any size, one at a time)")
        values = {key: np.stack([_scaled(array, rgb_range) for array in arrays]) for key, arrays in data.items()}
        return BatchFeature(values, tensor_type=return_tensors)

    @staticmethod
    def _degrade(
        arrays: list[np.ndarray], task: RestorationTask | None, seed: int | None, generator: Any
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(degraded, clean) lists of the clean images for ``task``, one generator drawn from image to image."""
        if task is None:
            raise UsageError("clean_images need the task whose degradation to apply: task='sr_x4', 'denoise_30', ...")
        if seed is not None and generator is not None:
            raise UsageError("pass seed or generator, not both")
        if task.kind == "custom":
            degrade(arrays[0], task)  # raises, saying that the user brings a custom task's degraded images
        for index, array in enumerate(arrays):
            if min(array.shape[1:]) < task.scale:
                raise UsageError(
                    f"clean image {index} is {_size(array)}, smaller than the x{task.scale} scale on a side"
                )
        rng = as_generator(generator if generator is not None else seed)
        pairs = [degrade(array, task, rng) for array in arrays]
        cut = f" (once cut to multiples of the scale {task.scale})" if task.scale > 1 else ""
        _check_one_size([clean for _, clean in pairs], "clean images" + cut)
        return [degraded for degraded, _ in pairs], [clean for _, clean in pairs]

    @staticmethod
    def _check_pairs(inputs: list[np.ndarray], targets: list[np.ndarray], task: RestorationTask | None) -> None:
        """ValueError unless every label is its image's size times one scale (the task's, if given)."""
        if len(inputs) != len(targets):
            raise UsageError(f"got {len(inputs)} images and {len(targets)} labels: one label (clean image) per image")
        scale = task.scale if task is not None else None
        for index, (image, label) in enumerate(zip(inputs, targets)):
            (h, w), (lh, lw) = image.shape[1:], label.shape[1:]
            if scale is None:
                if lh % h or lw % w or lh // h != lw // w:
                    raise UsageError(
                        f"label {index} ({lh}x{lw}) is no whole multiple of image {index} ({h}x{w}), the same on both "
                        "sides: labels are the clean images, the input's size times the task's scale"
                    )
                scale = lh // h
            if (lh, lw) != (scale * h, scale * w):
                what = f"task {task.name!r} is x{scale}" if task is not None else f"the batch's first pair is x{scale}"
                raise UsageError(
                    f"label {index} is {lh}x{lw} but image {index} is {h}x{w}: {what}, so the label must be "
                    f"{scale * h}x{scale * w}"
                )
        _check_one_size(inputs, "images")

    @staticmethod
    def _coerce(images: Any, what: str, to_rgb: bool, data_format: Any) -> list[np.ndarray]:
        """(3, H, W) uint8 arrays, or a ValueError naming the problem."""
        return prepare_rgb8(images, what, to_rgb, data_format, "IPT")

    # ------------------------------------------------------------------------------------------------------------
    # postprocessing

    def postprocess(
        self, reconstruction: Any, target_sizes: Sequence[tuple[int, int]] | None = None
    ) -> list[PIL.Image.Image]:
        """``reconstruction`` (B, 3, H, W) in ``[0, rgb_range]`` (or a model output holding one as
        ``.reconstruction``) -> B RGB PIL images: values scaled to 0-255, clamped and rounded (the official
        ``quantize``); ``target_sizes`` crops each to (height, width) from the top left."""
        return self.to_pil_images(reconstruction, target_sizes, value_range=(0.0, self.rgb_range))
