"""IPT's synthetic degradations: bicubic downscaling (sizes, mod-crop, PIL's values), Gaussian noise (the official
draw, statistics, clamping), rain streaks, ``degrade`` per task kind, reproducibility by seed, and bad inputs."""

from __future__ import annotations

import numpy as np
import PIL.Image
import pytest
import torch

from hf_xcv.processing.restoration import (
    add_gaussian_noise,
    add_rain_streaks,
    bicubic_downscale,
    degrade,
    parse_task,
)
from hf_xcv.utils.generators import as_generator


def photo(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A random (3, H, W) uint8 image."""
    return np.random.default_rng(seed).integers(0, 256, (3, height, width), dtype=np.uint8)


def grey(height: int = 128, width: int = 128, value: int = 128) -> np.ndarray:
    return np.full((3, height, width), value, dtype=np.uint8)


def pil_bicubic(image: np.ndarray, height: int, width: int) -> np.ndarray:
    resized = PIL.Image.fromarray(np.moveaxis(image, 0, -1)).resize((width, height), PIL.Image.BICUBIC)
    return np.moveaxis(np.asarray(resized), -1, 0)


# ----------------------------------------------------------------------------------------------------------------
# super-resolution


@pytest.mark.parametrize("scale, cropped", [(2, (50, 42)), (3, (48, 42)), (4, (48, 40))])
def test_bicubic_downscale_mod_crops_bottom_right_and_resizes_with_pil(scale, cropped):
    hr = photo(50, 43)
    hr_cropped, lr = bicubic_downscale(hr, scale)
    assert hr_cropped.shape == (3, *cropped) and hr_cropped.dtype == np.uint8
    np.testing.assert_array_equal(hr_cropped, hr[:, : cropped[0], : cropped[1]])
    assert lr.shape == (3, cropped[0] // scale, cropped[1] // scale) and lr.dtype == np.uint8
    np.testing.assert_array_equal(lr, pil_bicubic(hr_cropped, cropped[0] // scale, cropped[1] // scale))


def test_bicubic_downscale_of_a_smallest_image_and_scale_one():
    hr_cropped, lr = bicubic_downscale(photo(4, 7), 4)
    assert hr_cropped.shape == (3, 4, 4) and lr.shape == (3, 1, 1)
    same, unchanged = bicubic_downscale(photo(5, 7), 1)
    np.testing.assert_array_equal(same, photo(5, 7))
    np.testing.assert_array_equal(unchanged, photo(5, 7))


# ----------------------------------------------------------------------------------------------------------------
# Gaussian noise


def test_noise_is_the_official_draw_clamped_and_not_rounded():
    """trainer.py: ``noise = torch.randn(hr.size()).mul_(sigma); (noise + hr).clamp(0, 255)`` after a manual seed."""
    hr = photo(20, 24)
    expected = torch.randn(hr.shape, generator=torch.Generator().manual_seed(7)).mul_(30.0) + torch.from_numpy(hr)
    expected = expected.clamp(0, 255).numpy()
    noisy = add_gaussian_noise(hr, 30, 7)
    assert noisy.dtype == np.float32 and noisy.shape == hr.shape
    np.testing.assert_array_equal(noisy, expected)
    assert noisy.min() == 0.0 and noisy.max() == 255.0  # clamped (a random image reaches both ends)
    assert not np.array_equal(noisy, np.round(noisy))  # not rounded to 8 bits


@pytest.mark.parametrize(
    "make",
    [
        lambda: 3,
        lambda: torch.Generator().manual_seed(3),
        lambda: np.random.default_rng(3),
    ],
    ids=["seed", "torch", "numpy"],
)
def test_noise_is_reproducible_bit_for_bit_and_differs_between_seeds(make):
    hr = photo(16, 16)
    first, second = add_gaussian_noise(hr, 25, make()), add_gaussian_noise(hr, 25, make())
    np.testing.assert_array_equal(first, second)
    other = add_gaussian_noise(hr, 25, 4 if isinstance(make(), int) else np.random.default_rng(4))
    assert not np.array_equal(first, other)


@pytest.mark.parametrize("sigma", [15, 30])
@pytest.mark.parametrize("source", [0, np.random.default_rng(0)], ids=["torch", "numpy"])
def test_noise_on_mid_grey_has_the_standard_deviation_sigma(sigma, source):
    noisy = add_gaussian_noise(grey(), sigma, source)  # 49152 values: the std's standard error is ~0.3 % of sigma
    assert abs(float(noisy.std()) - sigma) < 0.02 * sigma
    assert abs(float(noisy.mean()) - 128) < 0.5


def test_noise_of_sigma_zero_is_the_image_and_none_draws_fresh_noise():
    np.testing.assert_array_equal(add_gaussian_noise(grey(8, 8), 0, 0), grey(8, 8).astype(np.float32))
    assert not np.array_equal(add_gaussian_noise(grey(8, 8), 10), add_gaussian_noise(grey(8, 8), 10))


def test_a_generator_passed_on_gives_each_image_its_own_repeatable_draw():
    hr = grey(8, 8)
    generator = as_generator(5)
    first, second = add_gaussian_noise(hr, 20, generator), add_gaussian_noise(hr, 20, generator)
    assert not np.array_equal(first, second)
    again = as_generator(5)
    np.testing.assert_array_equal(add_gaussian_noise(hr, 20, again), first)
    np.testing.assert_array_equal(add_gaussian_noise(hr, 20, again), second)


# ----------------------------------------------------------------------------------------------------------------
# rain streaks


@pytest.mark.parametrize("make", [lambda: 11, lambda: np.random.default_rng(11)], ids=["seed", "numpy"])
def test_rain_is_reproducible_bit_for_bit_and_differs_between_seeds(make):
    image = photo(40, 48)
    first, second = add_rain_streaks(image, make()), add_rain_streaks(image, make())
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, add_rain_streaks(image, 12))


def test_rain_adds_grey_streaks_and_keeps_size_and_range():
    image = grey(64, 64, value=100)
    rainy = add_rain_streaks(image, 0)
    assert rainy.shape == image.shape and rainy.dtype == np.float32
    assert rainy.min() >= 0 and rainy.max() <= 255
    added = rainy - image
    assert (added >= 0).all() and 0.02 < (added[0] > 1).mean() < 0.8  # brighter, in sparse streaks
    np.testing.assert_array_equal(added[0], added[1])  # achromatic: the same layer on every channel
    np.testing.assert_array_equal(added[0], added[2])
    white = add_rain_streaks(grey(32, 32, value=255), 0)
    assert (white == 255).all()  # clipped


@pytest.mark.parametrize("angle, vertical", [(0.0, True), (90.0, False)])
def test_rain_streaks_run_along_their_angle(angle, vertical):
    layer = add_rain_streaks(grey(64, 64, 0), 0, density=0.003, length=9, angle=angle, softness=0, brightness=100)[0]
    wet = layer > 0
    down = (wet[1:] & wet[:-1]).sum()  # neighbours one above the other
    across = (wet[:, 1:] & wet[:, :-1]).sum()
    assert (down > 5 * across) if vertical else (across > 5 * down)
    assert set(np.unique(layer[wet]) % 100) == {0}  # unsoftened streaks carry whole brightnesses (overlaps add)


# ----------------------------------------------------------------------------------------------------------------
# degrade


def test_degrade_makes_each_tasks_pair():
    hr = photo(30, 31)
    lr, clean = degrade(hr, "sr_x2", 0)
    expected_clean, expected_lr = bicubic_downscale(hr, 2)
    np.testing.assert_array_equal(clean, expected_clean)
    assert lr.dtype == np.float32
    np.testing.assert_array_equal(lr, expected_lr.astype(np.float32))
    noisy, clean = degrade(hr, parse_task("denoise_50"), 3)
    np.testing.assert_array_equal(noisy, add_gaussian_noise(hr, 50, 3))
    assert clean is hr
    rainy, clean = degrade(hr, "derain", 3)
    np.testing.assert_array_equal(rainy, add_rain_streaks(hr, 3))
    assert clean is hr


def test_degrade_refuses_a_custom_task_and_unknown_names():
    with pytest.raises(ValueError, match="custom task: .*bring the degraded images"):
        degrade(photo(8, 8), "deblur", 0)
    with pytest.raises(ValueError, match="custom task"):
        degrade(photo(8, 8), parse_task("my_task", scale=2), 0)
    with pytest.raises(ValueError, match="is not allowed"):
        degrade(photo(8, 8), "Denoise-30", 0)
    with pytest.raises(ValueError, match="task must be a task name"):
        degrade(photo(8, 8), 4, 0)


# ----------------------------------------------------------------------------------------------------------------
# bad inputs


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: bicubic_downscale(np.zeros((8, 8, 3), np.uint8), 2), r"\(3, H, W\) uint8 array .*shape \(8, 8, 3\)"),
        (lambda: bicubic_downscale(np.zeros((3, 8, 8), np.float32), 2), "uint8 values 0-255, got dtype float32"),
        (lambda: bicubic_downscale([[0]], 2), "numpy array, got list"),
        (lambda: bicubic_downscale(np.zeros((3, 0, 8), np.uint8), 2), "shape"),
        (lambda: bicubic_downscale(photo(3, 9), 4), "is 3x9, smaller than the scale 4"),
        (lambda: bicubic_downscale(photo(8, 8), 0), "scale=0 must be a positive integer"),
        (lambda: bicubic_downscale(photo(8, 8), True), "scale=True"),
        (lambda: degrade(photo(2, 2), "sr_x4", 0), "smaller than the scale 4"),
        (lambda: add_gaussian_noise(photo(8, 8), -1, 0), "sigma=-1 must be a finite number >= 0"),
        (lambda: add_gaussian_noise(photo(8, 8), float("nan"), 0), "sigma=nan"),
        (lambda: add_gaussian_noise(photo(8, 8), 10, -3), "generator=-3"),
        (lambda: add_gaussian_noise(photo(8, 8), 10, 1.5), "generator=1.5"),
        (lambda: add_gaussian_noise(photo(8, 8).astype(np.int16), 10, 0), "dtype int16"),
        (lambda: add_rain_streaks(photo(8, 8), 0, density=2.0), r"density=2.0: values must lie in \[0.0, 1.0\]"),
        (lambda: add_rain_streaks(photo(8, 8), 0, length=0), "length=0"),
        (lambda: add_rain_streaks(photo(8, 8), 0, length=(5.5, 8)), "must be an integer"),
        (lambda: add_rain_streaks(photo(8, 8), 0, brightness=(200, 100)), "low <= high"),
        (lambda: add_rain_streaks(photo(8, 8), 0, angle=(0, 120)), "angle"),
        (lambda: add_rain_streaks(photo(8, 8), 0, softness=-1), "softness=-1"),
    ],
)
def test_bad_inputs_are_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()
