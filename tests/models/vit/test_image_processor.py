"""XcvViTImageProcessor: the inputs users pass, parity with transformers' PIL processor, clear errors."""

from __future__ import annotations

import numpy as np
import PIL.Image
import pytest
import torch
import transformers
from skimage import data as skdata

from hf_xcv import XcvViTImageProcessor


@pytest.fixture(scope="module")
def photo() -> PIL.Image.Image:
    return PIL.Image.fromarray(skdata.astronaut()).resize((96, 80))


def test_matches_transformers_pil_vit_processor_on_rgb_photos(photo):
    ours = XcvViTImageProcessor(size={"height": 64, "width": 48})
    theirs = transformers.ViTImageProcessorPil(size={"height": 64, "width": 48})
    a = ours(photo, return_tensors="pt")["pixel_values"]
    b = theirs(photo, return_tensors="pt")["pixel_values"]
    assert a.shape == (1, 3, 64, 48)
    assert torch.equal(a, b)


def test_numpy_and_torch_layouts_give_the_same_pixels(photo):
    processor = XcvViTImageProcessor(size={"height": 32, "width": 32})
    hwc = np.asarray(photo)
    expected = processor(photo, return_tensors="pt")["pixel_values"]
    for image in (
        hwc,
        hwc.transpose(2, 0, 1),
        torch.from_numpy(hwc.copy()),
        torch.from_numpy(hwc.transpose(2, 0, 1).copy()),
    ):
        torch.testing.assert_close(processor(image, return_tensors="pt")["pixel_values"], expected)


def test_batches_as_lists_and_4d_arrays(photo):
    processor = XcvViTImageProcessor(size={"height": 32, "width": 32})
    hwc = np.asarray(photo)
    listed = processor([photo, photo, photo], return_tensors="pt")["pixel_values"]
    stacked = processor(np.stack([hwc] * 3), return_tensors="pt")["pixel_values"]
    assert listed.shape == stacked.shape == (3, 3, 32, 32)
    torch.testing.assert_close(listed, stacked)


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "LA", "1"])
def test_grayscale_palette_and_alpha_images_become_rgb(photo, mode):
    processor = XcvViTImageProcessor(size={"height": 16, "width": 16})
    image = photo.convert(mode)
    pixels = processor(image, return_tensors="pt")["pixel_values"]
    assert pixels.shape == (1, 3, 16, 16)
    expected = processor(image.convert("RGB"), return_tensors="pt")["pixel_values"]
    torch.testing.assert_close(pixels, expected)


def test_grayscale_and_rgba_arrays_become_rgb(photo):
    processor = XcvViTImageProcessor(size={"height": 16, "width": 16})
    gray = np.asarray(photo.convert("L"))
    rgba = np.asarray(photo.convert("RGBA"))
    gray_pixels = processor(gray, return_tensors="pt")["pixel_values"]
    assert gray_pixels.shape == (1, 3, 16, 16)
    assert torch.equal(gray_pixels[:, 0], gray_pixels[:, 2])
    torch.testing.assert_close(
        processor(rgba, return_tensors="pt")["pixel_values"],
        processor(rgba[..., :3], return_tensors="pt")["pixel_values"],
    )
    single_channel = processor(gray[..., None], return_tensors="pt")["pixel_values"]
    torch.testing.assert_close(single_channel, gray_pixels)


def test_center_crop_option(photo):
    processor = XcvViTImageProcessor(
        size={"shortest_edge": 40}, do_center_crop=True, crop_size={"height": 32, "width": 32}
    )
    pixels = processor(photo, return_tensors="pt")["pixel_values"]
    assert pixels.shape == (1, 3, 32, 32)


def test_save_load_and_auto_image_processor(tmp_path):
    processor = XcvViTImageProcessor(size={"height": 24, "width": 24}, image_mean=[0.4, 0.5, 0.6])
    processor.save_pretrained(tmp_path)
    again = XcvViTImageProcessor.from_pretrained(tmp_path)
    assert again.size == {"height": 24, "width": 24}
    assert list(again.image_mean) == [0.4, 0.5, 0.6]


@pytest.mark.parametrize(
    ("images", "message"),
    [
        ([], "empty list"),
        (None, "got None"),
        (np.zeros(5, dtype=np.uint8), r"shape \(5,\)"),
        (np.zeros((1, 2, 3, 4, 5), dtype=np.uint8), r"shape \(1, 2, 3, 4, 5\)"),
        (np.zeros((0, 3, 8, 8), dtype=np.uint8), "no images given"),
        (np.zeros((8, 8, 2), dtype=np.uint8), "channel axis"),
        (np.zeros((4, 4, 3), dtype=np.uint8), "could be channels-first or channels-last"),
        (np.zeros((0, 8, 3), dtype=np.uint8), "empty image"),
        ("not an image", "got str"),
        ([np.zeros((8, 8, 3), dtype=np.uint8), 7], "got int"),
    ],
)
def test_bad_inputs_say_what_they_got(images, message):
    with pytest.raises(ValueError, match=message):
        XcvViTImageProcessor(size={"height": 8, "width": 8})(images, return_tensors="pt")


def test_ambiguous_layouts_are_resolved_by_input_data_format():
    processor = XcvViTImageProcessor(size={"height": 4, "width": 4}, do_resize=False)
    hwc = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    last = processor(hwc, input_data_format="channels_last", return_tensors="pt")["pixel_values"]
    first = processor(hwc.transpose(2, 0, 1), input_data_format="channels_first", return_tensors="pt")["pixel_values"]
    assert last.shape == (1, 3, 4, 4)
    assert torch.equal(last, first)


def test_a_datasets_column_is_a_batch():
    from hf_xcv.data import load_digits_dataset

    column = load_digits_dataset()["test"]["image"]
    pixels = XcvViTImageProcessor(size={"height": 8, "width": 8})(column, return_tensors="pt")["pixel_values"]
    assert pixels.shape == (179, 3, 8, 8)
