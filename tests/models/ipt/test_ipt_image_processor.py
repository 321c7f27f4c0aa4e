"""IPTImageProcessor: the official value range, image modes, one size per batch, degradation pairs made from clean
images, pairs the user brings, saving, postprocessing back to the exact 8-bit image, and bad inputs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import PIL.Image
import pytest
import torch
import transformers

from hf_xcv.models.ipt.image_processing_ipt import IPTImageProcessor
from hf_xcv.processing.restoration import add_gaussian_noise, add_rain_streaks, parse_task


def photo(height: int, width: int, seed: int = 0, mode: str = "RGB") -> PIL.Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return PIL.Image.fromarray(pixels).convert(mode)


def chw(image: PIL.Image.Image) -> np.ndarray:
    return np.moveaxis(np.asarray(image), -1, 0)


def test_there_is_no_transformers_class_of_its_name():
    assert not hasattr(transformers, "IPTImageProcessor")


@pytest.mark.parametrize("rgb_range", [255, 1, 1.0])
def test_pixel_values_are_0_255_times_rgb_range_over_255(rgb_range):
    image = photo(10, 12)
    batch = IPTImageProcessor(rgb_range=rgb_range)([image, photo(10, 12, seed=1)], return_tensors="pt")
    values = batch["pixel_values"]
    assert isinstance(values, torch.Tensor) and values.dtype == torch.float32 and tuple(values.shape) == (2, 3, 10, 12)
    expected = chw(image).astype(np.float32) * np.float32(rgb_range / 255)
    np.testing.assert_array_equal(values[0].numpy(), expected)
    assert 0 <= values.min() and values.max() <= rgb_range and "labels" not in batch


def test_rgb_range_255_keeps_the_8_bit_values_and_per_call_settings_override():
    image = photo(6, 7)
    np.testing.assert_array_equal(IPTImageProcessor()(image)["pixel_values"][0], chw(image))
    np.testing.assert_allclose(IPTImageProcessor()(image, rgb_range=1)["pixel_values"][0], chw(image) / 255, rtol=1e-6)


@pytest.mark.parametrize("mode", ["RGBA", "L", "P", "LA"])
def test_other_image_modes_become_rgb_as_pil_converts_them(mode):
    image = photo(9, 11, mode=mode)
    np.testing.assert_array_equal(IPTImageProcessor()(image)["pixel_values"][0], chw(image.convert("RGB")))


def test_arrays_tensors_and_floats_in_0_1_are_accepted():
    image = photo(8, 9)
    expected = IPTImageProcessor()(image)["pixel_values"]
    for given in (np.asarray(image), torch.from_numpy(chw(image).copy()), np.asarray(image) / 255.0):
        np.testing.assert_array_equal(IPTImageProcessor()(given)["pixel_values"], expected)


# ----------------------------------------------------------------------------------------------------------------
# degradation pairs


def test_sr_pairs_are_pil_bicubic_of_the_mod_cropped_clean_image():
    clean = photo(50, 43)
    batch = IPTImageProcessor()(clean_images=clean, task="sr_x4", return_tensors="pt")
    cropped = clean.crop((0, 0, 40, 48))
    assert tuple(batch["labels"].shape) == (1, 3, 48, 40) and tuple(batch["pixel_values"].shape) == (1, 3, 12, 10)
    np.testing.assert_array_equal(batch["labels"][0].numpy(), chw(cropped))
    np.testing.assert_array_equal(batch["pixel_values"][0].numpy(), chw(cropped.resize((10, 12), PIL.Image.BICUBIC)))


def test_noise_pairs_are_reproducible_by_seed_and_each_image_gets_its_own_noise():
    clean = [photo(16, 16), photo(16, 16)]
    processor = IPTImageProcessor()
    first = processor(clean_images=clean, task="denoise_30", seed=3)
    np.testing.assert_array_equal(first["pixel_values"][0], add_gaussian_noise(chw(clean[0]), 30, 3))
    np.testing.assert_array_equal(first["labels"], np.stack([chw(image) for image in clean]).astype(np.float32))
    assert not np.array_equal(first["pixel_values"][0], first["pixel_values"][1])
    np.testing.assert_array_equal(
        processor(clean_images=clean, task="denoise_30", seed=3)["pixel_values"], first["pixel_values"]
    )
    with_generator = processor(clean_images=clean, task="denoise_30", generator=torch.Generator().manual_seed(3))
    np.testing.assert_array_equal(with_generator["pixel_values"], first["pixel_values"])
    other = processor(clean_images=clean, task="denoise_30", seed=4)
    assert not np.array_equal(other["pixel_values"], first["pixel_values"])


def test_rain_pairs_in_the_rgb_range():
    clean = photo(24, 20)
    batch = IPTImageProcessor(rgb_range=1)(clean_images=clean, task=parse_task("derain"), seed=0)
    np.testing.assert_allclose(batch["pixel_values"][0], add_rain_streaks(chw(clean), 0) / 255, rtol=1e-6)
    np.testing.assert_allclose(batch["labels"][0], chw(clean) / 255, rtol=1e-6)
    assert batch["pixel_values"].max() <= 1 and (batch["pixel_values"] >= batch["labels"]).all()


def test_clean_images_that_crop_to_one_size_batch_together():
    batch = IPTImageProcessor()(clean_images=[photo(49, 43), photo(50, 41, seed=1)], task="sr_x4", seed=0)
    assert batch["labels"].shape == (2, 3, 48, 40)


def test_pairs_the_user_brings_are_checked_against_the_tasks_scale():
    processor = IPTImageProcessor()
    batch = processor(images=photo(12, 10), labels=photo(24, 20, seed=1), task=parse_task("my_blur", scale=2))
    assert batch["pixel_values"].shape == (1, 3, 12, 10) and batch["labels"].shape == (1, 3, 24, 20)
    np.testing.assert_array_equal(batch["labels"][0], chw(photo(24, 20, seed=1)))
    same_size = processor(images=[photo(8, 8)] * 2, labels=[photo(8, 8, seed=1)] * 2)  # no task: one whole scale
    assert same_size["labels"].shape == (2, 3, 8, 8)
    with pytest.raises(ValueError, match=r"label 0 is 20x20 but image 0 is 12x10: task 'sr_x2' is x2, .* 24x20"):
        processor(images=photo(12, 10), labels=photo(20, 20), task="sr_x2")
    with pytest.raises(ValueError, match=r"label 0 \(25x20\) is no whole multiple of image 0 \(12x10\)"):
        processor(images=photo(12, 10), labels=photo(25, 20))
    with pytest.raises(ValueError, match=r"label 1 is 36x30 but image 1 is 12x10: the batch's first pair is x2"):
        processor(images=[photo(12, 10)] * 2, labels=[photo(24, 20), photo(36, 30)])
    with pytest.raises(ValueError, match="2 images and 1 labels"):
        processor(images=[photo(12, 10)] * 2, labels=photo(24, 20))


# ----------------------------------------------------------------------------------------------------------------
# saving and postprocessing


def test_saves_its_settings_only_and_reloads(tmp_path):
    processor = IPTImageProcessor(rgb_range=1, do_convert_rgb=False)
    processor.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert saved.pop("auto_map") == {"AutoImageProcessor": "xcv_ipt.IPTImageProcessor"}  # (hf_xcv.remote_code)
    assert saved == {"image_processor_type": "IPTImageProcessor", "rgb_range": 1, "do_convert_rgb": False}
    loaded = IPTImageProcessor.from_pretrained(tmp_path)
    assert type(loaded) is IPTImageProcessor and loaded.to_dict() == processor.to_dict()
    np.testing.assert_array_equal(loaded(photo(5, 6))["pixel_values"], processor(photo(5, 6))["pixel_values"])


@pytest.mark.parametrize("rgb_range", [255, 1, 2.5])
def test_postprocess_gives_back_the_original_8_bit_image_exactly(rgb_range):
    images = [photo(13, 11), photo(13, 11, seed=1)]
    processor = IPTImageProcessor(rgb_range=rgb_range)
    back = processor.postprocess(processor(images, return_tensors="pt")["pixel_values"])
    assert [image.mode for image in back] == ["RGB", "RGB"]
    for original, restored in zip(images, back):
        np.testing.assert_array_equal(np.asarray(restored), np.asarray(original))


def test_postprocess_clamps_rounds_crops_and_takes_a_model_output():
    processor = IPTImageProcessor()
    reconstruction = torch.tensor([-5.0, 0.4, 0.6, 254.5, 300.0, 17.0]).reshape(1, 1, 2, 3).expand(2, 3, 2, 3)
    (image, cropped) = processor.postprocess(
        SimpleNamespace(reconstruction=reconstruction), target_sizes=[(2, 3), (1, 2)]
    )
    np.testing.assert_array_equal(np.asarray(image)[..., 0], [[0, 0, 1], [254, 255, 17]])  # round half to even
    assert cropped.size == (2, 1)
    with pytest.raises(ValueError, match=r"target_sizes\[0\] = \(3, 3\)"):
        processor.postprocess(reconstruction, target_sizes=[(3, 3), (1, 1)])
    with pytest.raises(ValueError, match="1 target_sizes for 2 images"):
        processor.postprocess(reconstruction, target_sizes=[(1, 1)])
    with pytest.raises(ValueError, match=r"\(batch, 3, height, width\) reconstruction, got \(3, 2, 3\)"):
        processor.postprocess(reconstruction[0])


# ----------------------------------------------------------------------------------------------------------------
# bad inputs


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda p: p([photo(12, 12), photo(12, 13)]), r"different sizes \(12x12, 12x13\)"),
        (lambda p: p(clean_images=[photo(12, 12), photo(16, 12)], task="sr_x2"), r"different sizes \(12x12, 16x12\)"),
        (lambda p: p(clean_images=[photo(12, 12), photo(13, 12)], task="denoise_30"), "clean images of one batch"),
        (lambda p: p(clean_images=photo(3, 9), task="sr_x4"), "clean image 0 is 3x9, smaller than the x4 scale"),
        (lambda p: p(clean_images=photo(8, 8), task="deblur"), "custom task: .*bring the degraded images"),
        (lambda p: p(clean_images=photo(8, 8)), "clean_images need the task"),
        (lambda p: p(photo(8, 8), clean_images=photo(8, 8), task="derain"), "not both"),
        (
            lambda p: p(clean_images=photo(8, 8), task="derain", seed=0, generator=torch.Generator()),
            "seed or generator",
        ),
        (lambda p: p(clean_images=photo(8, 8), task="derain", seed=-1), "generator=-1"),
        (lambda p: p(photo(8, 8), seed=0), "seed and generator draw the degradation of clean_images"),
        (lambda p: p(photo(8, 8), task="denoise_30"), "taken as the degraded inputs"),
        (lambda p: p(), "pass images"),
        (lambda p: p(photo(8, 8), task="sr_x5"), "x3 and powers of 2"),
        (lambda p: p(photo(8, 8), task=3), "task must be a task name"),
        (lambda p: p(photo(8, 8, mode="L"), do_convert_rgb=False), "image 0 has 1 channels; IPT takes RGB"),
        (lambda p: p(np.full((8, 8, 3), 1.5)), r"image 0: .* values in \[1.5, 1.5\] is ambiguous"),
        (lambda p: p(PIL.Image.new("I", (8, 8), 70000)), "mode 'I' is read as 16-bit"),
        (lambda p: p(photo(8, 8), labels=PIL.Image.new("F", (8, 8), -0.5)), "label 0: a PIL image of mode 'F' must"),
        (lambda p: p(photo(8, 8), size=224), "unknown argument"),
        (lambda p: p(photo(8, 8), rgb_range=0), "rgb_range=0 must be a positive number"),
        (lambda p: p([]), "no images given"),
    ],
)
def test_bad_inputs_are_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call(IPTImageProcessor())


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"rgb_range": -1}, "rgb_range=-1 must be a positive number"),
        ({"rgb_range": True}, "rgb_range=True"),
        ({"rgb_range": "255"}, "rgb_range='255'"),
        ({"rgb_range": float("inf")}, "rgb_range=inf"),
        ({"size": {"height": 48, "width": 48}}, r"unknown setting\(s\) \['size'\]"),
    ],
)
def test_bad_settings_are_refused_by_name(settings, message):
    with pytest.raises(ValueError, match=message):
        IPTImageProcessor(**settings)
