"""Model cards with YAML metadata and a model-index of measured results, via huggingface_hub's ModelCard: the card
every ``save_pretrained`` writes (:func:`default_model_card`) and the training scripts' (:func:`build_model_card`)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .registry import MODEL_TYPES, auto_class_name, find_exporter, pipeline_tag
from .version import __version__

# The card templates, package data of hf_xcv (a checkout's top-level model_cards/ links here).
TEMPLATES = Path(__file__).resolve().parent / "model_cards"
# Cards name hf_xcv as the library: loading the model needs it (the Hub then shows no bare-transformers snippet).
LIBRARY_NAME = "hf_xcv"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def hub_id(name: str | os.PathLike | None) -> str | None:
    """``name`` when it reads as a Hub repo id and is no local path, else None: a card's ``base_model`` and
    ``datasets`` list only what the Hub can link to."""
    if name is None or os.path.exists(name):
        return None
    name = str(name)
    return name if _REPO_ID.match(name) and not name.endswith((".", "-")) else None


def dataset_label(dataset: str | os.PathLike) -> str:
    """How a card names a dataset: its Hub id, or a local folder's own name (a card is public: the path of the
    machine it was trained on is not)."""
    return hub_id(dataset) or os.path.basename(os.path.normpath(str(dataset)))


def quoted(text: str) -> str:
    """A string as a Python literal for a card's code, with non-ASCII text as text (not \\u escapes)."""
    return json.dumps(text, ensure_ascii=False)




@dataclass(frozen=True)
class MeasuredResult:
    """One number for the model-index: a metric on one split of one dataset."""

    metric: str  # e.g. "accuracy"
    value: float
    split: str  # e.g. "test"


def _versions() -> list[tuple[str, str]]:
    import accelerate
    import datasets
    import torch
    import transformers

    return [
        ("hf_xcv", __version__),
        ("transformers", transformers.__version__),
        ("torch", torch.__version__),
        ("accelerate", accelerate.__version__),
        ("datasets", datasets.__version__),
    ]


def _eval_results(
    dataset_id: str, dataset_name: str, results: Sequence[MeasuredResult], task_type: str
) -> list[EvalResult]:
    """The model-index: one entry per measured result."""
    return [
        EvalResult(
            task_type=task_type,
            dataset_type=dataset_id,
            dataset_name=dataset_name,
            dataset_split=r.split,
            metric_type=r.metric,
            metric_value=float(r.value),
        )
        for r in results
    ]


def build_model_card(
    template_path: str | os.PathLike,
    model: Any,
    *,
    repo_id: str,
    dataset_id: str,
    dataset_name: str,
    results: Sequence[MeasuredResult],
    hyperparameters: Mapping[str, Any],
    command: str,
    task_type: str = "image-classification",
    pipeline_tag: str = "image-classification",
    license: str = "apache-2.0",
    tags: Sequence[str] = ("vision",),
    language: Sequence[str] | None = None,
    template_vars: Mapping[str, Any] | None = None,
    base_model: str | None = None,
    dataset_on_hub: bool = False,
) -> ModelCard:
    """Render ``template_path`` with the model's facts and a model-index of ``results``.

    ``tags`` are added to hf_xcv, the model type and the task; ``language`` lists the languages of a text model;
    ``template_vars`` are further variables of the template. ``base_model`` (a Hub id) is what the model was
    fine-tuned from; ``dataset_on_hub`` says whether ``dataset_id`` is a Hub dataset (only those are listed
    under ``datasets``; the model-index names the dataset either way).
    """
    if not results:
        raise ValueError("a model card needs at least one measured result")
    for result in results:
        if result.value is None or result.value != result.value:  # None or NaN
            raise ValueError(f"result {result.metric} on {result.split} has no value")
    config = model.config
    model_name = repo_id.split("/")[-1]
    card_data = ModelCardData(
        model_name=model_name,
        library_name=LIBRARY_NAME,
        pipeline_tag=pipeline_tag,
        license=license,
        language=list(language) if language else None,
        tags=["hf_xcv", config.model_type, task_type, *tags],
        base_model=hub_id(base_model),
        datasets=[dataset_id] if dataset_on_hub else None,
        metrics=sorted({r.metric for r in results}),
        eval_results=_eval_results(dataset_id, dataset_name, results, task_type),
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(template_path),
        **_model_facts(model, repo_id, hub_id(base_model)),
        dataset_name=dataset_name,
        dataset_split=results[0].split,
        results=[{"split": r.split, "metric": r.metric, "value": f"{r.value:.4f}"} for r in results],
        hyperparameters=list(hyperparameters.items()),
        command=command,
        **(template_vars or {}),
    )


def _model_facts(model: Any, repo_id: str, base_model: str | None) -> dict[str, Any]:
    """What every card says of the model: names, size, its config table, how to load it, versions."""
    config = model.config
    return {
        "model_name": repo_id.split("/")[-1],
        "repo_id": repo_id,
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "num_parameters": f"{model.num_parameters():,}",
        "auto_class": auto_class_name(type(model)),
        "base_model": base_model,
        "exportable": can_export(config.to_dict()),
        "config_rows": [
            (key, getattr(config, key))
            for key in MODEL_TYPES[config.model_type].card_fields
            if hasattr(config, key)
        ],
        "versions": _versions(),
    }


def default_model_card(model: Any, repo_id: str, base_model: str | None = None) -> ModelCard:
    """The card every ``save_pretrained`` / ``push_to_hub`` of an hf_xcv model writes where there is none yet:
    the library, how to install and load it, what it was fine-tuned from."""
    config = model.config
    base = hub_id(base_model)
    card_data = ModelCardData(
        library_name=LIBRARY_NAME,
        pipeline_tag=pipeline_tag(type(model)),
        tags=["hf_xcv", config.model_type],
        base_model=base,
    )
    return ModelCard.from_template(
        card_data, template_path=str(TEMPLATES / "model.md"), **_model_facts(model, repo_id, base)
    )


def can_export(config_dict: dict[str, Any]) -> bool:
    """Whether a config has an equivalent in transformers' own format (what a card says about leaving hf_xcv)."""
    try:
        find_exporter(config_dict.get("model_type")).export_config(config_dict)
    except ValueError:
        return False
    return True


def write_model_card(card: ModelCard, folder: str | os.PathLike) -> Path:
    path = Path(folder) / "README.md"
    card.save(str(path))
    return path
