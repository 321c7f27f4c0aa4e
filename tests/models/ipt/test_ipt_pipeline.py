"""hf_xcv's image-restoration pipeline: what it returns equals the model and the processor's postprocess run by hand
(IPT with a task and the self-ensemble, TTSR with a reference), it loads a saved folder both ways that work, and
bad arguments fail by name. transformers 5 removed its own "image-to-image" task: ``transformers.pipeline`` reaches
this pipeline through ``pipeline_class`` and the config's ``custom_pipelines`` entry."""

from __future__ import annotations

import numpy as np
import PIL.Image
import pytest
import torch
import transformers
from transformers import AutoImageProcessor, AutoModelForImageToImage

import hf_xcv
from hf_xcv.pipelines import ImageRestorationPipeline


def random_image(height: int, width: int, seed: int = 0) -> PIL.Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return PIL.Image.fromarray(pixels)


@pytest.fixture(scope="module")
def ipt():
    torch.manual_seed(0)
    config = hf_xcv.preset_config("ipt-test-tiny", tasks=["sr_x2", "denoise_30"])
    return hf_xcv.IPTForImageRestoration(config).eval(), hf_xcv.IPTImageProcessor()


@pytest.fixture(scope="module")
def pipe(ipt):
    model, processor = ipt
    return ImageRestorationPipeline(model=model, image_processor=processor, device="cpu")


def by_hand(model, processor, image, **forward) -> PIL.Image.Image:
    with torch.no_grad():
        output = model(**processor(images=image, return_tensors="pt"), **forward)
    return processor.postprocess(output)[0]


def assert_same_image(actual: PIL.Image.Image, expected: PIL.Image.Image) -> None:
    assert isinstance(actual, PIL.Image.Image) and actual.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(actual), np.asarray(expected))


def test_a_batch_of_images_gives_what_the_model_and_postprocess_give_by_hand(ipt, pipe):
    model, processor = ipt
    images = [random_image(20, 17, seed=0), random_image(14, 25, seed=1)]  # two sizes, both tiled
    outputs = pipe(images, task="sr_x2")
    assert isinstance(outputs, list) and len(outputs) == 2
    for image, output in zip(images, outputs):
        assert output.size == (2 * image.width, 2 * image.height)
        assert_same_image(output, by_hand(model, processor, image, task="sr_x2"))
    same_size = [random_image(16, 16, seed=2), random_image(16, 16, seed=3)]
    batched = pipe(same_size, task="sr_x2", batch_size=2)
    for image, output in zip(same_size, batched):
        assert_same_image(output, by_hand(model, processor, image, task="sr_x2"))


def test_the_task_chooses_the_head_and_tail_per_call_or_at_construction(ipt, pipe):
    model, processor = ipt
    image = random_image(15, 13)
    denoised = pipe(image, task="denoise_30")
    assert denoised.size == image.size
    assert_same_image(denoised, by_hand(model, processor, image, task="denoise_30"))
    for default in (
        ImageRestorationPipeline(model=model, image_processor=processor, task="denoise_30", device="cpu"),
        ImageRestorationPipeline(model=model, image_processor=processor, restoration_task="denoise_30", device="cpu"),
    ):
        assert default.task == "image-to-image"
        assert_same_image(default(image), denoised)
        assert default(image, task="sr_x2").size == (2 * image.width, 2 * image.height)  # a call's task wins
    with pytest.raises(ValueError, match="choose one with task="):
        pipe(image)  # two tasks and none chosen: the model's error


def test_self_ensemble_is_the_models_x8_ensemble(ipt, pipe):
    model, processor = ipt
    image = random_image(13, 16)
    ensembled = pipe(image, task="sr_x2", self_ensemble=True)
    assert_same_image(ensembled, by_hand(model, processor, image, task="sr_x2", self_ensemble=True))
    assert not np.array_equal(np.asarray(ensembled), np.asarray(pipe(image, task="sr_x2")))
    default = ImageRestorationPipeline(model=model, image_processor=processor, self_ensemble=True, device="cpu")
    assert_same_image(default(image, task="sr_x2"), ensembled)
    with pytest.raises(ValueError, match="self_ensemble must be True or False"):
        pipe(image, task="sr_x2", self_ensemble="yes")


def test_numpy_arrays_and_paths_are_inputs_too(ipt, pipe, tmp_path):
    model, processor = ipt
    image = random_image(12, 18)
    expected = by_hand(model, processor, image, task="sr_x2")
    image.save(tmp_path / "image.png")
    assert_same_image(pipe(str(tmp_path / "image.png"), task="sr_x2"), expected)
    assert_same_image(pipe(np.asarray(image), task="sr_x2"), expected)


def test_an_unknown_task_fails_with_the_models_error(ipt, pipe):
    model, processor = ipt
    image = random_image(12, 12)
    with pytest.raises(ValueError, match=r"unknown task 'derain'; this IPT was built for \['sr_x2', 'denoise_30'\]"):
        pipe(image, task="derain")
    with pytest.raises(ValueError, match="unknown task 'sr_x4'"):
        ImageRestorationPipeline(model=model, image_processor=processor, task="sr_x4", device="cpu")


def test_a_processor_for_another_value_range_or_model_is_refused(ipt):
    model, _ = ipt
    with pytest.raises(ValueError, match=r"rgb_range \(1\).*config\.rgb_range \(255\)"):
        ImageRestorationPipeline(model=model, image_processor=hf_xcv.IPTImageProcessor(rgb_range=1), device="cpu")
    with pytest.raises(ValueError, match="takes inputs made by IPTImageProcessor, got a TTSRImageProcessor"):
        ImageRestorationPipeline(model=model, image_processor=hf_xcv.TTSRImageProcessor(), device="cpu")
    with pytest.raises(ValueError, match="needs the model's image processor"):
        ImageRestorationPipeline(model=model, device="cpu")
    one_range = hf_xcv.IPTForImageRestoration(hf_xcv.preset_config("ipt-test-tiny", rgb_range=1)).eval()
    pipe = ImageRestorationPipeline(
        model=one_range, image_processor=hf_xcv.IPTImageProcessor(rgb_range=1), device="cpu"
    )
    assert pipe(random_image(12, 12)).size == (24, 24)


def test_a_saved_folder_loads_through_the_auto_classes_and_through_transformers_pipeline(ipt, tmp_path):
    model, processor = ipt
    model.save_pretrained(tmp_path)  # its config names the pipeline (the family entry's; hf_xcv.remote_code)
    processor.save_pretrained(tmp_path)
    image = random_image(18, 14)
    expected = by_hand(model, processor, image, task="sr_x2")

    direct = ImageRestorationPipeline(
        model=AutoModelForImageToImage.from_pretrained(tmp_path),
        image_processor=AutoImageProcessor.from_pretrained(tmp_path),
        device="cpu",
    )
    assert_same_image(direct(image, task="sr_x2"), expected)

    named = transformers.pipeline(
        "image-to-image", model=str(tmp_path), pipeline_class=ImageRestorationPipeline, device="cpu"
    )
    assert isinstance(named, ImageRestorationPipeline) and isinstance(named.model, hf_xcv.IPTForImageRestoration)
    assert isinstance(named.image_processor, hf_xcv.IPTImageProcessor)
    assert_same_image(named(image, task="sr_x2"), expected)
    inferred = transformers.pipeline(
        model=str(tmp_path), pipeline_class=ImageRestorationPipeline, restoration_task="sr_x2", device="cpu"
    )  # the config's one custom task is the pipeline's task
    assert inferred.task == "image-to-image"
    assert_same_image(inferred(image), expected)


def test_transformers_pipeline_refuses_image_to_image_without_the_configs_entry(ipt):
    model, processor = ipt  # a model object: transformers reads no config file, so finds no custom task
    with pytest.raises(KeyError, match="image-to-image has been removed"):
        transformers.pipeline(
            "image-to-image", model=model, image_processor=processor, pipeline_class=ImageRestorationPipeline
        )


def test_importing_hf_xcv_registers_no_pipeline_task():
    from transformers.pipelines import PIPELINE_REGISTRY, REMOVED_TASKS

    assert "image-to-image" not in PIPELINE_REGISTRY.get_supported_tasks()
    assert "image-to-image" in REMOVED_TASKS


# ---------------------------------------------------------------------------------------------------------------
# TTSR


@pytest.fixture(scope="module")
def ttsr():
    torch.manual_seed(0)
    model = hf_xcv.TTSRForReferenceSuperResolution(hf_xcv.preset_config("ttsr-test-tiny")).eval()
    processor = hf_xcv.TTSRImageProcessor()
    return model, processor, ImageRestorationPipeline(model=model, image_processor=processor, device="cpu")


def test_ttsr_takes_a_reference_per_call_or_per_input(ttsr):
    model, processor, pipe = ttsr
    images, references = [random_image(8, 8, seed=0), random_image(8, 8, seed=1)], [random_image(24, 28, seed=2)] * 2
    references[1] = random_image(32, 32, seed=3)
    for image, reference in zip(images, references):
        with torch.no_grad():
            output = model(**processor(images=image, references=reference, return_tensors="pt"))
        expected = processor.postprocess(output)[0]
        assert_same_image(pipe(image, reference=reference), expected)
        assert expected.size == (32, 32)
    outputs = pipe([{"image": image, "reference": reference} for image, reference in zip(images, references)])
    for output, image, reference in zip(outputs, images, references):
        assert_same_image(output, pipe(image, reference=reference))


def test_ttsr_without_a_reference_or_with_ipts_arguments_fails_by_name(ttsr, ipt):
    _, _, pipe = ttsr
    image = random_image(8, 8)
    with pytest.raises(ValueError, match="TTSR needs a reference image"):
        pipe(image)
    with pytest.raises(ValueError, match=r"\['self_ensemble', 'task'\] are IPT's"):
        pipe(image, reference=random_image(16, 16), task="sr_x4", self_ensemble=True)
    ipt_pipe = ImageRestorationPipeline(model=ipt[0], image_processor=ipt[1], device="cpu")
    with pytest.raises(ValueError, match="reference= is for TTSR"):
        ipt_pipe(image, reference=image)
    with pytest.raises(ValueError, match="ImageRestorationPipeline runs"):
        ImageRestorationPipeline(model=torch.nn.Linear(2, 2), image_processor=ipt[1])
