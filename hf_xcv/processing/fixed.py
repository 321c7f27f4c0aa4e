"""The base of hf_xcv's image processors with a fixed pipeline (TTSR's, IPT's): their own settings only."""

from __future__ import annotations

from typing import Any, ClassVar

from transformers.image_processing_backends import PilBackend

# Keys that saved processor configs carry and that hold no setting.
IGNORED_KEYS = ("image_processor_type", "processor_class", "auto_map")


class FixedPipelineProcessor(PilBackend):
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
            raise ValueError(f"unknown setting(s) {unknown}; {type(self).__name__} takes {list(self.SETTINGS)}")
        super().__init__(**kwargs)
        self.check_settings()

    def check_settings(self) -> None:
        """ValueError naming a setting out of range."""

    def to_dict(self) -> dict[str, Any]:
        saved = super().to_dict()
        return {key: saved[key] for key in (*self.SETTINGS, "image_processor_type") if key in saved}
