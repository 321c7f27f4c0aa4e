"""The train-time image transforms of the DeiT and Swin ImageNet recipes, on PIL and torch alone (no torchvision).

Both papers train with timm's ``create_transform(is_training=True)`` at these settings (DeiT's ``main.py`` defaults,
Swin's ``config.py``), which :class:`ImageClassificationTrainTransform` reproduces, in this order:

1. :class:`RandomResizedCrop` (the Inception crop: area ``scale=(0.08, 1)``, aspect ``ratio=(3/4, 4/3)``, bicubic)
   and :class:`RandomHorizontalFlip` (p = 0.5);
2. :class:`RandAugment` ``"rand-m9-mstd0.5-inc1"`` (no colour jitter: timm turns it off under RandAugment, and
   this module has none);
3. to a (C, H, W) float tensor in [0, 1], normalised with the ImageNet mean and std;
4. :class:`RandomErasing` (probability 0.25, ``mode="pixel"``: per-pixel standard-normal values, one box).

Evaluation (:class:`ImageClassificationEvalTransform`): the short side to ``int(size / 0.875)`` (256 for 224) with
bicubic filtering, a centre crop of ``size``, the same normalisation.

**Classification only.** The geometric operations (crop, flip, rotate, shear, translate) move pixels and no box,
mask or keypoint: every transform here takes an image (or a batch of images and class labels) and refuses a
detection-style sample, a dict with boxes or a batch with an ``objects`` / ``annotations`` / ``boxes`` column, by
name (:func:`hf_xcv.data.detection_transform` is the detection pipeline).

**Randomness.** Every random draw comes from a ``torch.Generator`` given to the call (``generator=``), else from
torch's global RNG: the same generator state (or ``torch.manual_seed``) gives the same image, bit for bit. The
draws are timm's distributions, not timm's random streams (timm mixes Python's ``random`` and numpy's global RNG),
so the same seed does not give timm's image. :class:`ImageClassificationTrainTransform` can also seed every sample
from ``(seed, epoch, index)`` (``seed=``, ``index_column=``, :meth:`~ImageClassificationTrainTransform.set_epoch`),
which makes a sample's augmentation independent of batch composition, DataLoader workers and prefetching.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageOps

from ..utils.errors import MissingColumnError, UsageError

IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)
MAX_MAGNITUDE = 10.0  # timm's _LEVEL_DENOM: magnitude m maps to the fraction m / 10 of each op's range
DEFAULT_FILL = (124, 116, 104)  # the ImageNet mean as 8-bit RGB: timm's ``img_mean`` fill, round(255 * mean)
RAND_AUGMENT_RECIPE = "rand-m9-mstd0.5-inc1"  # DeiT's and Swin's ``--aa`` / ``AUG.AUTO_AUGMENT``
DETECTION_KEYS = ("objects", "annotations", "annotation", "boxes", "bbox", "bboxes", "segmentation", "masks")
_IMAGE_MODES = ("RGB", "L")
_INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}

# -- random draws: one place, so every transform takes them the same way from a generator or the global RNG ----------


def _rand(generator: torch.Generator | None) -> float:
    """U[0, 1) in float64."""
    return float(torch.rand((), generator=generator, dtype=torch.float64))


def _uniform(low: float, high: float, generator: torch.Generator | None) -> float:
    return low + (high - low) * _rand(generator)


def _randint(low: int, high: int, generator: torch.Generator | None) -> int:
    """An integer in [low, high], both ends included (Python's ``random.randint``)."""
    return int(torch.randint(low, high + 1, (), generator=generator))


def _gauss(mean: float, std: float, generator: torch.Generator | None) -> float:
    return mean + std * float(torch.randn((), generator=generator, dtype=torch.float64))


def _random_sign(generator: torch.Generator | None) -> int:
    """-1 or +1 with probability 1/2 (timm's ``_randomly_negate``)."""
    return -1 if _rand(generator) > 0.5 else 1


def sample_generator(seed: int, epoch: int, index: Any) -> torch.Generator:
    """A CPU generator seeded from ``(seed, epoch, index)`` by a hash: one independent stream per sample and epoch."""
    key = int(index) if isinstance(index, (int, np.integer)) else str(index)  # np.int64(3) and 3: one sample
    digest = hashlib.blake2b(repr((int(seed), int(epoch), key)).encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


def _check_generator(generator: Any) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise UsageError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def _resample(interpolation: str | int) -> Image.Resampling:
    if isinstance(interpolation, str):
        if interpolation not in _INTERPOLATIONS:
            raise UsageError(f"interpolation must be one of {sorted(_INTERPOLATIONS)}, got {interpolation!r}")
        return _INTERPOLATIONS[interpolation]
    return Image.Resampling(interpolation)


def _check_image(image: Any, what: str) -> None:
    """A PIL image in RGB or L; a detection sample (a dict, an (image, target) pair) is refused by name."""
    if isinstance(image, Mapping):
        raise UsageError(
            f"{what} transforms one PIL image (classification only), got a dict with keys {sorted(map(str, image))}: "
            "its geometric operations would not move boxes; use hf_xcv.data.detection_transform for detection"
        )
    if isinstance(image, (tuple, list)):
        raise UsageError(
            f"{what} transforms one PIL image (classification only), got a {type(image).__name__} of "
            f"{len(image)}: an (image, target) pair's boxes would not move with the image"
        )
    if not isinstance(image, Image.Image):
        raise UsageError(f"{what} transforms a PIL image, got {type(image).__name__}")
    if image.mode not in _IMAGE_MODES:
        raise UsageError(f"{what} takes RGB or L (grayscale) images, got mode {image.mode!r}: convert it first")


def _fill_for(image: Image.Image, fill: int | Sequence[int]) -> int | tuple[int, ...]:
    """PIL's fill colour for ``image``'s mode: an int for L (the first value), three ints for RGB."""
    values = (int(fill),) if isinstance(fill, (int, np.integer)) else tuple(int(v) for v in fill)
    if image.mode == "L":
        return values[0]
    return values * 3 if len(values) == 1 else values


def _affine(
    image: Image.Image, matrix: tuple[float, ...], fill: int | Sequence[int], interpolation: str | int
) -> Image.Image:
    """PIL's affine transform: output pixel (x, y) reads input (a x + b y + c, d x + e y + f)."""
    return image.transform(
        image.size, Image.Transform.AFFINE, matrix, resample=_resample(interpolation), fillcolor=_fill_for(image, fill)
    )


# -- RandAugment's operations ---------------------------------------------------------------------------------------
# Each takes a PIL image (RGB or L) and the magnitude m in [0, 10] (more with ``magnitude_max``), maps m to its
# argument exactly as timm's auto_augment.py does (``LEVEL_TO_ARG``), and returns a new image. ``sign`` (+1 or -1)
# is the random sign timm draws for the symmetric operations. AutoContrast, Equalize and Invert take no magnitude.


def auto_contrast(image: Image.Image) -> Image.Image:
    """``ImageOps.autocontrast``: stretch each channel to the full [0, 255] range."""
    return ImageOps.autocontrast(image)


def equalize(image: Image.Image) -> Image.Image:
    """``ImageOps.equalize``: flatten each channel's histogram."""
    return ImageOps.equalize(image)


def invert(image: Image.Image) -> Image.Image:
    """``ImageOps.invert``: 255 - x."""
    return ImageOps.invert(image)


def rotate(
    image: Image.Image,
    magnitude: float,
    sign: int = 1,
    fill: int | Sequence[int] = DEFAULT_FILL,
    interpolation: str | int = "bicubic",
) -> Image.Image:
    """Rotate by ``sign * m / 10 * 30`` degrees (counter-clockwise) about the centre; corners filled with ``fill``."""
    degrees = sign * magnitude / MAX_MAGNITUDE * 30.0
    return image.rotate(degrees, resample=_resample(interpolation), fillcolor=_fill_for(image, fill))


def _posterize_bits(image: Image.Image, bits: int) -> Image.Image:
    """``ImageOps.posterize``'s table, which also keeps 0 bits (black; PIL refuses 0 bits since 10.x)."""
    mask = ~(2 ** (8 - min(max(bits, 0), 8)) - 1) & 0xFF
    return image.point([i & mask for i in range(256)] * len(image.getbands()))


def posterize(image: Image.Image, magnitude: float) -> Image.Image:
    """Keep ``int(m / 10 * 4)`` bits of each value (0 bits, a black image, at m = 0: stronger as m decreases)."""
    return _posterize_bits(image, int(magnitude / MAX_MAGNITUDE * 4))


def posterize_increasing(image: Image.Image, magnitude: float) -> Image.Image:
    """Keep ``4 - int(m / 10 * 4)`` bits: 4 bits at m = 0 (not the identity, as in timm), 0 bits at m = 10."""
    return _posterize_bits(image, 4 - int(magnitude / MAX_MAGNITUDE * 4))


def _solarize_threshold(magnitude: float) -> int:
    return min(256, int(magnitude / MAX_MAGNITUDE * 256))


def solarize(image: Image.Image, magnitude: float) -> Image.Image:
    """Invert the values >= ``min(256, int(m / 10 * 256))``: every value (Invert) at m = 0, none at m = 10."""
    return ImageOps.solarize(image, _solarize_threshold(magnitude))


def solarize_increasing(image: Image.Image, magnitude: float) -> Image.Image:
    """Invert the values >= ``256 - min(256, int(m / 10 * 256))``: none at m = 0, every value at m = 10."""
    return ImageOps.solarize(image, 256 - _solarize_threshold(magnitude))


def solarize_add(image: Image.Image, magnitude: float, threshold: int = 128) -> Image.Image:
    """Add ``min(128, int(m / 10 * 110))`` to the values below ``threshold`` (capped at 255); others unchanged."""
    add = min(128, int(magnitude / MAX_MAGNITUDE * 110))
    lut = [min(255, i + add) if i < threshold else i for i in range(256)]
    return image.point(lut * len(image.getbands()))


def _enhance_factor(magnitude: float) -> float:
    """timm's ``_enhance_level_to_arg``: 0.1 at m = 0 to 1.9 at m = 10."""
    return magnitude / MAX_MAGNITUDE * 1.8 + 0.1


def _enhance_increasing_factor(magnitude: float, sign: int) -> float:
    """timm's ``_enhance_increasing_level_to_arg``: ``max(0.1, 1 + sign * m / 10 * 0.9)``, 1 (no change) at m = 0."""
    return max(0.1, 1.0 + sign * magnitude / MAX_MAGNITUDE * 0.9)


def color(image: Image.Image, magnitude: float) -> Image.Image:
    """``ImageEnhance.Color`` (saturation) by ``m / 10 * 1.8 + 0.1``: 0.1 (nearly gray) at m = 0."""
    return ImageEnhance.Color(image).enhance(_enhance_factor(magnitude))


def color_increasing(image: Image.Image, magnitude: float, sign: int = 1) -> Image.Image:
    """``ImageEnhance.Color`` by ``max(0.1, 1 + sign * m / 10 * 0.9)``: unchanged at m = 0."""
    return ImageEnhance.Color(image).enhance(_enhance_increasing_factor(magnitude, sign))


def contrast(image: Image.Image, magnitude: float) -> Image.Image:
    """``ImageEnhance.Contrast`` by ``m / 10 * 1.8 + 0.1``."""
    return ImageEnhance.Contrast(image).enhance(_enhance_factor(magnitude))


def contrast_increasing(image: Image.Image, magnitude: float, sign: int = 1) -> Image.Image:
    """``ImageEnhance.Contrast`` by ``max(0.1, 1 + sign * m / 10 * 0.9)``: unchanged at m = 0."""
    return ImageEnhance.Contrast(image).enhance(_enhance_increasing_factor(magnitude, sign))


def brightness(image: Image.Image, magnitude: float) -> Image.Image:
    """``ImageEnhance.Brightness`` by ``m / 10 * 1.8 + 0.1``."""
    return ImageEnhance.Brightness(image).enhance(_enhance_factor(magnitude))


def brightness_increasing(image: Image.Image, magnitude: float, sign: int = 1) -> Image.Image:
    """``ImageEnhance.Brightness`` by ``max(0.1, 1 + sign * m / 10 * 0.9)``: unchanged at m = 0."""
    return ImageEnhance.Brightness(image).enhance(_enhance_increasing_factor(magnitude, sign))


def sharpness(image: Image.Image, magnitude: float) -> Image.Image:
    """``ImageEnhance.Sharpness`` by ``m / 10 * 1.8 + 0.1``."""
    return ImageEnhance.Sharpness(image).enhance(_enhance_factor(magnitude))


def sharpness_increasing(image: Image.Image, magnitude: float, sign: int = 1) -> Image.Image:
    """``ImageEnhance.Sharpness`` by ``max(0.1, 1 + sign * m / 10 * 0.9)``: unchanged at m = 0."""
    return ImageEnhance.Sharpness(image).enhance(_enhance_increasing_factor(magnitude, sign))


def shear_x(
    image: Image.Image,
    magnitude: float,
    sign: int = 1,
    fill: int | Sequence[int] = DEFAULT_FILL,
    interpolation: str | int = "bicubic",
) -> Image.Image:
    """Shear along x by ``sign * m / 10 * 0.3``: output (x, y) reads input (x + shear * y, y)."""
    shear = sign * magnitude / MAX_MAGNITUDE * 0.3
    return _affine(image, (1, shear, 0, 0, 1, 0), fill, interpolation)


def shear_y(
    image: Image.Image,
    magnitude: float,
    sign: int = 1,
    fill: int | Sequence[int] = DEFAULT_FILL,
    interpolation: str | int = "bicubic",
) -> Image.Image:
    """Shear along y by ``sign * m / 10 * 0.3``: output (x, y) reads input (x, y + shear * x)."""
    shear = sign * magnitude / MAX_MAGNITUDE * 0.3
    return _affine(image, (1, 0, 0, shear, 1, 0), fill, interpolation)


def translate_x_rel(
    image: Image.Image,
    magnitude: float,
    sign: int = 1,
    fill: int | Sequence[int] = DEFAULT_FILL,
    interpolation: str | int = "bicubic",
    translate_pct: float = 0.45,
) -> Image.Image:
    """Shift the content left by ``sign * m / 10 * translate_pct`` of the width (right for a negative sign)."""
    pixels = sign * magnitude / MAX_MAGNITUDE * translate_pct * image.size[0]
    return _affine(image, (1, 0, pixels, 0, 1, 0), fill, interpolation)


def translate_y_rel(
    image: Image.Image,
    magnitude: float,
    sign: int = 1,
    fill: int | Sequence[int] = DEFAULT_FILL,
    interpolation: str | int = "bicubic",
    translate_pct: float = 0.45,
) -> Image.Image:
    """Shift the content up by ``sign * m / 10 * translate_pct`` of the height (down for a negative sign)."""
    pixels = sign * magnitude / MAX_MAGNITUDE * translate_pct * image.size[1]
    return _affine(image, (1, 0, 0, 0, 1, pixels), fill, interpolation)


@dataclass(frozen=True)
class AugmentOp:
    """One RandAugment operation, under timm's name.

    Attributes:
        name: timm's name (``"Rotate"``, ``"ColorIncreasing"``, ...).
        function: the operation (one of this module's functions).
        uses_magnitude: it takes ``magnitude`` (AutoContrast, Equalize and Invert do not).
        signed: it takes a random ``sign`` (timm's ``_randomly_negate``).
        geometric: it moves pixels and takes ``fill`` and ``interpolation``.
        translates: it takes ``translate_pct``.
    """

    name: str
    function: Callable[..., Image.Image]
    uses_magnitude: bool = True
    signed: bool = False
    geometric: bool = False
    translates: bool = False

    def __call__(
        self,
        image: Image.Image,
        magnitude: float,
        sign: int = 1,
        fill: int | Sequence[int] = DEFAULT_FILL,
        interpolation: str | int = "bicubic",
        translate_pct: float = 0.45,
    ) -> Image.Image:
        """The operation at ``magnitude`` with ``sign``; arguments it does not take are not passed."""
        if not self.uses_magnitude:
            return self.function(image)
        kwargs: dict[str, Any] = {"sign": sign} if self.signed else {}
        if self.geometric:
            kwargs.update(fill=fill, interpolation=interpolation)
        if self.translates:
            kwargs["translate_pct"] = translate_pct
        return self.function(image, magnitude, **kwargs)


OPS: dict[str, AugmentOp] = {
    op.name: op
    for op in (
        AugmentOp("AutoContrast", auto_contrast, uses_magnitude=False),
        AugmentOp("Equalize", equalize, uses_magnitude=False),
        AugmentOp("Invert", invert, uses_magnitude=False),
        AugmentOp("Rotate", rotate, signed=True, geometric=True),
        AugmentOp("Posterize", posterize),
        AugmentOp("PosterizeIncreasing", posterize_increasing),
        AugmentOp("Solarize", solarize),
        AugmentOp("SolarizeIncreasing", solarize_increasing),
        AugmentOp("SolarizeAdd", solarize_add),
        AugmentOp("Color", color),
        AugmentOp("ColorIncreasing", color_increasing, signed=True),
        AugmentOp("Contrast", contrast),
        AugmentOp("ContrastIncreasing", contrast_increasing, signed=True),
        AugmentOp("Brightness", brightness),
        AugmentOp("BrightnessIncreasing", brightness_increasing, signed=True),
        AugmentOp("Sharpness", sharpness),
        AugmentOp("SharpnessIncreasing", sharpness_increasing, signed=True),
        AugmentOp("ShearX", shear_x, signed=True, geometric=True),
        AugmentOp("ShearY", shear_y, signed=True, geometric=True),
        AugmentOp("TranslateXRel", translate_x_rel, signed=True, geometric=True, translates=True),
        AugmentOp("TranslateYRel", translate_y_rel, signed=True, geometric=True, translates=True),
    )
}
"""Every operation by timm's name."""

RAND_OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color", "Contrast",
    "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel",
)  # fmt: skip
"""timm's ``_RAND_TRANSFORMS``: RandAugment's list (Cutout is :class:`RandomErasing`, applied separately)."""

RAND_INCREASING_OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing", "SolarizeAdd",
    "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY",
    "TranslateXRel", "TranslateYRel",
)  # fmt: skip
"""timm's ``_RAND_INCREASING_TRANSFORMS`` (``inc1``): every operation stronger as the magnitude grows."""


class RandAugment:
    """RandAugment (Cubuk et al. 2020) as timm defines it; the defaults are ``"rand-m9-mstd0.5-inc1"``.

    Per image, ``num_ops`` operations are chosen uniformly from ``ops``, with replacement, and applied in turn; each
    is applied with probability ``prob``, at a magnitude drawn afresh: ``N(magnitude, magnitude_std)`` (uniform in
    [0, magnitude] when ``magnitude_std`` is ``inf``, exactly ``magnitude`` when 0), clipped to
    [0, ``magnitude_max``]; the symmetric operations (Rotate, Shear, Translate, the ``*Increasing`` enhancements)
    then take a random sign. Magnitude m -> argument (see each function):

    * Rotate: ±m/10·30 degrees (±27 at m = 9);
    * ShearX, ShearY: ±m/10·0.3 (±0.27);
    * TranslateXRel, TranslateYRel: ±m/10·``translate_pct`` of the side (±0.405);
    * PosterizeIncreasing: keep 4 - int(m/10·4) bits (1);
    * SolarizeIncreasing: invert the values >= 256 - int(m/10·256) (26);
    * SolarizeAdd: add int(m/10·110) to the values below 128 (99);
    * Color-, Contrast-, Brightness-, SharpnessIncreasing: enhance by max(0.1, 1 ± m/10·0.9) (0.19 or 1.81);
    * AutoContrast, Equalize, Invert: PIL's operation, no magnitude.

    Geometric operations fill the uncovered area with ``fill`` (timm: the dataset mean in 8 bits) and resample with
    ``interpolation`` (DeiT's and Swin's ``bicubic``; timm's default picks bilinear or bicubic at random).

    Args:
        num_ops: operations per image (timm's ``n``).
        magnitude: m in [0, ``magnitude_max``] (timm's ``m``).
        magnitude_std: the std of the magnitude noise (timm's ``mstd``); ``float("inf")``: uniform in [0, m].
        magnitude_max: the clip of a drawn magnitude (timm's ``mmax``, 10 by default).
        prob: the probability that a chosen operation is applied (timm's ``p``).
        increasing: use :data:`RAND_INCREASING_OPS` (timm's ``inc1``) rather than :data:`RAND_OPS`.
        ops: the operation names (keys of :data:`OPS`) to choose from, instead of either list.
        fill: 8-bit fill colour of the geometric operations, one value or three.
        interpolation: ``"bicubic"``, ``"bilinear"``, ``"nearest"`` or a PIL resampling filter.
        translate_pct: the largest translation, as a share of the image's side (timm's default 0.45).

    Raises:
        UsageError: a setting out of range or an unknown operation name.
    """

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: float = 9.0,
        magnitude_std: float = 0.5,
        magnitude_max: float = MAX_MAGNITUDE,
        prob: float = 0.5,
        increasing: bool = True,
        ops: Sequence[str] | None = None,
        fill: int | Sequence[int] = DEFAULT_FILL,
        interpolation: str | int = "bicubic",
        translate_pct: float = 0.45,
    ) -> None:
        if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 0:
            raise UsageError(f"num_ops must be an integer >= 0, got {num_ops!r}")
        if not 0.0 <= magnitude <= magnitude_max:
            raise UsageError(f"magnitude must lie in [0, magnitude_max={magnitude_max}], got {magnitude!r}")
        if not magnitude_std >= 0.0:
            raise UsageError(f"magnitude_std must be >= 0 (inf: uniform in [0, magnitude]), got {magnitude_std!r}")
        if not 0.0 <= prob <= 1.0:
            raise UsageError(f"prob is a probability and must lie in [0, 1], got {prob!r}")
        if not 0.0 <= translate_pct <= 1.0:
            raise UsageError(f"translate_pct must lie in [0, 1], got {translate_pct!r}")
        names = tuple(ops) if ops is not None else RAND_INCREASING_OPS if increasing else RAND_OPS
        unknown = [name for name in names if name not in OPS]
        if unknown or not names:
            raise UsageError(f"ops must be names among {sorted(OPS)}, got {list(names)!r}")
        self.num_ops = num_ops
        self.magnitude = float(magnitude)
        self.magnitude_std = float(magnitude_std)
        self.magnitude_max = float(magnitude_max)
        self.prob = float(prob)
        self.ops = [OPS[name] for name in names]
        self.fill = fill
        self.interpolation = _resample(interpolation)
        self.translate_pct = float(translate_pct)

    @classmethod
    def from_config(cls, config: str = RAND_AUGMENT_RECIPE, **kwargs: Any) -> RandAugment:
        """RandAugment from timm's config string, e.g. ``"rand-m9-mstd0.5-inc1"``: dash-separated ``m`` (magnitude),
        ``n`` (num_ops), ``p`` (prob), ``mstd`` (magnitude_std; > 100 means inf), ``mmax`` (magnitude_max), ``inc``
        (increasing); timm's defaults for the rest (m10, n2, p0.5, mstd0, inc0). ``kwargs``: the other arguments
        (``fill``, ``interpolation``, ``translate_pct``)."""
        sections = config.split("-")
        if sections[0] != "rand":
            raise UsageError(f"a RandAugment config starts with 'rand-', got {config!r}")
        settings: dict[str, Any] = {"magnitude": MAX_MAGNITUDE, "increasing": False}
        keys = {"m": "magnitude", "n": "num_ops", "p": "prob", "mstd": "magnitude_std", "mmax": "magnitude_max"}
        for section in sections[1:]:
            match = re.fullmatch(r"([a-z]+)(\d+(?:\.\d*)?)", section)
            if match is None or match.group(1) not in {*keys, "inc"}:
                raise UsageError(
                    f"unknown section {section!r} in RandAugment config {config!r}: expected m<magnitude>, n<ops>, "
                    "p<prob>, mstd<std>, mmax<max>, inc<0|1>"
                )
            key, value = match.group(1), float(match.group(2))
            if key == "inc":
                settings["increasing"] = bool(value)
            elif key == "n":
                settings["num_ops"] = int(value)
            else:
                settings[keys[key]] = float("inf") if key == "mstd" and value > 100 else value
        return cls(**settings, **kwargs)

    def sample_magnitude(self, generator: torch.Generator | None = None) -> float:
        """One operation's magnitude: ``magnitude`` with its noise, clipped to [0, ``magnitude_max``]."""
        magnitude = self.magnitude
        if self.magnitude_std == float("inf"):
            magnitude = _uniform(0.0, magnitude, generator)
        elif self.magnitude_std > 0:
            magnitude = _gauss(magnitude, self.magnitude_std, generator)
        return min(max(magnitude, 0.0), self.magnitude_max)

    def __call__(self, image: Image.Image, generator: torch.Generator | None = None) -> Image.Image:
        """A new image: ``num_ops`` operations drawn from ``generator`` (default: torch's global RNG).

        The draws, in order: the ``num_ops`` choices, then per chosen operation: whether it applies, its magnitude
        (when it takes one and ``magnitude_std`` > 0) and its sign (when it is signed); nothing more is drawn for a
        skipped operation.
        """
        _check_image(image, "RandAugment")
        _check_generator(generator)
        chosen = torch.randint(len(self.ops), (self.num_ops,), generator=generator).tolist()
        out = image
        for index in chosen:
            op = self.ops[index]
            if self.prob < 1.0 and _rand(generator) > self.prob:  # timm: applied when random() <= prob
                continue
            magnitude = self.sample_magnitude(generator) if op.uses_magnitude else 0.0
            sign = _random_sign(generator) if op.signed else 1
            out = op(out, magnitude, sign, self.fill, self.interpolation, self.translate_pct)
        return out.copy() if out is image else out

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_ops={self.num_ops}, magnitude={self.magnitude}, "
            f"magnitude_std={self.magnitude_std}, prob={self.prob}, ops={[op.name for op in self.ops]})"
        )


# -- the crop, the flip -----------------------------------------------------------------------------------------------


def _pair(size: int | Sequence[int], what: str) -> tuple[int, int]:
    """(height, width) from an int or a pair of positive ints."""
    values = (size, size) if isinstance(size, (int, np.integer)) and not isinstance(size, bool) else tuple(size)
    if len(values) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        raise UsageError(f"{what} must be an int or a (height, width) pair of ints, got {size!r}")
    if min(values) < 1:
        raise UsageError(f"{what} must be positive, got {size!r}")
    return int(values[0]), int(values[1])


def _range(values: Sequence[float], what: str) -> tuple[float, float]:
    low, high = (float(v) for v in values)
    if not 0.0 < low <= high:
        raise UsageError(f"{what} must be (min, max) with 0 < min <= max, got {tuple(values)!r}")
    return low, high


class RandomResizedCrop:
    """The Inception crop (torchvision's ``RandomResizedCrop``, timm's ``RandomResizedCropAndInterpolation``).

    Up to 10 attempts: an area of ``U(scale) * image area`` and an aspect (width / height) of
    ``exp(U(log ratio))``, giving ``w = round(sqrt(area * aspect))``, ``h = round(sqrt(area / aspect))``; the first
    that fits the image is placed uniformly at random. Else the centre crop of the largest region whose aspect is
    clipped to ``ratio`` (the whole image when its aspect lies in ``ratio``). The crop is resized to ``size``.

    Args:
        size: the output (height, width), or one int for a square.
        scale: the range of the crop's area, as a share of the image's.
        ratio: the range of the crop's aspect ratio (width / height).
        interpolation: ``"bicubic"`` (DeiT's and Swin's), ``"bilinear"`` (torchvision's default), ...
    """

    def __init__(
        self,
        size: int | Sequence[int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        interpolation: str | int = "bicubic",
    ) -> None:
        self.size = _pair(size, "size")
        self.scale = _range(scale, "scale")
        self.ratio = _range(ratio, "ratio")
        self.interpolation = _resample(interpolation)

    def get_params(
        self, width: int, height: int, generator: torch.Generator | None = None
    ) -> tuple[int, int, int, int]:
        """The crop ``(top, left, height, width)`` of an image of ``width`` x ``height`` pixels."""
        area = width * height
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = area * _uniform(*self.scale, generator)
            aspect = math.exp(_uniform(*log_ratio, generator))
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return _randint(0, height - h, generator), _randint(0, width - w, generator), h, w
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, int(round(width / self.ratio[0]))
        elif in_ratio > self.ratio[1]:
            w, h = int(round(height * self.ratio[1])), height
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, image: Image.Image, generator: torch.Generator | None = None) -> Image.Image:
        """A new image of ``size``: a random crop of ``image`` resized (torchvision's crop, then PIL's resize)."""
        _check_image(image, "RandomResizedCrop")
        _check_generator(generator)
        top, left, h, w = self.get_params(*image.size, generator)
        crop = image.crop((left, top, left + w, top + h))
        return crop.resize((self.size[1], self.size[0]), self.interpolation)


class RandomHorizontalFlip:
    """Mirror left-right with probability ``p`` (one draw per call, as torchvision's ``torch.rand(1) < p``)."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise UsageError(f"p is a probability and must lie in [0, 1], got {p!r}")
        self.p = float(p)

    def __call__(self, image: Image.Image, generator: torch.Generator | None = None) -> Image.Image:
        _check_image(image, "RandomHorizontalFlip")
        _check_generator(generator)
        if _rand(generator) < self.p:
            return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return image.copy()


# -- random erasing --------------------------------------------------------------------------------------------------

ERASE_MODES = ("const", "rand", "pixel")


class RandomErasing:
    """Random erasing (Zhong et al. 2020) on normalised image tensors, as timm's ``RandomErasing`` (the recipe:
    ``probability=0.25, mode="pixel", max_count=1``, applied after normalisation).

    For each image, with probability ``probability``: ``count`` boxes (``min_count``, or uniform in
    [min_count, max_count]), each of up to 10 attempts at an area of ``U(min_area, max_area) * image area / count``
    and an aspect (height / width) of ``exp(U(log min_aspect, log max_aspect))``; the first that fits strictly inside
    the image is placed uniformly and filled: ``"pixel"`` standard-normal values per pixel and channel, ``"rand"``
    one standard-normal value per channel, ``"const"`` zeros (the mean, once normalised).

    Args:
        probability: the probability that an image is erased at all.
        mode: ``"pixel"``, ``"rand"`` or ``"const"``.
        min_area, max_area: the range of a box's area, as a share of the image's.
        min_aspect, max_aspect: the range of a box's aspect; ``max_aspect`` defaults to ``1 / min_aspect``.
        min_count, max_count: the range of the number of boxes; ``max_count`` defaults to ``min_count``.
    """

    def __init__(
        self,
        probability: float = 0.25,
        mode: str = "pixel",
        min_area: float = 0.02,
        max_area: float = 1 / 3,
        min_aspect: float = 0.3,
        max_aspect: float | None = None,
        min_count: int = 1,
        max_count: int | None = None,
    ) -> None:
        if not 0.0 <= probability <= 1.0:
            raise UsageError(f"probability must lie in [0, 1], got {probability!r}")
        if mode not in ERASE_MODES:
            raise UsageError(f"mode must be one of {ERASE_MODES}, got {mode!r}")
        if not 0.0 < min_area <= max_area <= 1.0:
            raise UsageError(f"need 0 < min_area <= max_area <= 1, got min_area={min_area!r}, max_area={max_area!r}")
        if not min_aspect > 0:
            raise UsageError(f"min_aspect must be > 0, got {min_aspect!r}")
        max_aspect = 1.0 / min_aspect if max_aspect is None else max_aspect
        self.aspect = _range((min_aspect, max_aspect), "(min_aspect, max_aspect)")
        max_count = min_count if max_count is None else max_count
        if not (isinstance(min_count, int) and isinstance(max_count, int) and 1 <= min_count <= max_count):
            raise UsageError(f"need integers 1 <= min_count <= max_count, got {min_count!r}, {max_count!r}")
        self.probability = float(probability)
        self.mode = mode
        self.min_area = float(min_area)
        self.max_area = float(max_area)
        self.min_count = min_count
        self.max_count = max_count

    def regions(
        self, height: int, width: int, generator: torch.Generator | None = None
    ) -> list[tuple[int, int, int, int]]:
        """The boxes ``(top, left, height, width)`` erased in one image of ``height`` x ``width`` (none when the
        image is left alone: the first draw decides that)."""
        if self.probability < 1.0 and _rand(generator) > self.probability:
            return []
        count = self.min_count
        if self.max_count > self.min_count:
            count = _randint(self.min_count, self.max_count, generator)
        log_aspect = (math.log(self.aspect[0]), math.log(self.aspect[1]))
        boxes = []
        for _ in range(count):
            for _ in range(10):
                target_area = _uniform(self.min_area, self.max_area, generator) * height * width / count
                aspect = math.exp(_uniform(*log_aspect, generator))
                h = int(round(math.sqrt(target_area * aspect)))
                w = int(round(math.sqrt(target_area / aspect)))
                if w < width and h < height:
                    boxes.append((_randint(0, height - h, generator), _randint(0, width - w, generator), h, w))
                    break
        return boxes

    def __call__(self, pixel_values: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """A copy of ``pixel_values`` (C, H, W) or (B, C, H, W), float, with each image erased independently.

        The values are drawn on the CPU (from ``generator`` when given), then moved to the tensor's device.
        """
        if isinstance(pixel_values, Mapping):
            raise UsageError(
                f"RandomErasing takes a tensor of images (classification only), got a dict with keys "
                f"{sorted(map(str, pixel_values))}"
            )
        if not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim not in (3, 4):
            what = tuple(pixel_values.shape) if isinstance(pixel_values, torch.Tensor) else type(pixel_values).__name__
            raise UsageError(f"RandomErasing takes a (C, H, W) or (B, C, H, W) tensor, got {what}")
        if not pixel_values.is_floating_point():
            raise UsageError(f"RandomErasing erases normalised float images, got dtype {pixel_values.dtype}")
        _check_generator(generator)
        out = pixel_values.clone()
        for image in out if out.ndim == 4 else out[None]:  # (C, H, W) views of out
            channels, height, width = image.shape
            for top, left, h, w in self.regions(height, width, generator):
                image[:, top : top + h, left : left + w] = self._values(channels, h, w, generator).to(image)
        return out

    def _values(self, channels: int, h: int, w: int, generator: torch.Generator | None) -> torch.Tensor:
        if self.mode == "pixel":
            return torch.randn((channels, h, w), generator=generator)
        if self.mode == "rand":
            return torch.randn((channels, 1, 1), generator=generator)
        return torch.zeros((channels, 1, 1))


# -- whole pipelines: PIL image -> normalised tensor; a datasets batch -> pixel_values -----------------------------


def to_normalized_tensor(image: Image.Image, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """(C, H, W) float32: 8-bit values / 255, minus ``mean``, over ``std`` (torchvision's ToTensor + Normalize)."""
    array = np.array(image, dtype=np.uint8)  # a writable copy
    array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)  # (C, H, W)
    pixels = torch.from_numpy(array).to(torch.float32).div_(255.0)
    mean_t = torch.as_tensor(mean, dtype=torch.float32).reshape(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32).reshape(-1, 1, 1)
    return pixels.sub_(mean_t).div_(std_t)


def _as_image(image: Any, mode: str) -> Image.Image:
    """A PIL image in ``mode``: alpha composited on white (as hf_xcv's processors do), uint8 arrays (HW, HWC) read
    as PIL would; anything else is refused by name."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3):
            raise UsageError(f"an image array must be uint8 (H, W) or (H, W, C), got {image.dtype} {image.shape}")
        image = Image.fromarray(image)
    if isinstance(image, (Mapping, tuple, list)):
        _check_image(image, "the classification transform")
    if not isinstance(image, Image.Image):
        raise UsageError(f"the train transform takes PIL images or uint8 arrays, got {type(image).__name__}")
    if image.mode == mode:
        return image
    if "A" in image.getbands() or "transparency" in image.info:
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return image.convert(mode)


def _check_columns(batch: Mapping[str, Any], image_column: str) -> None:
    if not isinstance(batch, Mapping):
        raise UsageError(f"the transform takes a batch dict (Dataset.set_transform), got {type(batch).__name__}")
    found = [key for key in DETECTION_KEYS if key in batch]
    if found:
        raise UsageError(
            f"classification only: the batch has the column(s) {found}, whose boxes or masks the crop, flip and "
            "RandAugment would not move; drop them, or use hf_xcv.data.detection_transform for detection"
        )
    if image_column not in batch:
        raise MissingColumnError(f"the dataset has no column {image_column!r}; columns: {sorted(batch)}")


def _channels(mean: Sequence[float], std: Sequence[float], num_channels: int | None) -> tuple[int, str]:
    if len(mean) != len(std) or len(mean) not in (1, 3):
        raise UsageError(f"mean and std need 1 or 3 values each, got {len(mean)} and {len(std)}")
    channels = len(mean) if num_channels is None else num_channels
    if channels not in (1, 3) or len(mean) not in (1, channels):
        raise UsageError(f"num_channels must be 1 or 3 and match the {len(mean)} mean values, got {num_channels!r}")
    return channels, "L" if channels == 1 else "RGB"


def settings_from_processor(processor: Any) -> dict[str, Any]:
    """``size``, ``mean`` and ``std`` of an image processor (hf_xcv's or transformers'): the size its pixels come out
    at (``crop_size`` when it centre-crops, else ``size``: height/width or shortest_edge), its normalisation (mean
    0 and std 1 when ``do_normalize`` is off)."""

    def side(size: Any) -> tuple[int, int] | None:
        get = size.get if isinstance(size, Mapping) else lambda key: getattr(size, key, None)
        if get("height") and get("width"):
            return int(get("height")), int(get("width"))
        if get("shortest_edge"):
            return int(get("shortest_edge")), int(get("shortest_edge"))
        return None

    sizes = [getattr(processor, "crop_size", None)] if getattr(processor, "do_center_crop", False) else []
    size = next((s for s in map(side, [*sizes, getattr(processor, "size", None)]) if s), None)
    if size is None:
        raise UsageError(f"cannot read an output size from {type(processor).__name__}: no height/width in its size")
    mean, std = getattr(processor, "image_mean", None), getattr(processor, "image_std", None)
    if not getattr(processor, "do_normalize", True) or mean is None or std is None:
        mean, std = (0.0,), (1.0,)
    mean = (float(mean),) if isinstance(mean, (int, float)) else tuple(float(v) for v in mean)
    std = (float(std),) if isinstance(std, (int, float)) else tuple(float(v) for v in std)
    return {"size": size, "mean": mean, "std": std}


class _BatchTransform:
    """What both pipelines share: a ``datasets`` batch -> ``pixel_values`` ((C, H, W) float32 tensors) and
    ``labels`` (the label column, when the batch has it)."""

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        image_column: str,
        label_column: str,
        num_channels: int | None,
    ) -> None:
        self.num_channels, self.mode = _channels(tuple(mean), tuple(std), num_channels)
        self.mean = tuple(float(v) for v in mean) * (self.num_channels // len(mean))
        self.std = tuple(float(v) for v in std) * (self.num_channels // len(std))
        self.image_column = image_column
        self.label_column = label_column

    def transform_image(self, image: Any, generator: torch.Generator | None = None) -> torch.Tensor:
        raise NotImplementedError

    def _generators(self, batch: Mapping[str, list], size: int) -> list[torch.Generator | None]:
        return [None] * size

    def __call__(self, batch: Mapping[str, list]) -> dict[str, list]:
        _check_columns(batch, self.image_column)
        images = batch[self.image_column]
        generators = self._generators(batch, len(images))
        out: dict[str, list] = {
            "pixel_values": [self.transform_image(image, g) for image, g in zip(images, generators)]
        }
        if self.label_column in batch:
            out["labels"] = batch[self.label_column]
        return out


class ImageClassificationTrainTransform(_BatchTransform):
    """The DeiT / Swin training transform (see the module) for ``Dataset.set_transform`` / ``with_transform``.

    ``transform(batch)`` maps a batch dict with an image column (PIL images or uint8 arrays) to ``pixel_values``, a
    list of (C, ``size``) float32 tensors, keeping the label column as ``labels``: what
    :class:`hf_xcv.data.ImageClassificationCollator` stacks. :meth:`transform_image` does one image. Images are
    converted to RGB (L for one channel) first, alpha composited on white. Classification only: a batch with box or
    annotation columns (:data:`DETECTION_KEYS`) is refused by name.

    Randomness, one of three (see the module):

    * no ``seed``: torch's global RNG, one stream through the whole batch;
    * ``seed`` alone: one ``torch.Generator`` seeded once, one stream through every call (a DataLoader worker gets a
      copy of it: use ``index_column`` with workers);
    * ``seed`` and ``index_column``: each sample's draws come from :func:`sample_generator` ``(seed, epoch, index)``
      with the sample's value in that column (``dataset.add_column("index", range(len(dataset)))``) and the epoch
      last given to :meth:`set_epoch`: a sample's augmentation depends on nothing else (not the batch it is in, the
      worker, prefetching, or a resume), and changes every epoch if ``set_epoch`` is called every epoch.

    Args:
        size: the output (height, width) or one int.
        mean, std: the normalisation (ImageNet's by default; 1 or 3 values).
        scale, ratio, interpolation: :class:`RandomResizedCrop`'s (``interpolation`` also RandAugment's).
        hflip: the probability of a horizontal flip.
        auto_augment: a timm RandAugment config (:meth:`RandAugment.from_config`), None for none.
        re_prob, re_mode, re_count: :class:`RandomErasing`'s probability, mode and max_count (0: no erasing).
        image_column, label_column: the batch's columns.
        num_channels: 1 or 3 (the model's ``config.num_channels``); default the number of ``mean`` values.
        seed, index_column: see above.
    """

    def __init__(
        self,
        size: int | Sequence[int] = 224,
        *,
        mean: Sequence[float] = IMAGENET_DEFAULT_MEAN,
        std: Sequence[float] = IMAGENET_DEFAULT_STD,
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        interpolation: str | int = "bicubic",
        hflip: float = 0.5,
        auto_augment: str | None = RAND_AUGMENT_RECIPE,
        re_prob: float = 0.25,
        re_mode: str = "pixel",
        re_count: int = 1,
        image_column: str = "image",
        label_column: str = "label",
        num_channels: int | None = None,
        seed: int | None = None,
        index_column: str | None = None,
    ) -> None:
        super().__init__(mean, std, image_column, label_column, num_channels)
        if index_column is not None and seed is None:
            raise UsageError("index_column seeds each sample from (seed, epoch, index): pass a seed too")
        self.crop = RandomResizedCrop(size, scale, ratio, interpolation)
        self.flip = RandomHorizontalFlip(hflip)
        fill = tuple(min(255, round(255 * m)) for m in self.mean)  # timm's img_mean
        self.rand_augment = (
            RandAugment.from_config(auto_augment, fill=fill, interpolation=interpolation) if auto_augment else None
        )
        erasing = RandomErasing(re_prob, re_mode, max_count=re_count)  # checks the settings even when off
        self.erasing = erasing if re_prob > 0 else None
        self.seed = seed
        self.index_column = index_column
        self.epoch = 0
        self._generator = torch.Generator().manual_seed(seed) if seed is not None else None

    def set_epoch(self, epoch: int) -> None:
        """The epoch mixed into each sample's seed (with ``index_column``)."""
        self.epoch = int(epoch)

    def transform_image(self, image: Any, generator: torch.Generator | None = None) -> torch.Tensor:
        """One image -> (C, H, W) float32, every draw from ``generator`` (default: torch's global RNG)."""
        _check_generator(generator)
        image = _as_image(image, self.mode)
        image = self.flip(self.crop(image, generator), generator)
        if self.rand_augment is not None:
            image = self.rand_augment(image, generator)
        pixels = to_normalized_tensor(image, self.mean, self.std)
        return self.erasing(pixels, generator) if self.erasing is not None else pixels

    def _generators(self, batch: Mapping[str, list], size: int) -> list[torch.Generator | None]:
        if self.index_column is None:
            return [self._generator] * size
        if self.index_column not in batch:
            raise MissingColumnError(
                f"index_column={self.index_column!r} is not a column of the batch ({sorted(batch)}): add it with "
                "dataset.add_column(name, range(len(dataset)))"
            )
        return [sample_generator(self.seed, self.epoch, index) for index in batch[self.index_column]]


class ImageClassificationEvalTransform(_BatchTransform):
    """The DeiT / Swin evaluation transform: the short side to ``int(min(size) / crop_pct)`` (torchvision's
    ``Resize(int)``: the long side ``int(short * long / short_in)``), a centre crop of ``size`` (torchvision's
    rounding; zero padding where the image is smaller), normalised. ``crop_pct=None``: a direct resize to ``size``
    (Swin at 384 and up, ``TEST.CROP=False``). Deterministic; a batch like
    :class:`ImageClassificationTrainTransform`'s.

    Args:
        size: the output (height, width) or one int.
        crop_pct: DeiT's ``eval_crop_ratio`` (0.875; Swin's 224/256 is the same), or None.
        interpolation: ``"bicubic"`` (both papers').
        mean, std, image_column, label_column, num_channels: as the train transform's.
    """

    def __init__(
        self,
        size: int | Sequence[int] = 224,
        *,
        crop_pct: float | None = 0.875,
        interpolation: str | int = "bicubic",
        mean: Sequence[float] = IMAGENET_DEFAULT_MEAN,
        std: Sequence[float] = IMAGENET_DEFAULT_STD,
        image_column: str = "image",
        label_column: str = "label",
        num_channels: int | None = None,
    ) -> None:
        super().__init__(mean, std, image_column, label_column, num_channels)
        if crop_pct is not None and not 0.0 < crop_pct <= 1.0:
            raise UsageError(f"crop_pct must be a fraction in (0, 1] or None, got {crop_pct!r}")
        self.size = _pair(size, "size")
        self.crop_pct = crop_pct
        self.interpolation = _resample(interpolation)

    def resize_and_crop(self, image: Image.Image) -> Image.Image:
        """The PIL part: resize, centre crop."""
        height, width = self.size
        if self.crop_pct is None:
            return image.resize((width, height), self.interpolation)
        short = int(min(self.size) / self.crop_pct)
        in_w, in_h = image.size
        if in_w <= in_h:
            new_w, new_h = short, int(short * in_h / in_w)
        else:
            new_w, new_h = int(short * in_w / in_h), short
        image = image.resize((new_w, new_h), self.interpolation)
        top = -((height - new_h) // 2) if height > new_h else int(round((new_h - height) / 2))
        left = -((width - new_w) // 2) if width > new_w else int(round((new_w - width) / 2))
        return image.crop((left, top, left + width, top + height))  # outside the image: zeros

    def transform_image(self, image: Any, generator: torch.Generator | None = None) -> torch.Tensor:
        """One image -> (C, H, W) float32 (``generator`` is unused: nothing is random)."""
        image = self.resize_and_crop(_as_image(image, self.mode))
        return to_normalized_tensor(image, self.mean, self.std)


def image_classification_train_transform(
    processor: Any = None,
    image_column: str = "image",
    label_column: str = "label",
    num_channels: int | None = None,
    **recipe: Any,
) -> ImageClassificationTrainTransform:
    """The recipe's train transform at a processor's output size and normalisation
    (:func:`settings_from_processor`; ``processor=None``: 224 and ImageNet's), beside
    :func:`hf_xcv.data.image_classification_transform`. ``recipe``: the other arguments of
    :class:`ImageClassificationTrainTransform` (``size``/``mean``/``std`` there override the processor's)."""
    settings = settings_from_processor(processor) if processor is not None else {}
    settings.update(recipe)
    return ImageClassificationTrainTransform(
        image_column=image_column, label_column=label_column, num_channels=num_channels, **settings
    )


def image_classification_eval_transform(
    processor: Any = None,
    image_column: str = "image",
    label_column: str = "label",
    num_channels: int | None = None,
    **recipe: Any,
) -> ImageClassificationEvalTransform:
    """The recipe's evaluation transform at a processor's output size and normalisation (its ``crop_pct`` when it
    has one), as :func:`image_classification_train_transform`."""
    settings = settings_from_processor(processor) if processor is not None else {}
    if getattr(processor, "crop_pct", None) is not None:
        settings["crop_pct"] = processor.crop_pct
    settings.update(recipe)
    return ImageClassificationEvalTransform(
        image_column=image_column, label_column=label_column, num_channels=num_channels, **settings
    )
