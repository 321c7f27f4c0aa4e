"""An image-restoration pipeline for hf_xcv's image-to-image models: IPT (a task to choose, optional x8
self-ensemble) and TTSR (a reference image per input).

transformers 5 removed its own ``"image-to-image"`` pipeline, so this is a :class:`transformers.Pipeline` of
hf_xcv's, built directly or through ``transformers.pipeline(..., pipeline_class=ImageRestorationPipeline)``;
importing hf_xcv registers no pipeline task with transformers.
"""

from __future__ import annotations

from typing import Any

import PIL.Image
import torch
from transformers import Pipeline
from transformers.image_utils import load_image

from .models.ipt import IPTForImageRestoration, IPTImageProcessor
from .models.ttsr import TTSRForReferenceSuperResolution, TTSRImageProcessor

# model class -> the image processor class that makes its inputs
PROCESSORS: dict[type, type] = {
    IPTForImageRestoration: IPTImageProcessor,
    TTSRForReferenceSuperResolution: TTSRImageProcessor,
}


def _is_pipeline_task(task: Any) -> bool:
    """Whether a ``task`` given at construction is transformers' pipeline task ("image-to-image", as
    ``transformers.pipeline`` passes it; "" by default) rather than a restoration task: restoration task names are
    identifiers (``sr_x4``, ``denoise_30``), pipeline task names have hyphens."""
    return task is None or task == "" or (isinstance(task, str) and "-" in task)


def _as_image(image: Any) -> Any:
    """A path or URL loaded as a PIL image; PIL images, numpy arrays and tensors as they are (the image processor
    takes them)."""
    return load_image(image) if isinstance(image, str) else image


def _check_processor(model: Any, image_processor: Any) -> None:
    """ValueError unless ``image_processor`` makes ``model``'s inputs: the model's processor class and, for IPT, the
    model's value range."""
    expected = next(processor for cls, processor in PROCESSORS.items() if isinstance(model, cls))
    if image_processor is None:
        raise ValueError(
            f"ImageRestorationPipeline needs the model's image processor: image_processor={expected.__name__}(...) "
            "or AutoImageProcessor.from_pretrained(the model's folder)"
        )
    if not isinstance(image_processor, expected):
        raise ValueError(
            f"{type(model).__name__} takes inputs made by {expected.__name__}, got a {type(image_processor).__name__}"
        )
    if isinstance(model, IPTForImageRestoration) and image_processor.rgb_range != model.config.rgb_range:
        raise ValueError(
            f"the image processor's rgb_range ({image_processor.rgb_range}) differs from the model's "
            f"config.rgb_range ({model.config.rgb_range}): pixel values would be scaled for the wrong range; "
            f"use IPTImageProcessor(rgb_range={model.config.rgb_range})"
        )


class ImageRestorationPipeline(Pipeline):
    """Restores images with an hf_xcv image-to-image model and its image processor, PIL images out.

    * IPT (:class:`~hf_xcv.IPTForImageRestoration` with :class:`~hf_xcv.IPTImageProcessor`):
      ``pipe(image, task="sr_x4", self_ensemble=False)``; ``task`` may be left out for a single-task model.
    * TTSR (:class:`~hf_xcv.TTSRForReferenceSuperResolution` with :class:`~hf_xcv.TTSRImageProcessor`):
      ``pipe(image, reference=reference_image)``, or inputs ``{"image": ..., "reference": ...}`` for a reference
      per image.

    Inputs: a PIL image, a numpy array or tensor (as the image processor takes them), a path or URL, or a list of
    these (a list of outputs back). ``batch_size > 1`` stacks images of one size. ``task``, ``self_ensemble`` and
    ``reference`` may also be given at construction, as defaults for every call (``restoration_task=`` is the name
    for the task through ``transformers.pipeline``, whose own ``task`` is the pipeline's).

    Args:
        model: the model (``AutoModelForImageToImage.from_pretrained(folder)``).
        image_processor: its image processor (``AutoImageProcessor.from_pretrained(folder)``); for IPT its
            ``rgb_range`` must equal the model's.
    """

    _load_processor = False
    _load_image_processor = True
    _load_feature_extractor = False
    _load_tokenizer = False
    _load_video_processor = False

    def __init__(self, model: Any, image_processor: Any = None, *, task: str | None = "", **kwargs: Any) -> None:
        if not isinstance(model, tuple(PROCESSORS)):
            known = ", ".join(cls.__name__ for cls in PROCESSORS)
            raise ValueError(f"ImageRestorationPipeline runs {known}; got a {type(model).__name__}")
        if not _is_pipeline_task(task):
            if "restoration_task" in kwargs:
                raise ValueError(f"pass task={task!r} or restoration_task={kwargs['restoration_task']!r}, not both")
            kwargs["restoration_task"], task = task, "image-to-image"
        _check_processor(model, image_processor)
        super().__init__(model=model, image_processor=image_processor, task=task or "image-to-image", **kwargs)

    @property
    def _is_ipt(self) -> bool:
        return isinstance(self.model, IPTForImageRestoration)

    def _sanitize_parameters(
        self,
        task: str | None = None,
        restoration_task: str | None = None,
        self_ensemble: bool | None = None,
        reference: Any = None,
    ) -> tuple[dict, dict, dict]:
        if task is not None and restoration_task is not None:
            raise ValueError(f"pass task={task!r} or restoration_task={restoration_task!r}, not both")
        task = task if task is not None else restoration_task
        forward: dict[str, Any] = {}
        preprocess: dict[str, Any] = {}
        if self._is_ipt:
            if reference is not None:
                raise ValueError("IPT restores an image on its own: reference= is for TTSR")
            if task is not None:
                self.model.config.task_index(task)  # the model's ValueError for an unknown task
                forward["task"] = task
            if self_ensemble is not None:
                if not isinstance(self_ensemble, bool):
                    raise ValueError(f"self_ensemble must be True or False, got {self_ensemble!r}")
                forward["self_ensemble"] = self_ensemble
        else:
            given = sorted(name for name, value in (("task", task), ("self_ensemble", self_ensemble)) if value)
            if given:
                raise ValueError(f"TTSR has one task (x4 reference-based super-resolution): {given} are IPT's")
            if reference is not None:
                preprocess["reference"] = reference
        return preprocess, forward, {}

    def __call__(self, images: Any, **kwargs: Any) -> PIL.Image.Image | list[Any]:
        """Restore ``images`` (one, or a list: then a list back). Keyword arguments: ``task``, ``self_ensemble``
        (IPT), ``reference`` (TTSR), and transformers' ``batch_size`` / ``num_workers``."""
        return super().__call__(images, **kwargs)

    def preprocess(self, image: Any, reference: Any = None) -> dict[str, torch.Tensor]:
        if isinstance(image, dict):
            unknown = sorted(set(image) - {"image", "reference"})
            if unknown or "image" not in image:
                raise ValueError(f'an input dict holds "image" (and, for TTSR, "reference"); got keys {sorted(image)}')
            image, reference = image["image"], image.get("reference", reference)
        if self._is_ipt:
            if reference is not None:
                raise ValueError("IPT restores an image on its own: a reference is for TTSR")
            return dict(self.image_processor(images=_as_image(image), return_tensors="pt"))
        if reference is None:
            raise ValueError(
                'TTSR needs a reference image: pipe(image, reference=...) or {"image": ..., "reference": ...}'
            )
        inputs = self.image_processor(images=_as_image(image), references=_as_image(reference), return_tensors="pt")
        return dict(inputs)

    def _forward(
        self, model_inputs: dict[str, torch.Tensor], task: str | None = None, self_ensemble: bool = False
    ) -> dict[str, torch.Tensor]:
        inputs = {key: value.to(self.model.dtype) for key, value in model_inputs.items()}
        if self._is_ipt:
            outputs = self.model(**inputs, task=task, self_ensemble=self_ensemble)
        else:
            outputs = self.model(**inputs)
        return {"reconstruction": outputs.reconstruction}

    def postprocess(self, model_outputs: dict[str, torch.Tensor]) -> PIL.Image.Image | list[PIL.Image.Image]:
        images = self.image_processor.postprocess(model_outputs["reconstruction"])
        return images[0] if len(images) == 1 else images
