"""Model cards with YAML metadata and a model-index of measured results, via huggingface_hub's ModelCard."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

# The card templates, package data of hf_xcv (a checkout's top-level model_cards/ links here).
TEMPLATES = Path(__file__).resolve().parents[1] / "model_cards"

_VISION_FIELDS = (
    "image_size", "patch_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "intermediate_size", "pooling", "attention_type",
)  # fmt: skip
# The config fields of the card's "Model" table, per model_type (other types: the vision fields they have).
_CONFIG_FIELDS = {
    "xcv_transformer": (
        "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
        "encoder_ffn_dim", "decoder_ffn_dim", "dropout", "label_smoothing", "position_embedding_type",
        "normalize_before", "attention_type",
    ),
}  # fmt: skip


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

    import hf_xcv

    return [
        ("hf_xcv", hf_xcv.__version__),
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
) -> ModelCard:
    """Render ``template_path`` with the model's facts and a model-index of ``results``.

    ``tags`` are added to hf_xcv, the model type and the task; ``language`` lists the languages of a text model;
    ``template_vars`` are further variables of the template.
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
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        license=license,
        language=list(language) if language else None,
        tags=["hf_xcv", config.model_type, task_type, *tags],
        datasets=[dataset_id],
        metrics=sorted({r.metric for r in results}),
        eval_results=_eval_results(dataset_id, dataset_name, results, task_type),
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(template_path),
        model_name=model_name,
        repo_id=repo_id,
        architecture=type(model).__name__,
        model_type=config.model_type,
        num_parameters=f"{model.num_parameters():,}",
        dataset_name=dataset_name,
        dataset_split=results[0].split,
        results=[{"split": r.split, "metric": r.metric, "value": f"{r.value:.4f}"} for r in results],
        config_rows=[
            (key, getattr(config, key))
            for key in _CONFIG_FIELDS.get(config.model_type, _VISION_FIELDS)
            if hasattr(config, key)
        ],
        hyperparameters=list(hyperparameters.items()),
        command=command,
        versions=_versions(),
        **(template_vars or {}),
    )


def write_model_card(card: ModelCard, folder: str | os.PathLike) -> Path:
    path = Path(folder) / "README.md"
    card.save(str(path))
    return path
