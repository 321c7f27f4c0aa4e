"""TTSRImageProcessor: the original data pipeline's values (PIL bicubic, x / 127.5 - 1), sizes not divisible by 4,
image modes, the reference canvas, postprocessing, saving, and bad inputs."""

from __future__ import annotations

import numpy as np
import PIL.Image
import pytest
import torch
from transformers import AutoImageProcessor

from hf_xcv import TTSRForReferenceSuperResolution, TTSRImageProcessor, preset_config


def photo(height: int, width: int, seed: int = 0, mode: str = "RGB") -> PIL.Image.Image:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    return PIL.Image.fromarray(pixels, "RGB").convert(mode)


def official(image: PIL.Image.Image) -> np.ndarray:
    """The original's ``x / 127.5 - 1`` of a uint8 image, channels first."""
    return np.moveaxis(np.asarray(image, dtype=np.float32) / 127.5 - 1.0, -1, 0)


def test_a_high_resolution_image_and_reference_give_the_original_pipelines_values():
    """dataset/cufed.py's TestSet: HR cropped to multiples of 4, LR = HR resized to a quarter, LR↑ = LR resized x4,
    Ref cropped to multiples of 4, Ref↓↑ = Ref resized to a quarter and back, all with PIL's BICUBIC."""
    hr, ref = photo(50, 43), photo(70, 61, seed=1)
    batch = TTSRImageProcessor()(high_resolution_images=hr, references=ref)
    hr_c = hr.crop((0, 0, 40, 48))
    lr = hr_c.resize((10, 12), PIL.Image.BICUBIC)
    ref_c = ref.crop((0, 0, 60, 68))
    ref_degraded = ref_c.resize((15, 17), PIL.Image.BICUBIC).resize((60, 68), PIL.Image.BICUBIC)
    expected = {
        "pixel_values": official(lr),
        "upsampled_pixel_values": official(lr.resize((40, 48), PIL.Image.BICUBIC)),
        "reference_pixel_values": official(ref_c),
        "degraded_reference_pixel_values": official(ref_degraded),
        "labels": official(hr_c),
    }
    assert set(batch) == set(expected)
    for key, value in expected.items():
        assert batch[key].dtype == np.float32 and batch[key].shape == (1, *value.shape)
        np.testing.assert_array_equal(batch[key][0], value, err_msg=key)
        assert -1.0 <= batch[key].min() and batch[key].max() <= 1.0


def test_a_low_resolution_image_is_taken_as_it_is():
    lr, ref = photo(13, 11), photo(40, 44, seed=1)
    batch = TTSRImageProcessor()(lr, ref, return_tensors="pt")
    assert isinstance(batch["pixel_values"], torch.Tensor) and "labels" not in batch
    np.testing.assert_array_equal(batch["pixel_values"][0].numpy(), official(lr))
    assert tuple(batch["upsampled_pixel_values"].shape) == (1, 3, 52, 44)


def test_pad_mode_pads_with_edges_and_postprocess_crops_back():
    hr, ref = photo(50, 43), photo(70, 61, seed=1)
    processor = TTSRImageProcessor(size_divisibility_mode="pad")
    batch = processor(high_resolution_images=hr, references=ref, return_tensors="pt")
    assert tuple(batch["labels"].shape) == (1, 3, 52, 44) and tuple(batch["pixel_values"].shape) == (1, 3, 13, 11)
    assert tuple(batch["reference_pixel_values"].shape) == (1, 3, 72, 64)
    labels = batch["labels"][0]
    torch.testing.assert_close(labels[:, 50:], labels[:, 49:50].expand(-1, 2, -1))  # the last row repeated
    (back,) = processor.postprocess(batch["labels"], target_sizes=[(50, 43)])
    assert np.array_equal(np.asarray(back), np.asarray(hr))  # [-1, 1] and back is exact for uint8 values


@pytest.mark.parametrize("mode", ["RGBA", "L", "P", "LA"])
def test_other_image_modes_become_rgb_as_pil_converts_them(mode):
    lr, ref = photo(12, 12, mode=mode), photo(48, 48, seed=1, mode=mode)
    batch = TTSRImageProcessor()(lr, ref)
    np.testing.assert_array_equal(batch["pixel_values"][0], official(lr.convert("RGB")))
    np.testing.assert_array_equal(batch["reference_pixel_values"][0], official(ref.convert("RGB")))


def test_arrays_tensors_and_floats_in_0_1_are_accepted():
    lr, ref = photo(12, 12), photo(48, 48, seed=1)
    from_pil = TTSRImageProcessor()(lr, ref)
    as_array = TTSRImageProcessor()(np.asarray(lr), torch.from_numpy(np.array(ref)).permute(2, 0, 1))
    for key in from_pil:
        np.testing.assert_array_equal(as_array[key], from_pil[key])
    as_float = TTSRImageProcessor()(np.asarray(lr) / 255.0, np.asarray(ref) / 255.0)  # rounded to 8 bits
    for key in from_pil:
        np.testing.assert_array_equal(as_float[key], from_pil[key])


def test_a_reference_canvas_batches_references_of_different_sizes_as_the_original_training():
    processor = TTSRImageProcessor(reference_size={"height": 64, "width": 64})
    batch = processor([photo(12, 12), photo(12, 12, seed=2)], [photo(48, 40, seed=1), photo(64, 60, seed=3)])
    refs = batch["reference_pixel_values"]
    assert refs.shape == (2, 3, 64, 64)
    np.testing.assert_array_equal(refs[0, :, :48, :40], official(photo(48, 40, seed=1)))
    assert (refs[0, :, 48:] == -1).all() and (refs[0, :, :, 40:] == -1).all()  # black canvas, as np.zeros in 0-255
    assert (batch["degraded_reference_pixel_values"][1, :, :, 60:] == -1).all()
    one_reference = TTSRImageProcessor()([photo(12, 12), photo(12, 12, seed=2)], photo(48, 40, seed=1))
    assert one_reference["reference_pixel_values"].shape == (2, 3, 48, 40)


def test_postprocess_gives_pil_images_and_takes_a_model_output():
    torch.manual_seed(0)
    model = TTSRForReferenceSuperResolution(preset_config("ttsr-test-tiny")).eval()
    processor = TTSRImageProcessor()
    batch = processor([photo(8, 9), photo(8, 9, seed=2)], photo(40, 40, seed=1), return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    images = processor.postprocess(out)
    assert [image.size for image in images] == [(36, 32), (36, 32)] and images[0].mode == "RGB"
    expected = ((out.reconstruction[1] + 1) * 127.5).round().clamp(0, 255).byte().permute(1, 2, 0).numpy()
    assert np.array_equal(np.asarray(images[1]), expected)


def test_saves_its_settings_under_a_name_of_its_own_and_reloads_through_auto(tmp_path):
    processor = TTSRImageProcessor(size_divisibility_mode="pad", reference_size={"height": 160, "width": 160})
    processor.save_pretrained(tmp_path)
    saved = (tmp_path / "preprocessor_config.json").read_text()
    assert '"image_processor_type": "TTSRImageProcessor"' in saved and "image_mean" not in saved
    loaded = AutoImageProcessor.from_pretrained(tmp_path)
    assert type(loaded) is TTSRImageProcessor and loaded.to_dict() == processor.to_dict()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda p: p(photo(12, 12), None), "needs a reference"),
        (lambda p: p(photo(12, 12), photo(48, 48), high_resolution_images=photo(48, 48)), "not both"),
        (lambda p: p(photo(40, 40), photo(24, 24)), r"low-resolution image \(40x40\) is larger than its reference"),
        (lambda p: p(photo(2, 12), photo(48, 48)), "at least 3x3 and 12x12"),
        (lambda p: p(photo(12, 12), photo(8, 48)), "at least 3x3 and 12x12"),
        (lambda p: p([photo(12, 12), photo(12, 13)], photo(48, 48)), "different sizes"),
        (lambda p: p([photo(12, 12)] * 2, [photo(48, 48), photo(44, 48)]), "pass reference_size"),
        (lambda p: p([photo(12, 12)] * 3, [photo(48, 48)] * 2), "3 images and 2 references"),
        (lambda p: p(photo(12, 12, mode="L"), photo(48, 48), do_convert_rgb=False), "TTSR takes RGB"),
        (lambda p: p(np.full((12, 12, 3), 1.5), photo(48, 48)), r"image 0: .* values in \[1.5, 1.5\] is ambiguous"),
        (lambda p: p(photo(12, 12), photo(48, 48), reference_size={"height": 40, "width": 48}), "larger than the"),
        (lambda p: p(photo(12, 12), photo(48, 48), size=224), "unknown argument"),
        (lambda p: p(high_resolution_images=photo(8, 40), references=photo(48, 48)), "at least 3x3 and 12x12"),
        (lambda p: p(photo(12, 12), photo(48, 48), size_divisibility_mode=""), "size_divisibility_mode='' is not"),
        (lambda p: p(PIL.Image.new("I", (12, 12), -1), photo(48, 48)), "mode 'I' is read as 16-bit"),
        (lambda p: p(photo(12, 12), PIL.Image.new("F", (48, 48), 300.0)), r"reference 0: a PIL image of mode 'F' must"),
    ],
)
def test_bad_inputs_are_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call(TTSRImageProcessor())


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"size_divisibility_mode": "stretch"}, "size_divisibility_mode='stretch' is not allowed"),
        ({"reference_size": {"height": 30, "width": 40}}, "multiples of 4"),
        ({"size": {"height": 224, "width": 224}}, r"unknown setting\(s\) \['size'\]"),
    ],
)
def test_bad_settings_are_refused_by_name(settings, message):
    with pytest.raises(ValueError, match=message):
        TTSRImageProcessor(**settings)


def test_postprocess_refuses_target_sizes_outside_the_reconstruction():
    processor = TTSRImageProcessor()
    for size in [(0, 4), (4, -1), (9, 4), (4,)]:
        with pytest.raises(ValueError, match=r"target_sizes\[0\]"):
            processor.postprocess(torch.zeros(1, 3, 8, 8), target_sizes=[size])


def test_check_pair_sizes_refuses_what_preprocessing_would():
    processor = TTSRImageProcessor(reference_size={"height": 48, "width": 48})
    processor.check_pair_sizes(np.zeros((3, 48, 40), np.uint8), np.zeros((3, 48, 44), np.uint8))  # fine
    with pytest.raises(ValueError, match="larger than the 48x48 canvas"):
        processor.check_pair_sizes(np.zeros((3, 48, 40), np.uint8), np.zeros((3, 52, 44), np.uint8))
    with pytest.raises(ValueError, match="at least 3x3"):
        processor.check_pair_sizes(np.zeros((3, 8, 40), np.uint8), np.zeros((3, 48, 44), np.uint8))
