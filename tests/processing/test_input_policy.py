"""One input policy for every image processor (hf_xcv.processing.input_policy), checked registry-wide: the same
catalogue of inputs goes through every image processor of hf_xcv.MODEL_TYPES (a processor registered later is
covered without new code), and equivalent inputs must give the same outputs:

* layouts and containers: HWC == CHW == tensors == PIL == a batch of one;
* floats in [0, 1] == the uint8 image (never divided by 255 twice), float 0-255 levels == the uint8 image;
* 16-bit (PIL "I;16", "I;16B", "I", uint16 arrays) ``v * 257`` == the 8-bit ``v``;
* grayscale == its RGB repetition; alpha composited on white; palette and other modes as PIL converts them;
* bool and other integer dtypes as 8-bit values;

and what the policy refuses is refused by every processor, with the image and the reason named (bad dtypes, value
ranges, shapes, a strip that would resize to 0 pixels on a side).
"""

from __future__ import annotations

import inspect

import numpy as np
import PIL.Image
import pytest
import torch
import transformers

from hf_xcv import MODEL_TYPES
from hf_xcv.processing.classification import ClassificationImageProcessor
from hf_xcv.processing.detection import DetectionImageProcessor
from hf_xcv.processing.fixed import FixedPipelineProcessor
from hf_xcv.processing.input_policy import read_image, read_images
from hf_xcv.utils.errors import UsageError

PROCESSORS = sorted(
    {entry.image_processor for entry in MODEL_TYPES.values() if entry.image_processor is not None},
    key=lambda cls: cls.__name__,
)
# Processors with transformers' resize / rescale / normalise settings (the fixed pipelines take none of them).
CONFIGURABLE = [cls for cls in PROCESSORS if not issubclass(cls, FixedPipelineProcessor)]
HEIGHT, WIDTH = 16, 20  # multiples of 4 (TTSR's references), large enough for every pipeline


def ids(classes: list[type]) -> list[str]:
    return [cls.__name__ for cls in classes]


def small(cls: type, **settings) -> object:
    """``cls`` with settings that keep it fast: a small output where it resizes."""
    if issubclass(cls, ClassificationImageProcessor):
        settings = {"size": {"height": 12, "width": 10}, "do_center_crop": False, **settings}
    elif issubclass(cls, DetectionImageProcessor):
        settings = {"size": {"shortest_edge": 12, "longest_edge": 20}, **settings}
    return cls(**settings)


def run(processor, image, **kwargs) -> dict[str, np.ndarray]:
    """Every output of ``processor`` for ``image`` (the image is its own reference where the processor takes
    one)."""
    extra = {"references": image} if "references" in inspect.signature(processor.preprocess).parameters else {}
    batch = processor(image, return_tensors="np", **extra, **kwargs)
    return {key: np.asarray(value) for key, value in batch.items()}


def assert_same(got: dict, expected: dict, atol: float = 0.0) -> None:
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key].shape == expected[key].shape, key
        np.testing.assert_allclose(got[key], expected[key], rtol=0, atol=atol, err_msg=key)


def level(processor) -> float:
    """The largest change of any output for one 8-bit level: the unit of the tolerances."""
    dark = run(processor, np.zeros((HEIGHT, WIDTH, 3), np.uint8))
    light = run(processor, np.full((HEIGHT, WIDTH, 3), 255, np.uint8))
    return max(float(np.abs(light[key].astype(np.float64) - dark[key]).max()) for key in dark) / 255


def smooth(seed: int = 0) -> np.ndarray:
    """(H, W, 3) uint8 with values in 30..225, smooth: no resampling overshoot reaches 0 or 255."""
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    channels = [127.5 + 95 * np.sin(x / 3.0 + c + seed) * np.cos(y / 4.0 - c) for c in range(3)]
    return np.round(np.stack(channels, axis=-1)).astype(np.uint8)


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return smooth()


def test_the_registry_has_the_processors_of_every_image_family():
    names = set(ids(PROCESSORS))
    assert {"XcvViTImageProcessor", "XcvSwinImageProcessor", "XcvDetrImageProcessor"} <= names
    assert {"XcvDeformableDetrImageProcessor", "TTSRImageProcessor", "IPTImageProcessor"} <= names


# ----------------------------------------------------------------------------------------------------------------
# equivalent inputs, equal outputs


@pytest.mark.parametrize("cls", PROCESSORS, ids=ids(PROCESSORS))
def test_layouts_and_containers_give_the_same_outputs(cls, image):
    processor = small(cls)
    expected = run(processor, image)
    chw = np.ascontiguousarray(image.transpose(2, 0, 1))
    for given in (chw, torch.from_numpy(image.copy()), torch.from_numpy(chw), PIL.Image.fromarray(image), [image]):
        assert_same(run(processor, given), expected)
    assert_same(run(processor, image[None]), expected)  # a 4-D batch of one


@pytest.mark.parametrize("cls", PROCESSORS, ids=ids(PROCESSORS))
def test_floats_in_0_1_are_never_rescaled_twice(cls, image):
    """A float image in [0, 1] is the uint8 image divided by 255: bit for bit the same outputs."""
    processor = small(cls)
    expected = run(processor, image)
    chw = image.transpose(2, 0, 1)
    for given in (image / 255.0, (image / 255.0).astype(np.float32), torch.from_numpy(chw / np.float32(255))):
        assert_same(run(processor, given), expected)


@pytest.mark.parametrize("cls", PROCESSORS, ids=ids(PROCESSORS))
def test_float_0_255_levels_are_rescaled_once(cls, image):
    processor = small(cls)
    expected = run(processor, image)
    assert_same(run(processor, image.astype(np.float32)), expected)
    # levels that are not whole: resized as floats (never quantized), off the uint8 image's outputs by their quarter
    # level and the 8-bit resize's rounding
    assert_same(run(processor, image + np.float32(0.25)), expected, atol=1.5 * level(processor))


@pytest.mark.parametrize("cls", PROCESSORS, ids=ids(PROCESSORS))
def test_16_bit_images_are_8_bit_images_times_257(cls, image):
    processor = small(cls)
    expected = run(processor, image)
    sixteen = image.astype(np.uint16) * 257
    assert_same(run(processor, sixteen), expected)
    gray = image[..., 0]
    expected_gray = run(processor, PIL.Image.fromarray(gray, "L"))
    gray16 = gray.astype(np.uint16) * 257
    for given in (
        PIL.Image.fromarray(gray16),  # "I;16"
        PIL.Image.frombytes("I;16B", (WIDTH, HEIGHT), gray16.astype(">u2").tobytes()),
        PIL.Image.fromarray(gray16.astype(np.int32)),  # "I", as PIL opens some 16-bit files
    ):
        assert_same(run(processor, given), expected_gray)
    # 16-bit values that are no 8-bit level: the same as the float image of the same values
    odd = sixteen + np.uint16(100)
    assert_same(run(processor, odd), run(processor, odd / 65535.0), atol=1e-3 * level(processor))


@pytest.mark.parametrize("cls", PROCESSORS, ids=ids(PROCESSORS))
def test_grayscale_becomes_rgb_in_every_form(cls, image):
    processor = small(cls)
    gray = image[..., 1]
    expected = run(processor, np.repeat(gray[..., None], 3, axis=-1))
    for given in (gray, gray[..., None], torch.from_numpy(gray[None].copy()), PIL.Image.fromarray(gray, "L")):
        assert_same(run(processor, given), expected)
    assert_same(run(processor, PIL.Image.fromarray(gray / np.float32(255))), expected)  # mode "F" in [0, 1]


@pytest.mark.parametrize("cls", PROCESSORS, ids=ids(PROCESSORS))
def test_alpha_is_composited_on_white(cls, image):
    processor = small(cls)
    alpha = np.linspace(0, 255, HEIGHT * WIDTH).reshape(HEIGHT, WIDTH, 1).round().astype(np.uint8)
    rgba = np.concatenate([image, alpha], axis=-1)
    composite = np.round(alpha / 255 * image + (1 - alpha / 255) * 255).astype(np.uint8)
    expected = run(processor, composite)
    for given in (rgba, rgba.transpose(2, 0, 1).copy(), PIL.Image.fromarray(rgba, "RGBA"), rgba / 255.0):
        assert_same(run(processor, given), expected)
    gray_alpha = PIL.Image.fromarray(np.concatenate([image[..., :1], alpha], axis=-1), "LA")
    assert_same(run(processor, gray_alpha), run(processor, np.repeat(composite_gray(image[..., 0], alpha), 3, -1)))


def composite_gray(gray: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.round(alpha / 255 * gray[..., None] + (1 - alpha / 255) * 255).astype(np.uint8)


@pytest.mark.parametrize("cls", PROCESSORS, ids=ids(PROCESSORS))
def test_palette_and_other_modes_are_converted_as_pil_converts_them(cls, image):
    processor = small(cls)
    photo = PIL.Image.fromarray(image)
    for mode in ("P", "CMYK", "YCbCr", "1"):
        converted = photo.convert(mode)
        assert_same(run(processor, converted), run(processor, converted.convert("RGB")))
    palette = photo.convert("P")
    palette.info["transparency"] = int(np.asarray(palette)[0, 0])  # one palette entry transparent: white there
    expected = np.asarray(palette.convert("RGBA"))
    expected = np.where(expected[..., 3:] == 0, 255, expected[..., :3]).astype(np.uint8)
    assert_same(run(processor, palette), run(processor, expected))


@pytest.mark.parametrize("cls", PROCESSORS, ids=ids(PROCESSORS))
def test_bool_and_other_integer_dtypes_are_8_bit_values(cls, image):
    processor = small(cls)
    assert_same(run(processor, image.astype(np.int64)), run(processor, image))
    assert_same(run(processor, torch.from_numpy(image.astype(np.int32))), run(processor, image))
    mask = image > 127
    assert_same(run(processor, mask), run(processor, mask.astype(np.uint8) * np.uint8(255)))


@pytest.mark.parametrize("cls", CONFIGURABLE, ids=ids(CONFIGURABLE))
def test_floats_pass_unchanged_without_do_rescale(cls, image):
    """do_rescale=False: the caller's floats as they are (transformers' way of passing [0, 1] images)."""
    processor = small(cls)
    expected = run(processor, image)
    assert_same(run(processor, image / 255.0, do_rescale=False), expected, atol=1.5 * level(processor))
    unscaled = run(processor, image, do_rescale=False, do_normalize=False)
    rescaled = run(processor, image.astype(np.float32) * 4.0, do_rescale=False, do_normalize=False)  # any scale
    np.testing.assert_allclose(rescaled["pixel_values"], 4.0 * unscaled["pixel_values"], rtol=1e-5, atol=4 * 1.01)


@pytest.mark.parametrize(
    "cls", [transformers.ViTImageProcessorPil, transformers.DetrImageProcessorPil], ids=["vit", "detr"]
)
def test_alpha_compositing_equals_transformers_do_convert_rgb(cls, image):
    """transformers' processors composite on white too (with do_convert_rgb=True): the same pixels."""
    ours = next(c for c in CONFIGURABLE if c.__name__ == "Xcv" + cls.__name__.removesuffix("Pil"))
    size = {"height": 12, "width": 10}
    alpha = np.arange(HEIGHT * WIDTH).reshape(HEIGHT, WIDTH, 1).astype(np.uint8)
    rgba = PIL.Image.fromarray(np.concatenate([image, alpha], axis=-1), "RGBA")
    theirs = cls(size=size, do_convert_rgb=True)(rgba, return_tensors="np")["pixel_values"]
    np.testing.assert_array_equal(ours(size=size)(rgba, return_tensors="np")["pixel_values"], theirs)


# ----------------------------------------------------------------------------------------------------------------
# refused, by name, everywhere

BAD_INPUTS = {
    "empty list": ([], "no images given"),
    "string": ("photo.png", "got str"),
    "1-D": (np.zeros(5, np.uint8), r"shape \(5,\)"),
    "5-D": (np.zeros((1, 2, 3, 4, 5), np.uint8), r"shape \(1, 2, 3, 4, 5\)"),
    "2 channels": (np.zeros((HEIGHT, WIDTH, 2), np.uint8), "channel axis"),
    "ambiguous layout": (np.zeros((4, 4, 3), np.uint8), "could be channels-first or channels-last"),
    "empty image": (np.zeros((0, WIDTH, 3), np.uint8), "empty image"),
    "complex": (np.zeros((HEIGHT, WIDTH, 3), np.complex64), "dtype complex64"),
    "object": (np.full((HEIGHT, WIDTH, 3), None), "dtype object"),
    "NaN": (np.full((HEIGHT, WIDTH, 3), np.nan), "finite"),
    "negative floats": (np.full((HEIGHT, WIDTH, 3), -0.5), r"values in \[0, 1\] .*got \[-0.5, -0.5\]"),
    "floats above 255": (np.full((HEIGHT, WIDTH, 3), 300.0), r"got \[300, 300\]"),
    "floats between 1 and 2": (np.full((HEIGHT, WIDTH, 3), 1.04), "ambiguous"),
    "int64 above 255": (np.full((HEIGHT, WIDTH, 3), 1000), "dtype int64 must hold 0-255 values"),
    "negative mode I": (PIL.Image.new("I", (WIDTH, HEIGHT), -7), "mode 'I' is read as 16-bit"),
    "mode La": (PIL.Image.new("La", (WIDTH, HEIGHT)), "cannot convert a PIL image of mode 'La'"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
@pytest.mark.parametrize("cls", PROCESSORS, ids=ids(PROCESSORS))
def test_bad_inputs_are_refused_by_name(cls, case):
    given, message = BAD_INPUTS[case]
    with pytest.raises(UsageError, match=message) as caught:
        run(small(cls), given)
    if case not in ("empty list", "5-D"):
        assert "image 0: " in str(caught.value) or "reference 0: " in str(caught.value)


@pytest.mark.parametrize("cls", PROCESSORS, ids=ids(PROCESSORS))
@pytest.mark.parametrize("shape", [(10000, 20), (20, 10000)], ids=["tall", "wide"])
def test_a_strip_never_resizes_to_nothing(cls, shape):
    """With a capped resize (shortest edge 8, longest 16) a 10000x20 strip would be 0 pixels wide: refused, naming
    the input size and the setting; a processor without such a setting processes it whole or refuses it by name."""
    strip = np.full((*shape, 3), 128, np.uint8)
    height, width = shape
    if cls in CONFIGURABLE:
        for size in ({"shortest_edge": 8, "longest_edge": 16}, {"max_height": 16, "max_width": 16}):
            with pytest.raises(UsageError, match=rf"{height}x{width} \(height x width\) resizes to .*size=.*16"):
                run(small(cls, size=size), strip)
        return
    try:
        outputs = run(small(cls), strip)
    except UsageError as err:
        assert f"{height}x{width}" in str(err)
    else:
        assert all(0 not in value.shape for value in outputs.values())


def test_the_detection_augmentation_names_its_setting_for_a_strip():
    cls = next(c for c in CONFIGURABLE if issubclass(c, DetectionImageProcessor))
    processor = cls(augment_scales=[8], augment_max_size=16, augment_crop_scales=[8], augment_crop_size=[4, 8])
    strip = np.full((10000, 20, 3), 128, np.uint8)
    refused = 0
    for seed in range(8):  # the direct multi-scale resize is drawn half of the time; the crop path fits the cap
        try:
            processor(strip, do_augment=True, generator=seed)
        except UsageError as err:
            assert "10000x20" in str(err) and "the augmentation's shortest edge 8 and longest edge 16" in str(err)
            refused += 1
    assert refused > 0


# ----------------------------------------------------------------------------------------------------------------
# the policy itself


def test_without_rgb_conversion_an_image_keeps_its_channels(image):
    photo = PIL.Image.fromarray(image)
    assert read_image(photo.convert("L"), to_rgb=False).shape == (1, HEIGHT, WIDTH)
    np.testing.assert_array_equal(
        read_image(photo.convert("P"), to_rgb=False), read_image(photo.convert("P").convert("RGB"), to_rgb=False)
    )
    assert read_image(photo.convert("RGBA"), to_rgb=False).shape == (4, HEIGHT, WIDTH)
    assert read_image(np.zeros((HEIGHT, WIDTH, 4), np.uint8), to_rgb=False).shape == (4, HEIGHT, WIDTH)
    with pytest.raises(UsageError, match="mode 'CMYK' has no RGB or grayscale channels to keep"):
        read_image(photo.convert("CMYK"), to_rgb=False)


def test_whole_levels_stay_uint8_and_other_values_stay_float(image):
    assert read_image(image / 255.0).dtype == np.uint8
    assert read_image(image.astype(np.uint16) * 257).dtype == np.uint8
    levels = read_image(image.astype(np.uint16) * 257 + 1)
    assert levels.dtype == np.float32
    np.testing.assert_allclose(levels, image.transpose(2, 0, 1) + 1 / 257, atol=1e-4)
    unscaled = read_image(image / 255.0, rescale=False)  # the caller's floats, as they are
    assert unscaled.dtype == np.float32 and unscaled.max() <= 1.0


def test_float_alpha_without_rescaling_is_refused():
    with pytest.raises(UsageError, match="alpha channel and do_rescale=False"):
        read_images(np.zeros((HEIGHT, WIDTH, 4), np.float32), rescale=False)
