"""Photos for reference-based super-resolution (TTSR) and restoration (IPT): scikit-image's bundled photos and user
folders, as ``datasets.DatasetDict``s with the columns ``image`` (the HR image), ``reference`` (an HR image sharing
content with it) and ``name``.

:func:`load_photos_dataset` needs no download: scikit-image ships these photos in its wheel. The photos are split
by photo, so no held-out pixel is ever seen in training:

- ``test``: the stereo motorcycle pair (the left view is the HR image, the right view its reference: a real
  second view of the scene), coffee and chelsea (a panned pair each, see :func:`panned_views`);
- ``validation``: rocket (a panned pair);
- ``train``: random crops (:func:`training_crops`) of :data:`TRAIN_PHOTOS`, the grayscale ones repeated to RGB.

Left out (:data:`EXCLUDED_PHOTOS` says why): synthetic images and flat ones, which teach a model little and inflate
scores, the deliberately blurred clock, and images smaller than a crop.

Every image, HR and reference, is mod-cropped (its bottom rows and right columns cut) so that both sides are
multiples of the scale (4 for TTSR's x4), so that LR = HR / scale exactly.

:func:`load_restoration_folder` reads the same columns from a folder of the user's own images, and
:func:`training_crops` turns any such split of large photos into training crops the way the built-in train split is
made.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import PIL.ImageOps
from datasets import Dataset, DatasetDict, Features, Image, Value

from ..processing.restoration import SCALE, check_scale, mod_crop
from ..utils.errors import UsageError
from .checks import DataProblem, refuse

TRAIN_PHOTOS = (
    "astronaut", "hubble_deep_field", "immunohistochemistry",  # RGB
    "camera", "brick", "grass", "gravel", "coins", "page", "text",  # grayscale, repeated to RGB
)  # fmt: skip
VALIDATION_PHOTOS = ("rocket",)
TEST_PHOTOS = ("stereo_motorcycle", "coffee", "chelsea")
EXCLUDED_PHOTOS = {
    "colorwheel": "synthetic: a smooth colour gradient (bicubic x4 already scores 53 dB)",
    "logo": "synthetic graphics on a flat background (RGBA)",
    "retina": "mostly flat: a smooth fundus on a black surround (bicubic x4 scores 43 dB)",
    "moon": "mostly flat, low-contrast surface",
    "cell": "mostly flat background around one cell",
    "clock": "deliberately motion-blurred: a blurred HR image would teach blur",
    "microaneurysms": "102x102, smaller than a training crop, and flat",
    "horse": "a binary silhouette",
    "checkerboard": "synthetic",
    "binary_blobs": "synthetic",
    "shepp_logan_phantom": "synthetic",
    "lfw_subset": "25x25 faces, smaller than a training crop",
}
SPLITS = ("train", "validation", "test")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
REFERENCE_POLICIES = ("image", "reference")
MISSING_REFERENCE_POLICIES = ("error", "panned", "itself")
_HIGH_DEPTH_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N", "F")


def photo_features() -> Features:
    """The columns of every split: the HR ``image``, its ``reference`` (both RGB) and a ``name``."""
    return Features({"image": Image(mode="RGB"), "reference": Image(mode="RGB"), "name": Value("string")})


def _encoded(image: np.ndarray) -> dict[str, Any]:
    """An (H, W, 3) uint8 array as ``datasets.Image`` storage: a PNG at low compression (lossless, fast to write)."""
    buffer = io.BytesIO()
    PIL.Image.fromarray(image).save(buffer, format="PNG", compress_level=1)
    return {"bytes": buffer.getvalue(), "path": None}


def _columns(rows: list[tuple[np.ndarray, np.ndarray, str]]) -> Dataset:
    """A split from (HR image, reference, name) rows."""
    return Dataset.from_dict(
        {
            "image": [_encoded(image) for image, _, _ in rows],
            "reference": [_encoded(reference) for _, reference, _ in rows],
            "name": [name for _, _, name in rows],
        },
        features=photo_features(),
    )


# ----------------------------------------------------------------------------------------------------------------
# geometry


def panned_views(image: np.ndarray, scale: int = SCALE, name: str = "the image") -> tuple[np.ndarray, np.ndarray]:
    """A photo without a second view as a synthesized "panned" pair: the HR image is its left two thirds, the
    reference its right two thirds, so that they share the middle third as if the camera had panned.

    The photo is mod-cropped first, and each view is ``w`` wide, ``w`` the largest multiple of ``scale`` at most two
    thirds of the width ``W``: the HR image is columns ``[0, w)``, the reference ``[W - w, W)``, and the HR image's
    columns ``[W - w, w)`` equal the reference's ``[0, 2w - W)`` pixel for pixel.

    Raises:
        ValueError: a view would be narrower than ``scale``.
    """
    image = mod_crop(image, scale, name)
    width = image.shape[1]
    view = (2 * width // 3) // scale * scale
    if view < scale:
        raise UsageError(f"{name} is {width} pixels wide: too narrow for two panned views of at least {scale}")
    return image[:, :view], image[:, width - view :]


def _crop_count(height: int, width: int, crop_size: int, crops_per_image: int | None, coverage: float) -> int:
    if crops_per_image is not None:
        return crops_per_image
    return max(1, math.ceil(coverage * height * width / crop_size**2))


def _crop_boxes(
    rng: np.random.Generator, size: tuple[int, int], reference_size: tuple[int, int], crop_size: int, count: int,
    max_offset: int,
) -> Iterator[tuple[int, int, int, int]]:  # fmt: skip
    """``count`` (top, left, reference top, reference left): the HR crop uniformly inside ``size``, the reference
    crop displaced from it by up to ``max_offset`` pixels each way and clipped into ``reference_size``."""
    (height, width), (ref_height, ref_width) = size, reference_size
    for _ in range(count):
        top, left = int(rng.integers(0, height - crop_size + 1)), int(rng.integers(0, width - crop_size + 1))
        dy, dx = (int(d) for d in rng.integers(-max_offset, max_offset + 1, size=2))
        ref_top = min(max(top + dy, 0), ref_height - crop_size)
        ref_left = min(max(left + dx, 0), ref_width - crop_size)
        yield top, left, ref_top, ref_left


def crop_name(name: str, index: int, box: tuple[int, int, int, int]) -> str:
    """A crop's name: the photo's, the crop's number and the top-left corners of its HR and reference crops,
    ``"astronaut/crop007_hr-y12-x40_ref-y30-x10"``."""
    top, left, ref_top, ref_left = box
    return f"{name}/crop{index:03d}_hr-y{top}-x{left}_ref-y{ref_top}-x{ref_left}"


def _cut(
    image: np.ndarray, source: np.ndarray, name: str, rng: np.random.Generator, crop_size: int, count: int,
    max_offset: int,
) -> list[tuple[np.ndarray, np.ndarray, str]]:  # fmt: skip
    """``count`` (HR crop, reference crop, name) rows of one image; the reference crops come from ``source``."""
    for what, array in (("", image), ("the reference of ", source)):
        if min(array.shape[:2]) < crop_size:
            height, width = array.shape[:2]
            raise UsageError(f"{what}{name!r} is {height}x{width}, smaller than the {crop_size}x{crop_size} crops")
    rows = []
    boxes = _crop_boxes(rng, image.shape[:2], source.shape[:2], crop_size, count, max_offset)
    for index, box in enumerate(boxes):
        top, left, ref_top, ref_left = box
        rows.append(
            (
                image[top : top + crop_size, left : left + crop_size],
                source[ref_top : ref_top + crop_size, ref_left : ref_left + crop_size],
                crop_name(name, index, box),
            )
        )
    return rows


def _crop_options(
    crop_size: Any, crops: Any, coverage: Any, max_offset: Any, seed: Any, scale: int, crops_name: str
) -> int:
    """Check the crop options; returns the maximum offset (None: half the crop)."""
    if isinstance(crop_size, bool) or not isinstance(crop_size, int) or crop_size < scale or crop_size % scale:
        raise UsageError(f"crop_size={crop_size!r} must be a positive multiple of the scale {scale}")
    if crops is not None and (isinstance(crops, bool) or not isinstance(crops, int) or crops < 1):
        raise UsageError(f"{crops_name}={crops!r} must be a positive integer or None (from coverage)")
    if isinstance(coverage, bool) or not isinstance(coverage, int | float) or not coverage > 0:
        raise UsageError(f"coverage={coverage!r} must be a positive number")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"seed={seed!r} must be a non-negative integer")
    max_offset = crop_size // 2 if max_offset is None else max_offset
    if isinstance(max_offset, bool) or not isinstance(max_offset, int) or max_offset < 0:
        raise UsageError(f"max_offset={max_offset!r} must be a non-negative integer or None (half the crop)")
    return max_offset


def training_crops(
    split: Dataset,
    crop_size: int = 160,
    crops_per_image: int | None = None,
    coverage: float = 2.0,
    max_offset: int | None = None,
    reference_source: str = "image",
    seed: int = 0,
    scale: int = SCALE,
) -> Dataset:
    """Random ``crop_size`` x ``crop_size`` training crops of a split's images, each with a reference crop that shares
    content with it (as CUFED's similar references do for TTSR), in the columns of :func:`photo_features`.

    The HR crop lies uniformly at random inside its image; the reference crop is displaced from it by a random
    offset of up to ``max_offset`` pixels in each direction (so it overlaps at least (1 - max_offset / crop_size)
    of the crop's height and of its width), clipped to stay inside its source. Names come from
    :func:`crop_name`. Row ``i``'s crops depend only on ``(seed, i)``: the same seed and rows give the same crops.

    Args:
        split: a dataset with an ``image`` column (and ``reference`` for ``reference_source="reference"``, ``name``
            to name the crops; else the row number names them), e.g. a split of :func:`load_restoration_folder`.
        crop_size: the crops' side, a multiple of ``scale`` (160: TTSR's, LR 40x40 at x4).
        crops_per_image: crops cut from each image; None: ``ceil(coverage * H * W / crop_size**2)``, so that bigger
            images give more crops and every image's pixels are covered about ``coverage`` times.
        coverage: see ``crops_per_image``.
        max_offset: the largest displacement of the reference crop, per direction; None: ``crop_size // 2``.
        reference_source: ``"image"``: the reference crop comes from the image itself; ``"reference"``: from the
            row's reference image, at the displaced position clipped to its bounds (for roughly aligned pairs:
            stereo views, panned views).
        seed: the base of every row's random generator.
        scale: the super-resolution factor ``crop_size`` must be a multiple of.

    Raises:
        ValueError: a bad option, a missing column, or an image (or reference) smaller than a crop, named.
    """
    scale = check_scale(scale)
    max_offset = _crop_options(crop_size, crops_per_image, coverage, max_offset, seed, scale, "crops_per_image")
    if reference_source not in REFERENCE_POLICIES:
        raise UsageError(f"reference_source must be one of {list(REFERENCE_POLICIES)}, got {reference_source!r}")
    needed = ["image"] + (["reference"] if reference_source == "reference" else [])
    missing = [column for column in needed if column not in split.column_names]
    if missing:
        raise UsageError(f"the split lacks the column(s) {missing}; it has {split.column_names}")
    columns = needed + (["name"] if "name" in split.column_names else [])
    rows = []
    for index, row in enumerate(split.select_columns(columns)):
        image = np.asarray(row["image"].convert("RGB"))
        source = image if reference_source == "image" else np.asarray(row["reference"].convert("RGB"))
        count = _crop_count(*image.shape[:2], crop_size, crops_per_image, coverage)
        rng = np.random.default_rng([seed, index])
        rows += _cut(image, source, str(row.get("name", index)), rng, crop_size, count, max_offset)
    return _columns(rows)


# ----------------------------------------------------------------------------------------------------------------
# scikit-image's photos


def _skimage_data() -> Any:
    try:
        from skimage import data
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("the photos dataset needs scikit-image: pip install 'hf_xcv[restoration]'") from err
    return data


def load_photo(name: str) -> np.ndarray:
    """One of the dataset's photos (:data:`TRAIN_PHOTOS`, :data:`VALIDATION_PHOTOS`, :data:`TEST_PHOTOS`) from
    scikit-image, as (H, W, 3) uint8 RGB, grayscale repeated to three channels, not mod-cropped.
    ``"stereo_motorcycle"`` is its left view, ``"stereo_motorcycle_right"`` its right one."""
    data = _skimage_data()
    if name.startswith("stereo_motorcycle"):
        left, right, _ = data.stereo_motorcycle()
        views = {"stereo_motorcycle": left, "stereo_motorcycle_right": right}
        if name not in views:
            raise UsageError(f"unknown photo {name!r}: the stereo pair is {list(views)}")
        image = views[name]
    else:
        known = (*TRAIN_PHOTOS, *VALIDATION_PHOTOS, *TEST_PHOTOS)
        if name not in known:
            reason = f" (left out: {EXCLUDED_PHOTOS[name]})" if name in EXCLUDED_PHOTOS else ""
            raise UsageError(f"unknown photo {name!r}{reason}; known: {[*known, 'stereo_motorcycle_right']}")
        image = getattr(data, name)()
    return np.repeat(image[:, :, None], 3, axis=2) if image.ndim == 2 else image[:, :, :3]


def _held_out_rows(names: tuple[str, ...], scale: int) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """The whole-view rows of held-out photos: the stereo pair as it is, the others as panned pairs."""
    rows = []
    for name in names:
        if name == "stereo_motorcycle":
            left = mod_crop(load_photo("stereo_motorcycle"), scale, name)
            right = mod_crop(load_photo("stereo_motorcycle_right"), scale, name)
            rows.append((left, right, f"{name}/stereo"))
        else:
            rows.append((*panned_views(load_photo(name), scale, name), f"{name}/panned"))
    return rows


def _train_rows(
    crop_size: int, crops_per_photo: int | None, coverage: float, max_offset: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """The crops of every training photo at least a crop large; photo ``k`` of ``TRAIN_PHOTOS`` uses ``(seed, k)``."""
    rows = []
    for index, name in enumerate(TRAIN_PHOTOS):
        photo = load_photo(name)
        if min(photo.shape[:2]) < crop_size:
            continue
        count = _crop_count(*photo.shape[:2], crop_size, crops_per_photo, coverage)
        rows += _cut(photo, photo, name, np.random.default_rng([seed, index]), crop_size, count, max_offset)
    if not rows:
        raise UsageError(f"crop_size={crop_size} is larger than every training photo")
    return rows


def load_photos_dataset(
    crop_size: int = 160,
    crops_per_photo: int | None = None,
    coverage: float = 2.0,
    max_offset: int | None = None,
    seed: int = 0,
    scale: int = SCALE,
) -> DatasetDict:
    """scikit-image's photos as a reference-based super-resolution dataset, splits train / validation / test, the
    columns of :func:`photo_features` (see the module's docstring for which photo goes where).

    Validation and test hold whole views, mod-cropped to ``scale``. Train holds random crops of the training photos,
    cut as :func:`training_crops` cuts them from the photo itself (the reference crop displaced by up to
    ``max_offset``); photos smaller than a crop are left out (page, 191 pixels high, from ``crop_size`` 192 on).
    The defaults give 218 crops (69 of them from hubble_deep_field, the largest photo) and build in about a second.

    Args:
        crop_size: the training crops' side, a multiple of ``scale`` (160: TTSR's CUFED crops, LR 40x40).
        crops_per_photo: crops per training photo; None: ``ceil(coverage * H * W / crop_size**2)``, more from
            bigger photos.
        coverage: how many times, on average, the crops cover each photo when ``crops_per_photo`` is None.
        max_offset: the reference crop's largest displacement per direction; None: half the crop.
        seed: makes the crops; the held-out splits do not depend on it.
        scale: the super-resolution factor sizes are multiples of.
    """
    scale = check_scale(scale)
    max_offset = _crop_options(crop_size, crops_per_photo, coverage, max_offset, seed, scale, "crops_per_photo")
    return DatasetDict(
        {
            "train": _columns(_train_rows(crop_size, crops_per_photo, coverage, max_offset, seed)),
            "validation": _columns(_held_out_rows(VALIDATION_PHOTOS, scale)),
            "test": _columns(_held_out_rows(TEST_PHOTOS, scale)),
        }
    )


# ----------------------------------------------------------------------------------------------------------------
# user folders


def _read_image(path: Path) -> np.ndarray:
    """An image file as (H, W, 3) uint8 RGB, its EXIF orientation applied; errors name the file."""
    try:
        with PIL.Image.open(path) as opened:
            opened.load()
            image = PIL.ImageOps.exif_transpose(opened)
    except (OSError, ValueError, SyntaxError, PIL.Image.DecompressionBombError) as err:  # (Unidentified: OSError)
        raise UsageError(f"cannot read the image {path}: {err}") from None
    if image.mode in _HIGH_DEPTH_MODES:
        raise UsageError(f"{path} has mode {image.mode!r} (more than 8 bits per channel): save it as 8-bit RGB")
    return np.asarray(image.convert("RGB"))


def _images_by_stem(folder: Path) -> dict[str, Path]:
    """The image files of ``folder`` (hidden files and other extensions skipped) by file stem."""
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or not path.is_file() or path.suffix.lower() not in IMAGE_EXTENSIONS:
            continue
        if path.stem in found:
            raise UsageError(f"{found[path.stem]} and {path} have the same name: an image per name")
        found[path.stem] = path
    return found


def _pair(
    hr_path: Path, ref_path: Path | None, missing_reference: str, scale: int
) -> tuple[np.ndarray, np.ndarray, str]:
    """One row of a folder split."""
    image = _read_image(hr_path)
    if ref_path is not None:
        return mod_crop(image, scale, str(hr_path)), mod_crop(_read_image(ref_path), scale, str(ref_path)), hr_path.stem
    if missing_reference == "panned":
        return (*panned_views(image, scale, str(hr_path)), hr_path.stem)
    if missing_reference == "itself":  # for models that read no reference (IPT)
        image = mod_crop(image, scale, str(hr_path))
        return image, image, hr_path.stem
    raise UsageError(
        f"{hr_path} has no reference (no image named {hr_path.stem!r} in {hr_path.parent.parent / 'ref'}): add one, "
        "or pass missing_reference='panned' to make a panned view pair of it"
    )


def _folder_split(folder: Path, missing_reference: str, scale: int) -> Dataset:
    """A split from ``folder/hr`` and the optional ``folder/ref``, images matched by file stem."""
    images = _images_by_stem(folder / "hr")
    if not images:
        raise UsageError(f"{folder / 'hr'} holds no images ({', '.join(IMAGE_EXTENSIONS)})")
    references = _images_by_stem(folder / "ref") if (folder / "ref").is_dir() else {}
    problems = [
        DataProblem(folder.name, f"has no HR image: no image named {stem!r} in {folder / 'hr'}", -1,
                    file=str(references[stem]))
        for stem in sorted(set(references) - set(images))
    ]  # fmt: skip
    rows = []
    for row, (stem, path) in enumerate(images.items()):  # every image read: every problem named at once
        try:
            rows.append(_pair(path, references.get(stem), missing_reference, scale))
        except UsageError as error:
            problems.append(DataProblem(folder.name, str(error), row, file=str(path)))
    refuse(problems, str(folder.parent), None)
    return _columns(rows)


def _split_folders(root: Path, split: str) -> dict[str, Path]:
    """Split name -> folder: ``{split: root}`` for ``root/hr``, else each ``root/<name>`` holding ``hr/``."""
    subfolders = [p for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]
    with_hr = {p.name: p for p in subfolders if (p / "hr").is_dir()}
    if (root / "hr").is_dir():
        if with_hr:
            raise UsageError(f"{root} holds both hr/ and split folders {sorted(with_hr)}: use one layout")
        return {split: root}
    for folder in subfolders:
        if (folder / "ref").is_dir() and folder.name not in with_hr:
            raise UsageError(f"{folder / 'ref'} has no HR folder beside it: expected {folder / 'hr'}")
    if not with_hr:
        raise UsageError(f"{root} holds neither hr/ nor split folders with hr/ (e.g. {root / 'train' / 'hr'})")
    order = [name for name in SPLITS if name in with_hr] + [name for name in with_hr if name not in SPLITS]
    return {name: with_hr[name] for name in order}


def load_restoration_folder(
    path: str | Path, split: str = "train", missing_reference: str = "error", scale: int = SCALE
) -> DatasetDict:
    """A folder of the user's images as a ``DatasetDict`` with the columns of :func:`photo_features`.

    Layout (file names matched by stem, so ``hr/a.png`` and ``ref/a.jpg`` pair up)::

        path/<split>/hr/*.png    the HR images of each split folder (train, validation, test or any name)
        path/<split>/ref/*.png   optional: the reference of each HR image, by the same name

    or, for one split named ``split``, ``path/hr`` and ``path/ref``. Images may be PNG, JPEG, BMP, TIFF or WebP;
    they are turned upright by their EXIF orientation and read as RGB (alpha dropped, grayscale repeated); other
    files and hidden ones are skipped. Every image is mod-cropped to multiples of ``scale``. Names are the HR files'
    stems; :func:`training_crops` turns a split of large photos into training crops.

    Args:
        path: the root folder.
        split: the name of the one split when ``path/hr`` exists.
        missing_reference: ``"error"``: an HR image without a reference is an error; ``"panned"``: it becomes a
            panned view pair (:func:`panned_views`: the HR image is its left two thirds, the reference its right two
            thirds); ``"itself"``: its reference is the HR image itself (for models that read no reference, IPT).
        scale: the super-resolution factor the sizes are multiples of.

    Raises:
        ValueError: a missing folder, an empty ``hr/``, a reference without its HR image, two files of one name, an
            unreadable or 16-bit image, an image smaller than ``scale``, or a missing reference; each names the file.
    """
    scale = check_scale(scale)
    if missing_reference not in MISSING_REFERENCE_POLICIES:
        raise UsageError(
            f"missing_reference must be one of {list(MISSING_REFERENCE_POLICIES)}, got {missing_reference!r}"
        )
    root = Path(path)
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder")
    folders = _split_folders(root, split)
    return DatasetDict({name: _folder_split(folder, missing_reference, scale) for name, folder in folders.items()})
