"""The photos dataset for reference-based super-resolution, the user-folder loader and the training crops."""

from __future__ import annotations

import re

import numpy as np
import PIL.Image
import pytest
from datasets import Dataset

from hf_xcv.data import (
    load_photo,
    load_photos_dataset,
    load_restoration_folder,
    mod_crop,
    panned_views,
    photo_features,
    training_crops,
)
from hf_xcv.data.photos import EXCLUDED_PHOTOS, TEST_PHOTOS, TRAIN_PHOTOS, VALIDATION_PHOTOS
from hf_xcv.utils.errors import UsageError

CROP_NAME = re.compile(r"(?P<photo>\w+)/crop\d{3}_hr-y(?P<y>\d+)-x(?P<x>\d+)_ref-y(?P<ry>\d+)-x(?P<rx>\d+)")


@pytest.fixture(scope="module")
def photos():
    return load_photos_dataset()


def pixels(image: PIL.Image.Image) -> np.ndarray:
    return np.asarray(image)


def test_splits_columns_and_held_out_views(photos):
    assert list(photos) == ["train", "validation", "test"]
    for split in photos.values():
        assert split.features == photo_features()
    assert photos["validation"]["name"] == ["rocket/panned"]
    assert photos["test"]["name"] == ["stereo_motorcycle/stereo", "coffee/panned", "chelsea/panned"]


def test_held_out_and_excluded_photos_never_reach_train(photos):
    trained = {name.split("/")[0] for name in photos["train"]["name"]}
    assert trained == set(TRAIN_PHOTOS)
    assert not trained & {*VALIDATION_PHOTOS, *TEST_PHOTOS, *EXCLUDED_PHOTOS}


def test_every_size_is_a_multiple_of_the_scale(photos):
    for split in photos.values():
        for row in split:
            assert row["image"].mode == "RGB" and row["reference"].mode == "RGB"
            for image in (row["image"], row["reference"]):
                assert image.width % 4 == 0 and image.height % 4 == 0, (row["name"], image.size)
    assert {row["image"].size for row in photos["train"]} == {(160, 160)}


def test_train_crops_and_their_displaced_references(photos):
    sources = {name: load_photo(name) for name in TRAIN_PHOTOS}
    for row in photos["train"]:
        match = CROP_NAME.fullmatch(row["name"])
        assert match, row["name"]
        y, x, ry, rx = (int(match[key]) for key in ("y", "x", "ry", "rx"))
        photo = sources[match["photo"]]
        assert np.array_equal(pixels(row["image"]), photo[y : y + 160, x : x + 160])
        assert np.array_equal(pixels(row["reference"]), photo[ry : ry + 160, rx : rx + 160])
        assert abs(ry - y) <= 80 and abs(rx - x) <= 80  # at least half the crop shared each way


def test_bigger_photos_give_more_crops(photos):
    counts = {name: sum(n.startswith(f"{name}/") for n in photos["train"]["name"]) for name in TRAIN_PHOTOS}
    assert counts["astronaut"] == 21  # ceil(2 * 512 * 512 / 160**2)
    assert counts["hubble_deep_field"] == 69 and counts["page"] == 6


def test_panned_views_share_the_middle_third(photos):
    rocket = mod_crop(load_photo("rocket"))  # 424 x 640
    hr, reference = (pixels(photos["validation"][0][key]) for key in ("image", "reference"))
    assert hr.shape == reference.shape == (424, 424, 3)  # 424: the multiple of 4 below 2/3 of 640
    assert np.array_equal(hr, rocket[:, :424]) and np.array_equal(reference, rocket[:, 640 - 424 :])
    shared = 2 * 424 - 640
    assert np.array_equal(hr[:, 640 - 424 :], reference[:, :shared])
    assert all(np.array_equal(view, row) for view, row in zip(panned_views(load_photo("rocket")), (hr, reference)))


def test_the_stereo_pair_is_its_two_views(photos):
    row = photos["test"][0]
    assert np.array_equal(pixels(row["image"]), load_photo("stereo_motorcycle")[:, :740])
    assert np.array_equal(pixels(row["reference"]), load_photo("stereo_motorcycle_right")[:, :740])


def test_grayscale_photos_are_repeated_to_rgb():
    camera = load_photo("camera")
    assert camera.shape == (512, 512, 3) and (camera == camera[:, :, :1]).all()
    with pytest.raises(ValueError, match=r"unknown photo 'logo' \(left out: synthetic graphics"):
        load_photo("logo")
    with pytest.raises(ValueError, match=r"unknown photo 'stereo_motorcycle_left'"):
        load_photo("stereo_motorcycle_left")


def test_deterministic_for_a_seed():
    first = load_photos_dataset(crops_per_photo=2, seed=3)
    again = load_photos_dataset(crops_per_photo=2, seed=3)
    other = load_photos_dataset(crops_per_photo=2, seed=4)
    assert len(first["train"]) == 2 * len(TRAIN_PHOTOS)
    assert first["train"]["name"] == again["train"]["name"] != other["train"]["name"]
    assert first["train"][0]["image"].tobytes() == again["train"][0]["image"].tobytes()
    assert first["test"]["name"] == other["test"]["name"]


def test_other_crop_sizes_leave_out_photos_smaller_than_a_crop():
    train = load_photos_dataset(crop_size=192, crops_per_photo=1, max_offset=0)["train"]
    assert {name.split("/")[0] for name in train["name"]} == set(TRAIN_PHOTOS) - {"page", "text"}
    row = train[0]
    assert row["image"].size == (192, 192) and row["image"].tobytes() == row["reference"].tobytes()


# fmt: off
@pytest.mark.parametrize(("options", "message"), [
    ({"crop_size": 162}, r"crop_size=162 must be a positive multiple of the scale 4"),
    ({"crop_size": 2000}, r"crop_size=2000 is larger than every training photo"),
    ({"crops_per_photo": 0}, r"crops_per_photo=0 must be a positive integer or None"),
    ({"coverage": 0}, r"coverage=0 must be a positive number"),
    ({"max_offset": -1}, r"max_offset=-1 must be a non-negative integer or None"),
    ({"seed": -1}, r"seed=-1 must be a non-negative integer"),
    ({"scale": 0}, r"scale=0 must be a positive integer"),
])  # fmt: on
def test_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        load_photos_dataset(**options)


# ----------------------------------------------------------------------------------------------------------------
# training crops of any split


def whole_photos() -> Dataset:
    rows = {"image": [], "reference": [], "name": []}
    for name in ("coins", "text"):
        photo = mod_crop(load_photo(name))
        rows["image"].append(PIL.Image.fromarray(photo))
        rows["reference"].append(PIL.Image.fromarray(photo[::-1].copy()))  # upside down: tells the sources apart
        rows["name"].append(name)
    return Dataset.from_dict(rows, features=photo_features())


def test_training_crops_of_a_split():
    split = whole_photos()
    crops = training_crops(split, crop_size=64, crops_per_image=3, max_offset=8, seed=1)
    assert len(crops) == 6 and crops.features == photo_features()
    assert crops["name"] == training_crops(split, crop_size=64, crops_per_image=3, max_offset=8, seed=1)["name"]
    for row in crops:
        match = CROP_NAME.fullmatch(row["name"])
        y, x, ry, rx = (int(match[key]) for key in ("y", "x", "ry", "rx"))
        photo = mod_crop(load_photo(match["photo"]))
        assert np.array_equal(pixels(row["image"]), photo[y : y + 64, x : x + 64])
        assert np.array_equal(pixels(row["reference"]), photo[ry : ry + 64, rx : rx + 64])
        assert abs(ry - y) <= 8 and abs(rx - x) <= 8
    by_coverage = training_crops(split, crop_size=64, coverage=1.0)
    assert len(by_coverage) == 29 + 19  # ceil(300 * 384 / 64**2), ceil(172 * 448 / 64**2)


def test_training_crops_from_the_reference_images():
    split = whole_photos()
    crops = training_crops(split, crop_size=64, crops_per_image=2, reference_source="reference")
    for row in crops:
        match = CROP_NAME.fullmatch(row["name"])
        ry, rx = int(match["ry"]), int(match["rx"])
        flipped = mod_crop(load_photo(match["photo"]))[::-1]
        assert np.array_equal(pixels(row["reference"]), flipped[ry : ry + 64, rx : rx + 64])


def test_training_crops_without_names_use_the_row_number():
    split = whole_photos().remove_columns(["reference", "name"])
    assert training_crops(split, crop_size=64, crops_per_image=1)["name"][1].startswith("1/crop000_")


def test_training_crops_bad_input():
    split = whole_photos()
    with pytest.raises(ValueError, match=r"'text' is 172x448, smaller than the 200x200 crops"):
        training_crops(split, crop_size=200)
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['reference'\]"):
        training_crops(split.remove_columns("reference"), crop_size=64, reference_source="reference")
    with pytest.raises(ValueError, match=r"reference_source must be one of \['image', 'reference'\]"):
        training_crops(split, reference_source="other")
    with pytest.raises(ValueError, match=r"crops_per_image=1.5 must be a positive integer"):
        training_crops(split, crops_per_image=1.5)


# ----------------------------------------------------------------------------------------------------------------
# user folders


def save(path, array: np.ndarray, mode: str | None = None) -> np.ndarray:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = PIL.Image.fromarray(array)
    (image.convert(mode) if mode else image).save(path)
    return array


def photo_crop(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_folder_round_trip_with_splits(tmp_path):
    a = save(tmp_path / "train" / "hr" / "a.png", photo_crop(50, 63))
    a_ref = save(tmp_path / "train" / "ref" / "a.bmp", photo_crop(41, 40, 1))
    b = save(tmp_path / "train" / "hr" / "b.png", photo_crop(32, 32, 2))
    b_ref = save(tmp_path / "train" / "ref" / "b.png", photo_crop(32, 32, 3))
    gray = save(tmp_path / "test" / "hr" / "g.png", photo_crop(20, 24, 4)[:, :, 0])
    save(tmp_path / "test" / "ref" / "g.png", photo_crop(20, 24, 5)[:, :, 0])
    (tmp_path / "train" / "hr" / "notes.txt").write_text("not an image")
    (tmp_path / "train" / "hr" / ".hidden.png").write_bytes(b"junk")
    dataset = load_restoration_folder(tmp_path)
    assert list(dataset) == ["train", "test"] and dataset["train"]["name"] == ["a", "b"]
    first = dataset["train"][0]
    assert np.array_equal(pixels(first["image"]), a[:48, :60])  # mod-cropped to multiples of 4
    assert np.array_equal(pixels(first["reference"]), a_ref[:40, :40])
    assert np.array_equal(pixels(dataset["train"][1]["image"]), b)
    assert np.array_equal(pixels(dataset["train"][1]["reference"]), b_ref)
    assert np.array_equal(pixels(dataset["test"][0]["image"]), np.repeat(gray[:, :, None], 3, axis=2))


def test_flat_folder_and_panned_policy(tmp_path):
    image = save(tmp_path / "hr" / "wide.png", photo_crop(30, 100))
    save(tmp_path / "hr" / "rgba.png", photo_crop(16, 16, 1), mode="RGBA")
    with pytest.raises(ValueError, match=r"hr/rgba.png has no reference \(no image named 'rgba' in .*ref\)"):
        load_restoration_folder(tmp_path)
    dataset = load_restoration_folder(tmp_path, split="test", missing_reference="panned")
    assert list(dataset) == ["test"]
    row = dataset["test"][dataset["test"]["name"].index("wide")]
    assert np.array_equal(pixels(row["image"]), image[:28, :64])  # 2/3 of 100 -> 64
    assert np.array_equal(pixels(row["reference"]), image[:28, 100 - 64 : 100])


def test_folder_of_large_photos_becomes_training_crops(tmp_path):
    save(tmp_path / "hr" / "big.png", photo_crop(100, 120))
    crops = training_crops(load_restoration_folder(tmp_path, missing_reference="panned")["train"], crop_size=32)
    assert len(crops) == 16 and crops[0]["name"].startswith("big/crop000_")  # ceil(2 * 100 * 80 / 32**2)


def write_bad_layout(root, case: str) -> str:
    """Makes a broken folder under ``root``; returns the error message expected."""
    good = photo_crop(16, 16)
    if case == "missing":
        return r"is not a folder"
    if case == "empty":
        (root / "train" / "hr").mkdir(parents=True)
        return r"train/hr holds no images"
    if case == "no layout":
        (root / "images").mkdir(parents=True)
        return r"holds neither hr/ nor split folders with hr/"
    if case == "both layouts":
        save(root / "hr" / "a.png", good)
        save(root / "train" / "hr" / "a.png", good)
        return r"holds both hr/ and split folders \['train'\]"
    if case == "ref folder alone":
        save(root / "train" / "hr" / "a.png", good)
        save(root / "test" / "ref" / "a.png", good)
        return r"test/ref has no HR folder beside it"
    if case == "orphan reference":
        save(root / "hr" / "a.png", good)
        save(root / "ref" / "a.png", good)
        save(root / "ref" / "zebra.png", good)
        return r"ref/zebra.png: has no HR image: no image named 'zebra'"
    if case == "unreadable":
        (root / "hr").mkdir()
        (root / "hr" / "broken.jpg").write_bytes(b"not a jpeg")
        return r"cannot read the image .*hr/broken.jpg"
    if case == "same stem":
        save(root / "hr" / "a.png", good)
        save(root / "hr" / "a.bmp", good)
        return r"hr/a.bmp and .*hr/a.png have the same name"
    if case == "16-bit":
        (root / "hr").mkdir()
        PIL.Image.fromarray(np.full((8, 8), 4000, np.uint16)).save(root / "hr" / "deep.png")
        return r"hr/deep.png has mode 'I;16' \(more than 8 bits per channel\)"
    assert case == "too small"
    save(root / "hr" / "tiny.png", photo_crop(3, 8))
    save(root / "ref" / "tiny.png", good)
    return r"hr/tiny.png is 3x8, smaller than the scale 4"


# fmt: off
@pytest.mark.parametrize("case", [
    "missing", "empty", "no layout", "both layouts", "ref folder alone", "orphan reference", "unreadable",
    "same stem", "16-bit", "too small",
])  # fmt: on
def test_folder_errors_name_the_problem(tmp_path, case):
    root = tmp_path / "data"
    if case != "missing":
        root.mkdir()
    message = write_bad_layout(root, case)
    with pytest.raises(ValueError, match=message):
        load_restoration_folder(root)


def test_folder_bad_options(tmp_path):
    with pytest.raises(ValueError, match=r"missing_reference must be one of \['error', 'panned', 'itself'\]"):
        load_restoration_folder(tmp_path, missing_reference="self")
    with pytest.raises(ValueError, match=r"too narrow for two panned views"):
        panned_views(photo_crop(8, 4))


def test_a_folder_with_several_bad_images_names_every_one_at_once(tmp_path):
    """Every image is read before the error: one message names each unreadable file and each orphan reference."""
    good = np.zeros((32, 32, 3), dtype=np.uint8)
    (tmp_path / "hr").mkdir()
    (tmp_path / "ref").mkdir()
    PIL.Image.fromarray(good).save(tmp_path / "hr" / "a.png")
    PIL.Image.fromarray(good).save(tmp_path / "ref" / "a.png")
    (tmp_path / "hr" / "broken.jpg").write_bytes(b"not a jpeg")
    (tmp_path / "hr" / "cut.png").write_bytes((tmp_path / "hr" / "a.png").read_bytes()[:60])
    PIL.Image.fromarray(good).save(tmp_path / "ref" / "zebra.png")
    with pytest.raises(UsageError) as refused:
        load_restoration_folder(tmp_path, missing_reference="panned")
    message = str(refused.value)
    assert "3 problem(s)" in message
    assert "hr/broken.jpg" in message and "hr/cut.png" in message and "ref/zebra.png: has no HR image" in message
