"""The base of hf_xcv's image processors with a fixed pipeline (TTSR's, IPT's): their own settings only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import PIL.Image
import torch
from transformers.image_processing_backends import PilBackend

from ..remote_code import RemoteCodeMixin
from ..utils.errors import UsageError
from .restoration import quantize

# Keys that saved processor configs carry and that hold no setting.
IGNORED_KEYS = ("image_processor_type", "processor_class", "auto_map")


class FixedPipelineProcessor(RemoteCodeMixin, PilBackend):
    """A PIL-backend image processor whose pipeline is fixed (as the original code's): it takes and saves its own
    ``SETTINGS`` only, refuses any other by name (transformers' resize / rescale / normalise settings do not apply),
    and checks them with :meth:`check_settings` when built."""

    SETTINGS: ClassVar[tuple[str, ...]] = ()
    do_resize = False
    do_rescale = False
    do_normalize = False

    def __init__(self, **kwargs: Any) -> None:
        kwargs = {key: value for key, value in kwargs.items() if key not in IGNORED_KEYS}
        unknown = sorted(set(kwargs) - set(self.SETTINGS))
        if unknown:
            raise UsageError(f"unknown setting(s) {unknown}; {type(self).__name__} takes {list(self.SETTINGS)}")
        super().__init__(**kwargs)
        self.check_settings()

    def check_settings(self) -> None:
        """ValueError naming a setting out of range."""

    def to_dict(self) -> dict[str, Any]:
        saved = super().to_dict()
        return {key: saved[key] for key in (*self.SETTINGS, "image_processor_type") if key in saved}

    @staticmethod
    def to_pil_images(
        reconstruction: Any,
        target_sizes: Sequence[tuple[int, int]] | None,
        *,
        value_range: tuple[float, float],
    ) -> list[PIL.Image.Image]:
        """``reconstruction`` (B, 3, H, W) (or a model output holding one as ``.reconstruction``) -> B RGB PIL images
        of its ``value_range`` (the model's) quantized to 0-255 uint8 (:func:`.restoration.quantize`), each cropped to
        its (height, width) of ``target_sizes`` from the top left; ValueError naming a wrong shape or size."""
        tensor = getattr(reconstruction, "reconstruction", reconstruction)
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 4 or tensor.shape[1] != 3:
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise UsageError(f"postprocess takes the (batch, 3, height, width) reconstruction, got {shape}")
        if target_sizes is not None and len(target_sizes) != tensor.shape[0]:
            raise UsageError(f"{len(target_sizes)} target_sizes for {tensor.shape[0]} images")
        for index, size in enumerate(target_sizes or ()):
            if len(size) != 2 or not (0 < size[0] <= tensor.shape[2] and 0 < size[1] <= tensor.shape[3]):
                raise UsageError(
                    f"target_sizes[{index}] = {tuple(size)} is no (height, width) within the {tensor.shape[2]}x"
                    f"{tensor.shape[3]} reconstruction"
                )
        images = []
        for index, image in enumerate(quantize(tensor, value_range)):
            if target_sizes is not None:
                height, width = target_sizes[index]
                image = image[:, :height, :width]
            images.append(PIL.Image.fromarray(image.permute(1, 2, 0).numpy(), mode="RGB"))  # (H, W, 3) uint8
        return images
