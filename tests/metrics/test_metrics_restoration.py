"""PSNR/SSIM of restored images: scikit-image's numbers under the SR convention (Y of BT.601, shaved border)."""

from __future__ import annotations

import math

import evaluate
import numpy as np
import PIL.Image
import pytest
import torch
from skimage import data as skdata
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from hf_xcv.metrics import PSNRSSIM, psnr, psnr_ssim, rgb_to_y

WANG = {"gaussian_weights": True, "sigma": 1.5, "use_sample_covariance": False, "data_range": 255}


def noisy_pair(seed: int = 0, size: tuple[int, int] = (64, 80)) -> tuple[np.ndarray, np.ndarray]:
    """A crop of a photo and a noisy copy of it: (prediction, reference)."""
    rng = np.random.default_rng(seed)
    reference = skdata.astronaut()[100 : 100 + size[0], 150 : 150 + size[1]]
    noise = rng.normal(0, 12, reference.shape)
    return np.clip(np.round(reference + noise), 0, 255).astype(np.uint8), reference


def bicubic_x4(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Research table's protocol: mod-crop 4, PIL bicubic down x4 then up x4 -> (upscaled, HR)."""
    image = getattr(skdata, name)()
    hr = image[: image.shape[0] // 4 * 4, : image.shape[1] // 4 * 4]
    height, width = hr.shape[:2]
    lr = PIL.Image.fromarray(hr).resize((width // 4, height // 4), PIL.Image.BICUBIC)
    return np.asarray(lr.resize((width, height), PIL.Image.BICUBIC)), hr


# ----------------------------------------------------------------------------------------------------------------
# the numbers


def test_y_is_matlab_rgb2ycbcr_by_hand():
    assert rgb_to_y(np.array([[[0, 0, 0], [255, 255, 255]]], np.uint8)).ravel().tolist() == pytest.approx([16, 235])
    pixels = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    y = rgb_to_y(pixels)
    assert y.dtype == np.float64 and y.shape == (5, 7)
    for (i, j), value in np.ndenumerate(y):
        r, g, b = (int(c) for c in pixels[i, j])
        assert value == pytest.approx(16 + (65.481 * r + 128.553 * g + 24.966 * b) / 255, abs=1e-12)
    assert not np.array_equal(y, np.round(y))  # kept as a float, as BasicSR


@pytest.mark.parametrize("shave", [None, 0, 7])
def test_y_channel_equals_scikit_image(shave):
    prediction, reference = noisy_pair()
    cut = 4 if shave is None else shave
    window = (slice(cut, 64 - cut), slice(cut, 80 - cut))
    y_pred, y_ref = rgb_to_y(prediction)[window], rgb_to_y(reference)[window]
    value_psnr, value_ssim = psnr_ssim(prediction, reference, scale=4, shave=shave)
    assert value_psnr == pytest.approx(peak_signal_noise_ratio(y_ref, y_pred, data_range=255), abs=1e-12)
    assert value_ssim == pytest.approx(structural_similarity(y_ref, y_pred, **WANG), abs=1e-12)
    assert psnr(prediction, reference, scale=4, shave=shave) == value_psnr


@pytest.mark.parametrize("shave", [None, 0])
def test_rgb_equals_scikit_image(shave):
    prediction, reference = noisy_pair(1)
    cut = 2 if shave is None else shave
    pred, ref = prediction[cut : 64 - cut, cut : 80 - cut], reference[cut : 64 - cut, cut : 80 - cut]
    value_psnr, value_ssim = psnr_ssim(prediction, reference, scale=2, channel="rgb", shave=shave)
    assert value_psnr == pytest.approx(peak_signal_noise_ratio(ref, pred, data_range=255), abs=1e-12)
    expected = structural_similarity(ref.astype(float), pred.astype(float), channel_axis=2, **WANG)
    assert value_ssim == pytest.approx(expected, abs=1e-12)


def test_grayscale_is_scored_on_its_own_values():
    prediction, reference = (image[:, :, 1] for image in noisy_pair(2))
    ref, pred = reference[4:-4, 4:-4].astype(float), prediction[4:-4, 4:-4].astype(float)
    expected = (peak_signal_noise_ratio(ref, pred, data_range=255), structural_similarity(ref, pred, **WANG))
    for channel in ("y", "rgb"):
        assert psnr_ssim(prediction, reference, channel=channel) == pytest.approx(expected, abs=1e-12)
    mixed = psnr_ssim(PIL.Image.fromarray(prediction), reference[:, :, None])  # PIL mode L and (H, W, 1)
    assert mixed == pytest.approx(expected, abs=1e-12)


# fmt: off
@pytest.mark.parametrize(("name", "y", "rgb", "y_no_shave"), [
    ("astronaut", (26.84, 0.8427), 25.34, 26.88),
    ("chelsea", (31.47, 0.8062), 30.05, 31.59),
    ("coffee", (27.29, 0.7648), 25.80, 27.29),
])  # fmt: on
def test_reproduces_the_bicubic_baseline_table(name, y, rgb, y_no_shave):
    upscaled, hr = bicubic_x4(name)
    value_psnr, value_ssim = psnr_ssim(upscaled, hr)
    assert (round(value_psnr, 2), round(value_ssim, 4)) == y
    assert round(psnr(upscaled, hr, channel="rgb"), 2) == rgb
    assert round(psnr(upscaled, hr, shave=0), 2) == y_no_shave


def test_inputs_may_be_pil_tensors_or_other_integer_arrays():
    prediction, reference = noisy_pair()
    expected = psnr_ssim(prediction, reference)
    assert psnr_ssim(PIL.Image.fromarray(prediction), PIL.Image.fromarray(reference)) == expected
    assert psnr_ssim(torch.from_numpy(prediction), reference.astype(np.int64)) == expected


def test_identical_images_have_infinite_psnr_and_ssim_one():
    _, reference = noisy_pair()
    value_psnr, value_ssim = psnr_ssim(reference, reference.copy())
    assert value_psnr == math.inf and value_ssim == pytest.approx(1.0)


# ----------------------------------------------------------------------------------------------------------------
# the metric


def test_metric_of_images_of_different_sizes_is_the_mean_of_each():
    pairs = [noisy_pair(0), noisy_pair(1, (40, 52)), tuple(image[:, :, 0] for image in noisy_pair(2, (30, 30)))]
    expected = [psnr_ssim(prediction, reference) for prediction, reference in pairs]
    result = PSNRSSIM().compute(
        predictions=[prediction for prediction, _ in pairs], references=[reference for _, reference in pairs],
        per_image=True,
    )  # fmt: skip
    assert result["psnr_per_image"] == [value for value, _ in expected]
    assert result["ssim_per_image"] == [value for _, value in expected]
    assert result["psnr"] == pytest.approx(np.mean([value for value, _ in expected]), abs=1e-12)
    assert result["ssim"] == pytest.approx(np.mean([value for _, value in expected]), abs=1e-12)
    assert set(PSNRSSIM().compute(predictions=[pairs[0][0]], references=[pairs[0][1]])) == {"psnr", "ssim"}


def test_options_in_compute_or_constructor():
    prediction, reference = noisy_pair()
    expected = psnr_ssim(prediction, reference, scale=2, channel="rgb", shave=1)
    result = PSNRSSIM().compute(predictions=[prediction], references=[reference], scale=2, channel="rgb", shave=1)
    assert (result["psnr"], result["ssim"]) == pytest.approx(expected, abs=1e-12)
    metric = PSNRSSIM(scale=2, channel="rgb", shave=1)
    result = metric.compute(predictions=[prediction], references=[reference])
    assert (result["psnr"], result["ssim"]) == pytest.approx(expected, abs=1e-12)


def test_batches_and_single_images_accumulate():
    pairs = [noisy_pair(seed) for seed in range(3)]
    metric = PSNRSSIM()
    metric.add_batch(predictions=[pairs[0][0], pairs[1][0]], references=[pairs[0][1], pairs[1][1]])
    metric.add(prediction=pairs[2][0], reference=pairs[2][1])
    result = metric.compute(per_image=True)
    assert result["psnr_per_image"] == [psnr_ssim(*pair)[0] for pair in pairs]
    batch = PSNRSSIM().compute(predictions=np.stack([p for p, _ in pairs]), references=[r for _, r in pairs])
    assert batch["psnr"] == pytest.approx(result["psnr"], abs=1e-12)


def test_evaluate_combine():
    prediction, reference = noisy_pair()
    combined = evaluate.combine([PSNRSSIM(), PSNRSSIM(channel="rgb")], force_prefix=True)
    result = combined.compute(predictions=[prediction], references=[reference])
    values = sorted(result.values())
    expected = sorted([*psnr_ssim(prediction, reference), *psnr_ssim(prediction, reference, channel="rgb")])
    assert values == pytest.approx(expected, abs=1e-12)


def test_metric_mean_is_infinite_when_an_image_is_exact():
    prediction, reference = noisy_pair()
    result = PSNRSSIM().compute(predictions=[prediction, reference], references=[reference, reference], per_image=True)
    assert result["psnr"] == math.inf and result["psnr_per_image"][1] == math.inf
    assert result["ssim_per_image"][1] == pytest.approx(1.0)


# ----------------------------------------------------------------------------------------------------------------
# bad input

_GOOD = noisy_pair()[1]


# fmt: off
@pytest.mark.parametrize(("prediction", "reference", "message"), [
    (_GOOD[:, :-4], _GOOD, r"prediction has shape \(64, 76, 3\) but its reference has shape \(64, 80, 3\)"),
    (_GOOD.transpose(2, 0, 1), _GOOD, r"must be \(H, W, 3\) RGB or \(H, W\) grayscale.*channels first"),
    (np.dstack([_GOOD, _GOOD[:, :, :1]]), _GOOD, r"shape \(64, 80, 4\).*RGBA"),
    (PIL.Image.fromarray(_GOOD).convert("RGBA"), _GOOD, r"mode 'RGBA': convert it to 'RGB'"),
    (_GOOD / 255.0, _GOOD, r"dtype float64: the metric takes uint8 images"),
    (_GOOD > 0, _GOOD, r"dtype bool"),
    (_GOOD.astype(np.int64) * 2, _GOOD, r"values in 0\.\.510, outside 0\.\.255"),
    (_GOOD, _GOOD[:0], r"the reference is empty"),
    (_GOOD.tolist(), _GOOD, r"must be a numpy array or a PIL image, got list"),
    (_GOOD[:18, :40], _GOOD[:18, :40], r"size 18x40 is too small: .* at least 19 pixels a side"),
])  # fmt: on
def test_bad_images(prediction, reference, message):
    with pytest.raises(ValueError, match=message):
        psnr_ssim(prediction, reference)


# fmt: off
@pytest.mark.parametrize(("options", "message"), [
    ({"channel": "ycbcr"}, r"channel must be one of \['y', 'rgb'\], got 'ycbcr'"),
    ({"scale": 0}, r"scale must be a positive integer, got 0"),
    ({"scale": 2.0}, r"scale must be a positive integer, got 2.0"),
    ({"shave": -1}, r"shave must be a non-negative integer or None"),
])  # fmt: on
def test_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        psnr_ssim(_GOOD, _GOOD, **options)
    with pytest.raises(ValueError, match=message):
        PSNRSSIM(**options)
    with pytest.raises(ValueError, match=message):
        PSNRSSIM().compute(predictions=[_GOOD], references=[_GOOD], **options)


def test_psnr_alone_needs_only_a_pixel_after_the_shave():
    assert psnr(_GOOD[:9, :9], _GOOD[:9, :9]) == math.inf
    with pytest.raises(ValueError, match=r"size 8x9 is too small: .* at least one pixel"):
        psnr(_GOOD[:8, :9], _GOOD[:8, :9])


def test_bad_metric_calls():
    metric = PSNRSSIM()
    with pytest.raises(ValueError, match=r"of no images is undefined"):
        metric.compute(predictions=[], references=[])
    with pytest.raises(ValueError, match=r"of no images is undefined"):
        metric.compute()
    with pytest.raises(ValueError, match=r"got 2 predictions but 1 references"):
        metric.add_batch(predictions=[_GOOD, _GOOD], references=[_GOOD])
    with pytest.raises(ValueError, match=r"predictions must be a list of images, got ndarray"):
        metric.add_batch(predictions=_GOOD, references=[_GOOD])
    with pytest.raises(ValueError, match=r"give both predictions and references"):
        metric.compute(predictions=[_GOOD])
    with pytest.raises(ValueError, match=r"unknown arguments \['sigma'\]"):
        metric.compute(predictions=[_GOOD], references=[_GOOD], sigma=2)
    with pytest.raises(ValueError, match=r"the prediction 1 has shape \(64, 76, 3\) but its reference has shape"):
        metric.add_batch(predictions=[_GOOD, _GOOD[:, 4:]], references=[_GOOD, _GOOD])


def test_a_bad_image_of_a_later_batch_is_named_by_its_overall_index():
    metric = PSNRSSIM()
    metric.add_batch(predictions=[_GOOD, _GOOD], references=[_GOOD, _GOOD])
    with pytest.raises(ValueError, match=r"the prediction 1 of this batch \(3 overall\) has dtype float32"):
        metric.add_batch(predictions=[_GOOD, _GOOD.astype(np.float32)], references=[_GOOD, _GOOD])
    assert metric.compute()["psnr"] == math.inf  # the rejected batch left what was added


def test_a_too_small_image_is_named_at_compute():
    small = _GOOD[:20, :20]
    metric = PSNRSSIM()
    with pytest.raises(ValueError, match=r"the image 1 of size 20x20 is too small: after shaving 5 pixels"):
        metric.compute(predictions=[_GOOD, small], references=[_GOOD, small], shave=5)
