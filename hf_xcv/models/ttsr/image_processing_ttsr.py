"""TTSR image processor: the original data pipeline (PIL bicubic resizing, values in [-1, 1]) for a low-resolution
image (or a high-resolution one to degrade) and a reference, and the way back to PIL images."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import PIL.Image
from transformers.image_processing_utils import BatchFeature
from transformers.processing_utils import ImagesKwargs

from ...processing import prepare_rgb8
from ...processing.fixed import FixedPipelineProcessor
from ...processing.restoration import SCALE, bicubic_resize
from ...utils.errors import UsageError

MIN_LR_SIDE = 3  # one 3x3 patch of the relevance embedding
DIVISIBILITY_MODES = ("crop", "pad")
SETTINGS = ("size_divisibility_mode", "reference_size", "do_convert_rgb")


class TTSRImageProcessorKwargs(ImagesKwargs, total=False):
    """The settings of :class:`TTSRImageProcessor`."""

    size_divisibility_mode: str | None
    reference_size: dict[str, int] | None
    do_convert_rgb: bool | None


def to_unit_range(array: np.ndarray) -> np.ndarray:
    """0-255 values -> [-1, 1] float32 (``x / 127.5 - 1``, the original's)."""
    return array.astype(np.float32) / 127.5 - 1.0


def _fit_to_multiple(array: np.ndarray, mode: str) -> np.ndarray:
    """(C, H, W) cut (``"crop"``: bottom and right, as the original) or edge-padded (``"pad"``) to sides that are
    multiples of 4."""
    height, width = array.shape[-2:]
    if mode == "crop":
        return array[:, : height - height % SCALE, : width - width % SCALE]
    return np.pad(array, ((0, 0), (0, -height % SCALE), (0, -width % SCALE)), mode="edge")


class TTSRImageProcessor(FixedPipelineProcessor):
    """Makes TTSR's four inputs, in [-1, 1], from a low-resolution image (or a high-resolution one to degrade) and a
    reference, with PIL's bicubic filter as the original data pipeline (``dataset/cufed.py``):

    * ``pixel_values``: the low-resolution image LR (h x w); given ``high_resolution_images``, LR is the HR image
      resized to a quarter, and the HR image is returned as ``labels``;
    * ``upsampled_pixel_values``: LR resized x4 (LR↑);
    * ``reference_pixel_values``: the reference (Ref), sides made multiples of 4;
    * ``degraded_reference_pixel_values``: Ref resized to a quarter and back (Ref↓↑).

    Saved as ``"image_processor_type": "TTSRImageProcessor"`` (transformers has no class of that name).

    Args (also accepted per call):
        size_divisibility_mode: ``"crop"`` (default, the original's: the bottom and right remainder of a
            high-resolution image or reference whose sides are not multiples of 4 is cut off) or ``"pad"`` (edge
            replication up to the next multiple; crop the reconstruction back with ``postprocess(...,
            target_sizes=[original size])``).
        reference_size: ``{"height": H, "width": W}``: references are placed in the top-left corner of an H x W black
            canvas, as the original training batches are (160 x 160), so that references of different sizes batch
            together; a reference larger than that is an error. ``None`` (default): each reference at its own size
            (references of one batch must then share it).
        do_convert_rgb: grayscale, palette and RGBA images become RGB (alpha composited on white).

    Images: PIL images, numpy arrays (HW, HWC or CHW) or torch tensors, read as every processor reads them
    (:mod:`hf_xcv.processing.input_policy`: uint8 0-255, floats in [0, 1] or 0-255 levels, 16-bit scaled, alpha on
    white), then rounded to 8 bits as the original reads images; one or a batch; one reference may serve a whole batch.
    """

    valid_kwargs = TTSRImageProcessorKwargs
    SETTINGS = SETTINGS
    model_input_names = [
        "pixel_values",
        "upsampled_pixel_values",
        "reference_pixel_values",
        "degraded_reference_pixel_values",
    ]
    size_divisibility_mode = "crop"
    reference_size = None
    do_convert_rgb = True

    def check_settings(self) -> None:
        self._check_settings(self.size_divisibility_mode, self.reference_size)

    @staticmethod
    def _check_settings(mode: Any, reference_size: Any) -> None:
        if mode not in DIVISIBILITY_MODES:
            raise UsageError(
                f"size_divisibility_mode={mode!r} is not allowed; allowed values: {list(DIVISIBILITY_MODES)}"
            )
        if reference_size is None:
            return
        sides = [reference_size.get(k) for k in ("height", "width")] if isinstance(reference_size, dict) else []
        if len(sides) != 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < 12 or s % SCALE for s in sides):
            raise UsageError(
                'reference_size must be {"height": H, "width": W} with sides that are multiples of 4 and at least 12, '
                f"got {reference_size!r}"
            )

    # ------------------------------------------------------------------------------------------------------------
    # preprocessing

    def __call__(self, images: Any = None, references: Any = None, **kwargs: Any) -> BatchFeature:
        return self.preprocess(images, references, **kwargs)

    def preprocess(
        self,
        images: Any = None,
        references: Any = None,
        return_tensors: str | None = None,
        *,
        high_resolution_images: Any = None,
        **kwargs: Any,
    ) -> BatchFeature:
        """Low-resolution ``images`` (or ``high_resolution_images`` to degrade, returned as ``labels``) and their
        ``references`` -> TTSR's four inputs (and ``labels``). ``return_tensors="pt"`` gives torch tensors."""
        mode = kwargs.pop("size_divisibility_mode", self.size_divisibility_mode)
        reference_size = kwargs.pop("reference_size", self.reference_size)
        to_rgb = kwargs.pop("do_convert_rgb", None)
        to_rgb = self.do_convert_rgb if to_rgb is None else to_rgb
        data_format = kwargs.pop("input_data_format", None)
        if kwargs:
            raise UsageError(f"unknown argument(s) {sorted(kwargs)}; see TTSRImageProcessor.preprocess")
        self._check_settings(mode, reference_size)
        if (images is None) == (high_resolution_images is None):
            raise UsageError("pass either images (low-resolution) or high_resolution_images (to degrade), not both")
        if references is None:
            raise UsageError("TTSR needs a reference image for every image (references=...)")
        given = images if images is not None else high_resolution_images
        arrays = self._coerce(given, "image", to_rgb, data_format)
        refs = self._coerce(references, "reference", to_rgb, data_format)
        if len(refs) == 1 and len(arrays) > 1:
            refs = refs * len(arrays)
        if len(refs) != len(arrays):
            raise UsageError(f"got {len(arrays)} images and {len(refs)} references: one reference per image (or one)")
        refs = [_fit_to_multiple(ref, mode) for ref in refs]
        labels = None
        if high_resolution_images is not None:
            labels = [_fit_to_multiple(hr, mode) for hr in arrays]
            self._check_sizes([hr[:, ::SCALE, ::SCALE] for hr in labels], refs, reference_size)  # before resizing
            arrays = [bicubic_resize(hr, hr.shape[1] // SCALE, hr.shape[2] // SCALE) for hr in labels]
        else:
            self._check_sizes(arrays, refs, reference_size)
        data = {
            "pixel_values": [to_unit_range(lr) for lr in arrays],
            "upsampled_pixel_values": [
                to_unit_range(bicubic_resize(lr, SCALE * lr.shape[1], SCALE * lr.shape[2])) for lr in arrays
            ],
            "reference_pixel_values": [to_unit_range(ref) for ref in refs],
            "degraded_reference_pixel_values": [to_unit_range(self.degrade_reference(ref)) for ref in refs],
        }
        if reference_size is not None:
            for key in ("reference_pixel_values", "degraded_reference_pixel_values"):
                data[key] = [_on_canvas(x, reference_size) for x in data[key]]
        if labels is not None:
            data["labels"] = [to_unit_range(hr) for hr in labels]
        return BatchFeature({key: np.stack(values) for key, values in data.items()}, tensor_type=return_tensors)

    def check_pair_sizes(self, high_resolution: np.ndarray, reference: np.ndarray) -> None:
        """ValueError unless a (3, H, W) high-resolution image and its reference (any content: only the sizes count)
        make inputs TTSR takes, as :meth:`preprocess` would refuse them (with this processor's settings)."""
        mode = self.size_divisibility_mode
        hr, ref = _fit_to_multiple(high_resolution, mode), _fit_to_multiple(reference, mode)
        self._check_sizes([hr[:, ::SCALE, ::SCALE]], [ref], self.reference_size)

    @staticmethod
    def degrade_reference(reference: np.ndarray) -> np.ndarray:
        """Ref↓↑: (3, H, W) uint8 with sides multiples of 4, bicubically resized to a quarter and back."""
        height, width = reference.shape[-2:]
        return bicubic_resize(bicubic_resize(reference, height // SCALE, width // SCALE), height, width)

    @staticmethod
    def _coerce(images: Any, what: str, to_rgb: bool, data_format: Any) -> list[np.ndarray]:
        """(3, H, W) uint8 arrays, or a ValueError naming the problem."""
        return prepare_rgb8(images, what, to_rgb, data_format, "TTSR")

    @staticmethod
    def _check_sizes(images: list[np.ndarray], references: list[np.ndarray], reference_size: Any) -> None:
        """Sizes the model can take, each failure named: one low-resolution size per batch, one 3x3 patch at least,
        references no smaller than their image, within the canvas when there is one."""
        for index, (lr, ref) in enumerate(zip(images, references)):
            (h, w), (rh, rw) = lr.shape[-2:], ref.shape[-2:]
            if min(h, w) < MIN_LR_SIDE or min(rh, rw) < SCALE * MIN_LR_SIDE:
                raise UsageError(
                    f"image {index}: the low-resolution image ({h}x{w}) and the reference ({rh}x{rw}, after cropping "
                    "to multiples of 4) must be at least 3x3 and 12x12: one 3x3 patch of TTSR's relevance embedding"
                )
            if h * w > rh * rw:
                raise UsageError(
                    f"image {index}: the low-resolution image ({h}x{w}) is larger than its reference ({rh}x{rw}); the "
                    "reference is a high-resolution image of similar content (images and references swapped?)"
                )
            if reference_size is not None and (rh > reference_size["height"] or rw > reference_size["width"]):
                raise UsageError(
                    f"reference {index} is {rh}x{rw}, larger than the {reference_size['height']}x"
                    f"{reference_size['width']} canvas this processor was told (reference_size); crop it or pass a "
                    "larger reference_size"
                )
        for what, arrays in (("low-resolution images", images), ("references", references)):
            sizes = sorted({tuple(a.shape[-2:]) for a in arrays})
            if len(sizes) > 1 and not (what == "references" and reference_size is not None):
                hint = " or pass reference_size to batch them on one canvas" if what == "references" else ""
                raise UsageError(f"the {what} of one batch have different sizes {sizes}: process them one by one{hint}")

    # ------------------------------------------------------------------------------------------------------------
    # postprocessing

    def postprocess(
        self, reconstruction: Any, target_sizes: Sequence[tuple[int, int]] | None = None
    ) -> list[PIL.Image.Image]:
        """``reconstruction`` (B, 3, H, W) in [-1, 1] (or a model output holding one) -> B RGB PIL images (values
        rounded, as the original saves them); ``target_sizes`` crops each to (height, width), e.g. the original size
        of a high-resolution image padded with ``size_divisibility_mode="pad"``."""
        return self.to_pil_images(reconstruction, target_sizes, value_range=(-1.0, 1.0))


def _on_canvas(image: np.ndarray, size: dict[str, int]) -> np.ndarray:
    """(3, h, w) in [-1, 1] in the top-left corner of a black (-1) canvas of ``size``."""
    canvas = np.full((image.shape[0], size["height"], size["width"]), -1.0, dtype=np.float32)
    canvas[:, : image.shape[1], : image.shape[2]] = image
    return canvas
