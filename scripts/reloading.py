"""What the demo's reload checks share: load a trained folder through the Auto classes in this (fresh) process and
read the metrics its model card records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from transformers import AutoImageProcessor

import hf_xcv  # noqa: F401  (registers the hf_xcv model types)


def recorded_metrics(folder: Path) -> dict[str, float]:
    """metric type -> value of the model-index in the folder's model card."""
    meta = yaml.safe_load((folder / "README.md").read_text().split("---")[1])
    return {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}


def load_trained(folder: Path, auto_class: Any) -> tuple[Any, Any, dict[str, float]]:
    """(model in eval mode, image processor, the card's metrics) of ``folder``, loaded through ``auto_class``."""
    model = auto_class.from_pretrained(folder).eval()
    processor = AutoImageProcessor.from_pretrained(folder)
    print(f"loaded {type(model).__name__} ({model.config.model_type}) and {type(processor).__name__} from {folder}")
    return model, processor, recorded_metrics(folder)
