"""The recipe's train-time transforms (hf_xcv.data.augment): RandAugment's operations and draws, the Inception crop,
random erasing, the batch transforms; seeded reproducibility; classification only."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, Features, Image, Sequence, Value
from PIL import Image as PILImage
from PIL import ImageEnhance, ImageOps

from hf_xcv.data import (
    ImageClassificationCollator,
    ImageClassificationEvalTransform,
    ImageClassificationTrainTransform,
    RandAugment,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    augment,
    image_classification_eval_transform,
    image_classification_train_transform,
)
from hf_xcv.data.augment import OPS, RAND_INCREASING_OPS, RAND_OPS, sample_generator
from hf_xcv.utils.errors import MissingColumnError, UsageError

FILL = (124, 116, 104)


def photo(height: int = 48, width: int = 64, seed: int = 0, mode: str = "RGB") -> PILImage.Image:
    """A smooth image with structure (gradients and a square), not flat: every operation changes it visibly."""
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) % 256], axis=-1)
    rgb[height // 4 : height // 2, width // 4 : width // 2] = (250, 20, 90)
    rng = np.random.default_rng(seed)
    rgb = np.clip(rgb + rng.integers(-8, 9, rgb.shape), 0, 255).astype(np.uint8)
    return PILImage.fromarray(rgb).convert(mode)


def pixels(image: PILImage.Image) -> np.ndarray:
    return np.asarray(image)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- RandAugment's operations ---------------------------------------------------------------------------------------

IDENTITY_AT_ZERO = {
    "Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel", "SolarizeIncreasing", "SolarizeAdd",
    "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing",
}  # fmt: skip
NOT_IDENTITY_AT_ZERO = {  # what each of the others is at magnitude 0 (timm's mappings)
    "AutoContrast": ImageOps.autocontrast,
    "Equalize": ImageOps.equalize,
    "Invert": ImageOps.invert,
    "PosterizeIncreasing": lambda image: ImageOps.posterize(image, 4),  # keeps 4 bits at m = 0, as timm
    "Posterize": lambda image: PILImage.new(image.mode, image.size),  # 0 bits: black
    "Solarize": lambda image: ImageOps.solarize(image, 0),  # every value inverted
    "Color": lambda image: ImageEnhance.Color(image).enhance(0.1),
    "Contrast": lambda image: ImageEnhance.Contrast(image).enhance(0.1),
    "Brightness": lambda image: ImageEnhance.Brightness(image).enhance(0.1),
    "Sharpness": lambda image: ImageEnhance.Sharpness(image).enhance(0.1),
}


def test_every_operation_is_classified_at_magnitude_zero():
    assert IDENTITY_AT_ZERO | set(NOT_IDENTITY_AT_ZERO) == set(OPS)
    assert not IDENTITY_AT_ZERO & set(NOT_IDENTITY_AT_ZERO)
    assert set(RAND_OPS) | set(RAND_INCREASING_OPS) == set(OPS)


@pytest.mark.parametrize("name", sorted(IDENTITY_AT_ZERO))
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_operation_at_magnitude_zero_is_the_identity(name, mode):
    image = photo(mode=mode)
    for sign in (1, -1):
        for interpolation in ("bicubic", "bilinear"):
            out = OPS[name](image, 0.0, sign, FILL, interpolation)
            assert out is not image and out.mode == image.mode
            np.testing.assert_array_equal(pixels(out), pixels(image), err_msg=f"{name} sign {sign} {interpolation}")
        if not (name == "ColorIncreasing" and mode == "L"):  # saturation leaves gray as it is
            assert pixels(OPS[name](image, 5.0, sign, FILL)).tolist() != pixels(image).tolist()  # it does act


@pytest.mark.parametrize("name", sorted(NOT_IDENTITY_AT_ZERO))
def test_operation_at_magnitude_zero_is_the_pil_operation(name):
    image = photo()
    expected = NOT_IDENTITY_AT_ZERO[name](image)
    np.testing.assert_array_equal(pixels(OPS[name](image, 0.0)), pixels(expected))
    assert pixels(expected).tolist() != pixels(image).tolist()


def test_operations_at_full_magnitude_follow_timms_mappings():
    image = photo()
    bicubic = PILImage.Resampling.BICUBIC

    def same(a, b):
        np.testing.assert_array_equal(pixels(a), pixels(b))

    same(augment.rotate(image, 10.0, -1), image.rotate(-30.0, resample=bicubic, fillcolor=FILL))
    same(augment.rotate(image, 9.0), image.rotate(27.0, resample=bicubic, fillcolor=FILL))
    shear = image.transform(image.size, PILImage.Transform.AFFINE, (1, 0.3, 0, 0, 1, 0), bicubic, fillcolor=FILL)
    same(augment.shear_x(image, 10.0), shear)
    shift = image.transform(image.size, PILImage.Transform.AFFINE, (1, 0, 0, 0, 1, -0.45 * 48), bicubic, fillcolor=FILL)
    same(augment.translate_y_rel(image, 10.0, -1), shift)
    same(augment.posterize_increasing(image, 10.0), PILImage.new("RGB", image.size))  # 0 bits
    same(augment.posterize_increasing(image, 9.0), ImageOps.posterize(image, 1))
    same(augment.solarize_increasing(image, 10.0), ImageOps.invert(image))
    same(augment.solarize_increasing(image, 9.0), ImageOps.solarize(image, 26))
    same(augment.color_increasing(image, 10.0, -1), ImageEnhance.Color(image).enhance(0.1))
    same(augment.contrast_increasing(image, 9.0, 1), ImageEnhance.Contrast(image).enhance(1.81))
    added = np.asarray(image).astype(int)
    added = np.where(added < 128, np.minimum(added + 99, 255), added)
    np.testing.assert_array_equal(pixels(augment.solarize_add(image, 9.0)), added)
    corner = pixels(augment.translate_x_rel(image, 10.0))[:, -1]  # content moved left: the fill on the right
    assert (corner == FILL).all()
    gray = augment.rotate(photo(mode="L"), 10.0)  # the fill of a gray image: its first value
    assert pixels(gray)[0, 0] == FILL[0]


def test_operations_leave_their_input_alone():
    image = photo()
    before = pixels(image).copy()
    for name, op in OPS.items():
        op(image, 7.0, -1, FILL)
        np.testing.assert_array_equal(pixels(image), before, err_msg=name)


# -- RandAugment's draws --------------------------------------------------------------------------------------------


def test_the_recipe_config_is_timms_rand_m9_mstd05_inc1():
    ra = RandAugment.from_config("rand-m9-mstd0.5-inc1")
    assert (ra.num_ops, ra.magnitude, ra.magnitude_std, ra.magnitude_max, ra.prob) == (2, 9.0, 0.5, 10.0, 0.5)
    assert [op.name for op in ra.ops] == list(RAND_INCREASING_OPS) == [op.name for op in RandAugment().ops]
    assert ra.fill == FILL and ra.interpolation == PILImage.Resampling.BICUBIC
    other = RandAugment.from_config("rand-m7-n3-p0.3-mstd101-mmax12")
    assert (other.num_ops, other.magnitude, other.prob, other.magnitude_max) == (3, 7.0, 0.3, 12.0)
    assert other.magnitude_std == math.inf and [op.name for op in other.ops] == list(RAND_OPS)
    for bad in ("rand-m9-tweights", "rand-x3", "auto-m9", "rand-m11"):
        with pytest.raises(UsageError):
            RandAugment.from_config(bad)


def test_magnitude_noise_has_the_configured_mean_and_std_and_is_clipped():
    g = gen(0)
    draws = np.array([RandAugment(magnitude=5.0, magnitude_std=0.5).sample_magnitude(g) for _ in range(20000)])
    assert abs(draws.mean() - 5.0) < 0.02 and abs(draws.std() - 0.5) < 0.02
    near_top = np.array([RandAugment(magnitude=9.0, magnitude_std=0.5).sample_magnitude(g) for _ in range(5000)])
    assert near_top.max() == 10.0 and 0.01 < (near_top == 10.0).mean() < 0.05  # P(N(9, 0.5) > 10) = 2.3%
    assert near_top.min() >= 0.0
    assert RandAugment(magnitude=9.0, magnitude_std=0.0).sample_magnitude(g) == 9.0
    state = g.get_state()
    RandAugment(magnitude_std=0.0).sample_magnitude(g)
    assert torch.equal(g.get_state(), state)  # no noise, no draw
    uniform = np.array([RandAugment(magnitude=8.0, magnitude_std=math.inf).sample_magnitude(g) for _ in range(5000)])
    assert 0.0 <= uniform.min() < 0.1 and 7.9 < uniform.max() <= 8.0 and abs(uniform.mean() - 4.0) < 0.1


def test_each_chosen_operation_applies_with_probability_prob():
    image = photo(8, 8)
    ra = RandAugment(num_ops=1, ops=["Invert"], prob=0.5)
    g = gen(1)
    inverted = [pixels(ra(image, g)).tolist() != pixels(image).tolist() for _ in range(4000)]
    assert abs(np.mean(inverted) - 0.5) < 0.03
    np.testing.assert_array_equal(
        pixels(RandAugment(num_ops=1, ops=["Invert"], prob=1.0)(image, g)), pixels(ImageOps.invert(image))
    )
    never = RandAugment(num_ops=3, prob=0.0)
    np.testing.assert_array_equal(pixels(never(image, g)), pixels(image))
    assert never(image, g) is not image


def test_operations_are_chosen_uniformly_with_replacement():
    ra = RandAugment(num_ops=2, prob=1.0, magnitude_std=0.0)
    seen = []

    def recorder(name):
        def record(image, *args, **kwargs):
            seen.append(name)
            return image.copy()

        return record

    ra.ops = [augment.AugmentOp(op.name, recorder(op.name), uses_magnitude=False) for op in ra.ops]
    g = gen(2)
    pairs = []
    for _ in range(3000):
        seen.clear()
        ra(photo(4, 4), g)
        pairs.append(tuple(seen))
    counts = np.bincount([RAND_INCREASING_OPS.index(name) for pair in pairs for name in pair], minlength=15)
    assert counts.sum() == 6000 and np.abs(counts / 6000 - 1 / 15).max() < 0.015
    assert sum(a == b for a, b in pairs) > 100  # with replacement: the same operation twice ~ 1/15 of the time


def test_rand_augment_same_seed_same_image_other_seeds_differ():
    image = photo()
    ra = RandAugment()
    first = pixels(ra(image, gen(7)))
    np.testing.assert_array_equal(pixels(ra(image, gen(7))), first)
    torch.manual_seed(7)
    from_global = pixels(ra(image))
    torch.manual_seed(7)
    np.testing.assert_array_equal(pixels(ra(image)), from_global)  # the global RNG, reseeded: the same too
    strong = RandAugment(prob=1.0)
    outputs = {pixels(strong(image, gen(seed))).tobytes() for seed in range(8)}
    assert len(outputs) == 8


def test_rand_augment_takes_one_rgb_or_gray_pil_image_only():
    ra = RandAugment()
    assert ra(photo(mode="L"), gen(0)).mode == "L"
    with pytest.raises(UsageError, match="classification only.*boxes"):
        ra({"image": photo(), "boxes": [[0, 0, 4, 4]]}, gen(0))
    with pytest.raises(UsageError, match="classification only"):
        ra((photo(), {"boxes": [[0, 0, 4, 4]]}), gen(0))
    with pytest.raises(UsageError, match="mode 'RGBA'"):
        ra(photo(mode="RGBA"), gen(0))
    with pytest.raises(UsageError, match="PIL image, got ndarray"):
        ra(pixels(photo()), gen(0))
    with pytest.raises(UsageError, match="torch.Generator"):
        ra(photo(), np.random.default_rng(0))
    for bad in ({"ops": ["Cutout"]}, {"magnitude": 11}, {"prob": 1.5}, {"num_ops": -1}, {"magnitude_std": -1}):
        with pytest.raises(UsageError):
            RandAugment(**bad)


# -- the crop and the flip ------------------------------------------------------------------------------------------


def test_random_resized_crop_stays_within_scale_and_ratio():
    crop = RandomResizedCrop(32, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
    g = gen(3)
    width, height = 400, 300
    areas, aspects = [], []
    for _ in range(3000):
        top, left, h, w = crop.get_params(width, height, g)
        assert 0 <= top and top + h <= height and 0 <= left and left + w <= width
        areas.append(h * w / (width * height))
        aspects.append(w / h)
    areas, aspects = np.array(areas), np.array(aspects)
    assert areas.min() >= 0.08 * 0.97 and areas.max() <= 1.0
    assert aspects.min() >= 0.75 * 0.97 and aspects.max() <= 4 / 3 * 1.03  # rounding to whole pixels
    assert areas.min() < 0.1 and areas.max() > 0.7  # the whole range is used
    assert aspects.min() < 0.78 and aspects.max() > 1.28
    out = crop(photo(300, 400), g)
    assert out.size == (32, 32) and out.mode == "RGB"
    assert RandomResizedCrop((20, 30))(photo(), g).size == (30, 20)  # size is (height, width)


def test_random_resized_crop_falls_back_to_the_centre_crop():
    crop = RandomResizedCrop(16, scale=(2.0, 3.0))  # no crop fits: the centre crop within the ratio
    assert crop.get_params(400, 100, gen(0)) == (0, 133, 100, 133)  # too wide: height kept, width = 100 * 4/3
    assert crop.get_params(100, 400, gen(0)) == (133, 0, 133, 100)  # too tall: width kept, height = 100 / (3/4)
    assert crop.get_params(120, 100, gen(0)) == (0, 0, 100, 120)  # aspect within the ratio: the whole image


def test_random_resized_crop_and_flip_are_seeded():
    image = photo(60, 80)
    crop = RandomResizedCrop(24)
    np.testing.assert_array_equal(pixels(crop(image, gen(5))), pixels(crop(image, gen(5))))
    assert len({pixels(crop(image, gen(seed))).tobytes() for seed in range(6)}) == 6
    g = gen(0)
    np.testing.assert_array_equal(pixels(RandomHorizontalFlip(1.0)(image, g)), pixels(image)[:, ::-1])
    np.testing.assert_array_equal(pixels(RandomHorizontalFlip(0.0)(image, g)), pixels(image))
    coin = RandomHorizontalFlip(0.5)
    flipped = [pixels(coin(image, g))[0, 0].tolist() != pixels(image)[0, 0].tolist() for _ in range(2000)]
    assert abs(np.mean(flipped) - 0.5) < 0.04
    with pytest.raises(UsageError, match="scale"):
        RandomResizedCrop(24, scale=(0.5, 0.1))
    with pytest.raises(UsageError, match="classification only"):
        crop({"image": image, "objects": {"bbox": []}})


# -- random erasing -------------------------------------------------------------------------------------------------


def test_random_erasing_box_area_and_values():
    erase = RandomErasing(probability=1.0, mode="pixel")
    g = gen(4)
    image = torch.full((3, 64, 80), 7.0)
    erased_values = []
    for _ in range(200):
        out = erase(image, g)
        changed = (out != 7.0).any(0)  # (H, W): the erased pixels (normal values are never exactly 7)
        rows, cols = changed.any(1).nonzero().flatten(), changed.any(0).nonzero().flatten()
        h, w = int(rows[-1] - rows[0] + 1), int(cols[-1] - cols[0] + 1)
        assert changed.sum() == h * w  # one rectangle, erased whole
        assert 0.02 * 0.85 <= h * w / (64 * 80) <= 1 / 3 * 1.05  # [min_area, max_area], up to whole pixels
        assert 0.3 * 0.8 <= h / w <= 1 / 0.3 * 1.2
        erased_values.append(out[:, changed])
    values = torch.cat(erased_values, dim=1)
    assert abs(values.mean()) < 0.01 and abs(values.std() - 1.0) < 0.01  # per-pixel standard normal
    assert not torch.equal(values[0], values[1])  # per channel too
    assert torch.equal(image, torch.full((3, 64, 80), 7.0))  # the input is left alone


def test_random_erasing_probability_and_batches():
    g = gen(5)
    erase = RandomErasing(probability=0.25)
    image = torch.zeros(3, 16, 16)
    erased = [not torch.equal(erase(image, g), image) for _ in range(4000)]
    assert abs(np.mean(erased) - 0.25) < 0.025
    never = RandomErasing(probability=0.0)
    batch = torch.randn(8, 3, 16, 16, generator=g)
    assert torch.equal(never(batch, g), batch)
    assert all(never.regions(16, 16, g) == [] for _ in range(100))
    always = RandomErasing(probability=1.0)(batch, gen(6))
    masks = always != batch  # (B, C, H, W)
    assert all(masks[i].any() for i in range(8))
    assert len({masks[i].nonzero().tolist().__repr__() for i in range(8)}) > 1  # each image its own box
    assert torch.equal(RandomErasing(probability=1.0)(batch, gen(6)), always)


def test_random_erasing_modes_and_counts():
    g = gen(7)
    image = torch.full((3, 32, 32), 5.0)
    const = RandomErasing(probability=1.0, mode="const")(image, g)
    assert ((const == 0.0) | (const == 5.0)).all() and (const == 0.0).any()
    rand = RandomErasing(probability=1.0, mode="rand")(image, g)
    for channel in rand:
        assert len(channel[channel != 5.0].unique()) == 1  # one value per channel
    erase = RandomErasing(probability=1.0, min_count=1, max_count=3)
    counts = [len(erase.regions(64, 64, g)) for _ in range(600)]
    assert set(counts) == {1, 2, 3}
    half = torch.full((3, 32, 32), 5.0, dtype=torch.float16)
    assert RandomErasing(probability=1.0)(half, g).dtype == torch.float16
    with pytest.raises(UsageError, match="float"):
        RandomErasing()(torch.zeros(3, 8, 8, dtype=torch.uint8))
    with pytest.raises(UsageError, match="classification only"):
        RandomErasing()({"pixel_values": image, "boxes": torch.zeros(1, 4)})
    with pytest.raises(UsageError, match="mode"):
        RandomErasing(mode="noise")
    with pytest.raises(UsageError, match="min_area"):
        RandomErasing(min_area=0.5, max_area=0.1)


# -- the batch transforms -------------------------------------------------------------------------------------------


def classification_dataset(n: int = 6) -> Dataset:
    features = Features({"image": Image(), "label": ClassLabel(names=["a", "b"])})
    images = [photo(40 + 4 * i, 56, seed=i) for i in range(n)]
    return Dataset.from_dict({"image": images, "label": [i % 2 for i in range(n)]}, features=features)


def test_train_transform_as_a_datasets_set_transform():
    data = classification_dataset()
    transform = ImageClassificationTrainTransform(32, seed=0)
    data.set_transform(transform)
    rows = [data[i] for i in range(len(data))]
    assert set(rows[0]) == {"pixel_values", "labels"}
    assert rows[0]["pixel_values"].shape == (3, 32, 32) and rows[0]["pixel_values"].dtype == torch.float32
    assert [row["labels"] for row in rows] == [0, 1, 0, 1, 0, 1]
    batch = ImageClassificationCollator()(rows)
    assert batch["pixel_values"].shape == (6, 3, 32, 32) and batch["labels"].tolist() == [0, 1, 0, 1, 0, 1]
    again = ImageClassificationTrainTransform(32, seed=0)
    data.set_transform(again)
    assert all(torch.equal(data[i]["pixel_values"], row["pixel_values"]) for i, row in enumerate(rows))
    copy = pickle.loads(pickle.dumps(again))  # what a DataLoader worker gets: the stream goes on from the same state
    raw = classification_dataset()[:2]
    assert all(torch.equal(a, b) for a, b in zip(copy(raw)["pixel_values"], again(raw)["pixel_values"]))


def test_train_transform_is_the_composition_of_its_parts():
    transform = ImageClassificationTrainTransform(32)
    image = photo(50, 70)
    g = gen(9)
    image_ = transform.flip(transform.crop(image, g), g)
    image_ = transform.rand_augment(image_, g)
    expected = transform.erasing(augment.to_normalized_tensor(image_, transform.mean, transform.std), g)
    assert torch.equal(transform.transform_image(image, gen(9)), expected)
    plain = ImageClassificationTrainTransform(
        32,
        auto_augment=None,
        re_prob=0.0,
        hflip=0.0,
        scale=(1.0, 1.0),
        ratio=(1.4, 1.4),
        mean=(0.0,),
        std=(1.0,),
        num_channels=3,
    )  # the whole image, resized: one mean value for every channel
    resized = image.resize((32, 32), PILImage.Resampling.BICUBIC)
    np.testing.assert_allclose(plain.transform_image(image, gen(0)).permute(1, 2, 0).numpy(), pixels(resized) / 255)


def test_train_transform_seeds_each_sample_from_its_index_and_epoch():
    data = classification_dataset()
    data = data.add_column("index", list(range(len(data))))
    transform = ImageClassificationTrainTransform(32, seed=1, index_column="index")
    full = transform(data[:6])["pixel_values"]
    parts = transform(data[3:6])["pixel_values"] + transform(data[0:3])["pixel_values"]  # other batches, order
    assert all(torch.equal(a, b) for a, b in zip(full, parts[3:] + parts[:3]))
    torch.manual_seed(123)  # the global RNG plays no part
    assert all(torch.equal(a, b) for a, b in zip(full, transform(data[:6])["pixel_values"]))
    transform.set_epoch(1)
    assert not any(torch.equal(a, b) for a, b in zip(full, transform(data[:6])["pixel_values"]))
    other_seed = ImageClassificationTrainTransform(32, seed=2, index_column="index")(data[:6])["pixel_values"]
    assert not any(torch.equal(a, b) for a, b in zip(full, other_seed))
    assert torch.equal(sample_generator(1, 0, np.int64(3)).get_state(), sample_generator(1, 0, 3).get_state())
    with pytest.raises(MissingColumnError, match="add_column"):
        transform(classification_dataset()[:2])
    with pytest.raises(UsageError, match="seed"):
        ImageClassificationTrainTransform(32, index_column="index")


def test_train_transform_without_a_seed_uses_the_global_rng():
    batch = classification_dataset()[:3]
    transform = ImageClassificationTrainTransform(32)
    torch.manual_seed(0)
    first = transform(batch)["pixel_values"]
    torch.manual_seed(0)
    assert all(torch.equal(a, b) for a, b in zip(first, transform(batch)["pixel_values"]))
    torch.manual_seed(1)
    assert not all(torch.equal(a, b) for a, b in zip(first, transform(batch)["pixel_values"]))


def test_train_transform_refuses_a_detection_dataset_by_name():
    features = Features(
        {
            "image": Image(),
            "objects": {"bbox": Sequence(Sequence(Value("float32"), length=4)), "category": Sequence(Value("int64"))},
        }
    )
    data = Dataset.from_dict(
        {"image": [photo()], "objects": [{"bbox": [[1.0, 2.0, 10.0, 12.0]], "category": [0]}]}, features=features
    )
    data.set_transform(ImageClassificationTrainTransform(32, seed=0))
    with pytest.raises(UsageError, match=r"classification only.*\['objects'\]"):
        data[0]
    transform = ImageClassificationTrainTransform(32, seed=0)
    with pytest.raises(UsageError, match="classification only"):
        transform({"image": [{"image": photo(), "boxes": [[0, 0, 2, 2]]}]})
    with pytest.raises(MissingColumnError, match="'img'"):
        ImageClassificationTrainTransform(32, image_column="img")({"image": [photo()]})


def test_train_transform_converts_images_to_the_models_channels():
    transform = ImageClassificationTrainTransform(16, seed=0)
    rgba = photo(mode="RGBA")
    gray = photo(mode="L")
    out = transform({"image": [rgba, gray, pixels(photo())]})["pixel_values"]
    assert [tuple(p.shape) for p in out] == [(3, 16, 16)] * 3
    one = ImageClassificationTrainTransform(16, mean=(0.5,), std=(0.5,), seed=0)
    assert one({"image": [photo()]})["pixel_values"][0].shape == (1, 16, 16)
    assert one.rand_augment.fill == (128,)
    with pytest.raises(UsageError, match="num_channels"):
        ImageClassificationTrainTransform(16, num_channels=1)  # three means for one channel
    with pytest.raises(UsageError, match="PIL images or uint8 arrays"):
        transform({"image": ["path/to/image.png"]})


def test_eval_transform_is_resize_then_centre_crop():
    image = photo(300, 400)
    evaluate = ImageClassificationEvalTransform(224, mean=(0.0,) * 3, std=(1.0,) * 3)
    expected = image.resize((341, 256), PILImage.Resampling.BICUBIC).crop((58, 16, 282, 240))  # 256 / 0.875 = 224
    np.testing.assert_allclose(evaluate.transform_image(image).permute(1, 2, 0).numpy(), pixels(expected) / 255)
    tall = photo(403, 300)  # short side 256, long side int(256 * 403 / 300) = 343: (343 - 224) / 2 = 59.5 -> 60
    cropped = evaluate.resize_and_crop(tall)
    np.testing.assert_array_equal(
        pixels(cropped), pixels(tall.resize((256, 343), PILImage.Resampling.BICUBIC))[60:284, 16:240]
    )
    squash = ImageClassificationEvalTransform((20, 30), crop_pct=None)
    assert squash.transform_image(image).shape == (3, 20, 30)
    out = evaluate({"image": [image], "label": [1]})
    assert out["labels"] == [1] and out["pixel_values"][0].shape == (3, 224, 224)


def test_factories_read_the_processors_size_and_normalisation():
    from hf_xcv.models.swin.image_processing_swin import XcvSwinImageProcessor
    from hf_xcv.models.vit.image_processing_vit import XcvViTImageProcessor

    swin = XcvSwinImageProcessor.for_image_size((64, 64))
    train = image_classification_train_transform(swin, seed=0)
    assert train.crop.size == (64, 64) and train.mean == pytest.approx((0.485, 0.456, 0.406))
    assert train.rand_augment.fill == FILL
    vit = image_classification_train_transform(XcvViTImageProcessor(size={"height": 32, "width": 48}), seed=0)
    assert vit.crop.size == (32, 48) and vit.mean == (0.5, 0.5, 0.5) and vit.rand_augment.fill == (128, 128, 128)
    evaluate = image_classification_eval_transform(swin)
    assert evaluate.size == (64, 64) and evaluate.crop_pct == pytest.approx(224 / 256)
    image = photo(96, 96)  # resized to 73: (73 - 64) / 2 = 4.5, which both centre crops take as 4
    np.testing.assert_allclose(
        evaluate.transform_image(image).numpy(), swin(image, return_tensors="np")["pixel_values"][0], atol=1e-5
    )
