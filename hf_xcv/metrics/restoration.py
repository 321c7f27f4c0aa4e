"""PSNR and SSIM of restored images, as super-resolution papers report them, as an ``evaluate.Metric`` and plain
functions.

The convention is EDSR's, RCAN's, BasicSR's and IPT's (the Y channel as TTSR's tables too; TTSR's own evaluation
code shaves no border: pass ``shave=0`` to compare with the paper's CUFED5 figures):

- images are uint8, 0-255; prediction and reference have the same size (mod-crop the reference to the scale first);
- ``channel="y"``: the Y channel of BT.601 YCbCr as MATLAB's ``rgb2ycbcr`` computes it,
  ``Y = 16 + (65.481 R + 128.553 G + 24.966 B) / 255``, kept as a float (not rounded to uint8, as BasicSR);
  ``channel="rgb"``: the three RGB channels;
- ``shave`` pixels are cut off every border first, ``scale`` of them unless given (0 is allowed);
- PSNR = 10 log10(255² / MSE), the MSE over every pixel and channel left;
- SSIM is Wang et al. 2004 as scikit-image computes it with MATLAB's settings (11x11 Gaussian window of sigma 1.5,
  K1 = 0.01, K2 = 0.03, data range 255, population covariance, the mean over the valid region), averaged over the
  channels for ``"rgb"``.

Grayscale images ((H, W) or (H, W, 1), or PIL mode ``"L"``) are scored on their own values under either channel
choice, as BasicSR does (their Y would be ``16 + 219/255 v``, 1.3 dB apart): compare like with like.

A prediction equal to its reference has an MSE of 0 and a PSNR of ``inf`` (as scikit-image's), and a mean over
images holding such a one is ``inf`` as well; ``per_image=True`` shows which. SSIM needs scikit-image (the
``restoration`` extra); PSNR alone (:func:`psnr`) needs only numpy.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import datasets
import evaluate
import numpy as np
import PIL.Image

CHANNELS = ("y", "rgb")
SSIM_WINDOW = 11  # scikit-image's Gaussian window with sigma 1.5: 2 * int(3.5 * 1.5 + 0.5) + 1
_Y_WEIGHTS = np.array([65.481, 128.553, 24.966])  # MATLAB rgb2ycbcr, for R, G, B in [0, 1]
_Y_OFFSET = 16.0
_CITATION = """\
@article{wang2004image,
    title = "Image quality assessment: from error visibility to structural similarity",
    author = "Wang, Zhou and Bovik, Alan C. and Sheikh, Hamid R. and Simoncelli, Eero P.",
    journal = "IEEE Transactions on Image Processing",
    volume = "13",
    number = "4",
    pages = "600--612",
    year = "2004",
}
"""
_INPUTS = (
    "predictions, references: uint8 images, (H, W, 3) RGB or (H, W) grayscale numpy arrays or PIL images, a "
    "prediction of the same size as its reference; sizes may differ between images. compute options: scale (4), "
    "channel ('y' or 'rgb'), shave (None: scale pixels per border), per_image (False)."
)


def _structural_similarity() -> Any:
    """scikit-image's SSIM, imported when first needed: scikit-image is an optional extra."""
    try:
        from skimage.metrics import structural_similarity
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("SSIM needs scikit-image: pip install 'hf_xcv[restoration]'") from err
    return structural_similarity


# ----------------------------------------------------------------------------------------------------------------
# inputs: checked uint8 arrays


def _array(image: Any, where: str) -> np.ndarray:
    """A PIL image, numpy array or torch tensor as a numpy array (PIL: modes RGB and L only)."""
    if isinstance(image, PIL.Image.Image):
        if image.mode not in ("RGB", "L"):
            raise ValueError(f"{where} is a PIL image of mode {image.mode!r}: convert it to 'RGB' (or 'L') first")
        return np.asarray(image)
    if hasattr(image, "detach"):  # a torch tensor, duck-typed so that numpy users need no torch
        image = image.detach().cpu().numpy()
    if not isinstance(image, np.ndarray):
        raise ValueError(f"{where} must be a numpy array or a PIL image, got {type(image).__name__}")
    return image


def _check_layout(array: np.ndarray, where: str) -> np.ndarray:
    """(H, W, 3) stays; (H, W) and (H, W, 1) become (H, W); anything else is an error."""
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim == 2 or (array.ndim == 3 and array.shape[2] == 3):
        if 0 in array.shape:
            raise ValueError(f"{where} is empty: shape {array.shape}")
        return array
    hint = ""
    if array.ndim == 3 and array.shape[0] in (1, 3):
        hint = " (channels first? move the channel axis last)"
    elif array.ndim == 3 and array.shape[2] == 4:
        hint = " (RGBA? drop the alpha channel)"
    raise ValueError(f"{where} must be (H, W, 3) RGB or (H, W) grayscale, got shape {array.shape}{hint}")


def _check_values(array: np.ndarray, where: str) -> np.ndarray:
    """uint8 stays; other integer arrays become uint8 when every value is in 0..255; floats and bools are errors."""
    if array.dtype == np.uint8:
        return array
    if array.dtype == bool or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"{where} has dtype {array.dtype}: the metric takes uint8 images in 0..255; round and clip a model "
            "output first, e.g. np.clip(np.round(x * 255), 0, 255).astype(np.uint8) for x in [0, 1]"
        )
    low, high = int(array.min()), int(array.max())
    if low < 0 or high > 255:
        raise ValueError(f"{where} has values in {low}..{high}, outside 0..255")
    return array.astype(np.uint8)


def as_image_array(image: Any, where: str = "image") -> np.ndarray:
    """``image`` as a checked uint8 array, (H, W, 3) for RGB or (H, W) for grayscale.

    Args:
        image: a PIL image (mode RGB or L), a numpy array or a CPU/GPU torch tensor, channels last, of uint8 (or of
            another integer dtype with every value in 0..255).
        where: how error messages name the image.

    Raises:
        ValueError: another layout, a float or bool dtype, values outside 0..255, or an empty image.
    """
    return _check_values(_check_layout(_array(image, where), where), where)


def _check_pair(prediction: Any, reference: Any, where: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Both images checked; they must have the same shape. ``where`` (e.g. " of image 3") ends the messages."""
    pred = as_image_array(prediction, f"the prediction{where}")
    ref = as_image_array(reference, f"the reference{where}")
    if pred.shape != ref.shape:
        raise ValueError(
            f"the prediction{where} has shape {pred.shape} but its reference has shape {ref.shape}: they must be "
            "equal (mod-crop the reference to the scale)"
        )
    return pred, ref


# ----------------------------------------------------------------------------------------------------------------
# the numbers


def rgb_to_y(image: np.ndarray) -> np.ndarray:
    """(H, W, 3) RGB in 0..255 -> (H, W) float64 Y of BT.601 YCbCr, MATLAB ``rgb2ycbcr``'s, not rounded (16..235)."""
    return image.astype(np.float64) / 255.0 @ _Y_WEIGHTS + _Y_OFFSET


def _check_options(scale: Any, channel: Any, shave: Any) -> int:
    """The checked options' shave in pixels."""
    if isinstance(scale, bool) or not isinstance(scale, int | np.integer) or scale < 1:
        raise ValueError(f"scale must be a positive integer, got {scale!r}")
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {list(CHANNELS)}, got {channel!r}")
    if shave is None:
        return int(scale)
    if isinstance(shave, bool) or not isinstance(shave, int | np.integer) or shave < 0:
        raise ValueError(f"shave must be a non-negative integer or None (the scale), got {shave!r}")
    return int(shave)


def _scored_planes(
    pred: np.ndarray, ref: np.ndarray, channel: str, shave: int, where: str, min_side: int = SSIM_WINDOW
) -> tuple[np.ndarray, ...]:
    """Both images as float64, converted to Y (RGB images, ``channel="y"``) and shaved, at least ``min_side``
    pixels a side left (SSIM's window; 1 for PSNR alone)."""
    height, width = pred.shape[:2]
    if min(height, width) - 2 * shave < min_side:
        needs = f"{SSIM_WINDOW}x{SSIM_WINDOW} (SSIM's window)" if min_side == SSIM_WINDOW else "one pixel"
        raise ValueError(
            f"the image{where} of size {height}x{width} is too small: after shaving {shave} pixels per border it "
            f"must still be at least {needs}, i.e. at least {min_side + 2 * shave} pixels a side"
        )
    planes = []
    for image in (pred, ref):
        image = rgb_to_y(image) if channel == "y" and image.ndim == 3 else image.astype(np.float64)
        planes.append(image[shave : height - shave, shave : width - shave])
    return tuple(planes)


def _psnr(pred: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((pred - ref) ** 2))
    return math.inf if mse == 0.0 else float(10.0 * np.log10(255.0**2 / mse))


def _ssim(pred: np.ndarray, ref: np.ndarray) -> float:
    structural_similarity = _structural_similarity()
    channel_axis = 2 if pred.ndim == 3 else None
    return float(
        structural_similarity(
            ref, pred, data_range=255, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
            channel_axis=channel_axis,
        )
    )  # fmt: skip


def psnr(prediction: Any, reference: Any, scale: int = 4, channel: str = "y", shave: int | None = None) -> float:
    """The PSNR (dB) of one prediction against its reference, by the module's convention; ``inf`` when they are
    equal. Needs only numpy, and only a pixel left after the shave; see :func:`psnr_ssim` for the arguments."""
    shave = _check_options(scale, channel, shave)
    pred, ref = _scored_planes(*_check_pair(prediction, reference), channel, shave, "", min_side=1)
    return _psnr(pred, ref)


def psnr_ssim(
    prediction: Any, reference: Any, scale: int = 4, channel: str = "y", shave: int | None = None
) -> tuple[float, float]:
    """The PSNR (dB; ``inf`` when the images are equal) and SSIM of one prediction against its reference.

    Args:
        prediction: the restored image: uint8 (H, W, 3) RGB or (H, W) grayscale, numpy array, PIL image (RGB or L)
            or torch tensor, channels last.
        reference: the ground truth, of the same shape.
        scale: the super-resolution factor; it is the default shave.
        channel: ``"y"`` (the Y of BT.601 YCbCr) or ``"rgb"``; grayscale images are scored as they are.
        shave: pixels cut off each border before scoring; None: ``scale``.

    Raises:
        ValueError: a bad image (see :func:`as_image_array`), shapes that differ, an image smaller than
            ``2 * shave + 11`` pixels a side, or a bad option.
    """
    shave = _check_options(scale, channel, shave)
    pred, ref = _scored_planes(*_check_pair(prediction, reference), channel, shave, "")
    return _psnr(pred, ref), _ssim(pred, ref)


# ----------------------------------------------------------------------------------------------------------------
# the metric


def _bmp(image: np.ndarray) -> dict[str, Any]:
    """An image as ``datasets.Image`` storage: BMP, lossless for RGB and L and ~100x faster to write than PNG."""
    buffer = io.BytesIO()
    PIL.Image.fromarray(image).save(buffer, format="BMP")
    return {"bytes": buffer.getvalue(), "path": None}


def _is_batch(value: Any) -> bool:
    """A list or tuple of images, or a 4-D (N, H, W, C) array or tensor."""
    if hasattr(value, "ndim"):
        return value.ndim == 4
    return hasattr(value, "__len__") and not isinstance(value, PIL.Image.Image | Mapping | str | bytes)


class PSNRSSIM(evaluate.Metric):
    """Mean PSNR and SSIM over images, each scored by :func:`psnr_ssim`; needs no Hub.

    Images may differ in size from one pair to the next: they are stored as ``datasets.Image`` features (BMP bytes,
    lossless). Each batch is checked when it is added, so a bad image fails in the ``add_batch`` call that brought
    it, named by its index in the call (and overall, after earlier batches).

    Args:
        scale, channel, shave: the defaults of ``compute``'s options of the same names (see :func:`psnr_ssim`); set
            them here to combine two differently configured metrics with ``evaluate.combine``.
        **kwargs: ``evaluate.Metric``'s own arguments.

    ``compute(predictions=..., references=..., scale=4, channel="y", shave=None, per_image=False)`` returns
    ``{"psnr": mean dB, "ssim": mean}``, plus the lists ``psnr_per_image`` and ``ssim_per_image`` in the order added
    when ``per_image`` is true. The mean PSNR is ``inf`` when any prediction equals its reference.
    """

    def __init__(self, *, scale: int = 4, channel: str = "y", shave: int | None = None, **kwargs) -> None:
        _check_options(scale, channel, shave)
        self.scale, self.channel, self.shave = scale, channel, shave
        super().__init__(**kwargs)

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description="PSNR and SSIM (Y channel of BT.601 YCbCr or RGB, border shaved) of restored images.",
            citation=_CITATION,
            inputs_description=_INPUTS,
            features=datasets.Features({"predictions": datasets.Image(), "references": datasets.Image()}),
        )

    def _encoded(self, predictions: Any, references: Any) -> tuple[list[dict], list[dict]]:
        """Check a batch and encode it; messages name the image by its index in the call (and overall)."""
        for name, value in (("predictions", predictions), ("references", references)):
            if not _is_batch(value):
                raise ValueError(
                    f"{name} must be a list of images, got {type(value).__name__} "
                    "(use add(prediction=..., reference=...) for one image)"
                )
        if len(predictions) != len(references):
            raise ValueError(f"got {len(predictions)} predictions but {len(references)} references: one each per image")
        offset = len(self)  # images already added
        encoded_predictions, encoded_references = [], []
        for index, (prediction, reference) in enumerate(zip(predictions, references, strict=True)):
            where = f" {index}" + (f" of this batch ({offset + index} overall)" if offset else "")
            pred, ref = _check_pair(prediction, reference, where)
            encoded_predictions.append(_bmp(pred))
            encoded_references.append(_bmp(ref))
        return encoded_predictions, encoded_references

    def add_batch(self, *, predictions=None, references=None, **kwargs) -> None:
        """Add a batch of images (a list of predictions and the list of their references).\n"""
        if kwargs:
            raise ValueError(f"unknown inputs {sorted(kwargs)}: add_batch takes predictions and references")
        predictions, references = self._encoded(predictions, references)
        if predictions:
            super().add_batch(predictions=predictions, references=references)

    def add(self, *, prediction=None, reference=None, **kwargs) -> None:
        """Add one image: its prediction and its reference.\n"""
        if kwargs:
            raise ValueError(f"unknown inputs {sorted(kwargs)}: add takes prediction and reference")
        (prediction,), (reference,) = self._encoded([prediction], [reference])
        super().add(prediction=prediction, reference=reference)

    def compute(self, *, predictions=None, references=None, **options) -> dict[str, Any] | None:
        """Score the images given here and those added before; None on processes other than 0.\n"""
        unknown = sorted(set(options) - {"scale", "channel", "shave", "per_image"})
        if unknown:
            raise ValueError(f"unknown arguments {unknown}: compute takes scale, channel, shave and per_image")
        options = {"scale": self.scale, "channel": self.channel, "shave": self.shave, "per_image": False} | options
        _check_options(options["scale"], options["channel"], options["shave"])
        if (predictions is None) != (references is None):
            raise ValueError("give both predictions and references, or neither to score what add_batch added")
        if self.writer is None and (predictions is None or len(predictions) == 0):
            raise ValueError("PSNR/SSIM of no images is undefined: got no predictions")
        return super().compute(predictions=predictions, references=references, **options)

    def _compute(self, predictions, references, scale, channel, shave, per_image) -> dict[str, Any]:
        shave = _check_options(scale, channel, shave)
        psnrs, ssims = [], []
        for index, (prediction, reference) in enumerate(zip(predictions, references, strict=True)):
            pred, ref = _scored_planes(np.asarray(prediction), np.asarray(reference), channel, shave, f" {index}")
            psnrs.append(_psnr(pred, ref))
            ssims.append(_ssim(pred, ref))
        results: dict[str, Any] = {"psnr": float(np.mean(psnrs)), "ssim": float(np.mean(ssims))}
        if per_image:
            results |= {"psnr_per_image": psnrs, "ssim_per_image": ssims}
        return results
