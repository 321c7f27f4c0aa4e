"""Model cards with YAML metadata and a model-index of measured results, via huggingface_hub's ModelCard: the card
every ``save_pretrained`` / ``push_to_hub`` writes (:func:`card_for_save`), the training scripts'
(:func:`build_model_card`), and the section every card has on using the model without hf_xcv
(:func:`use_without_section`).

A card describes the weights it sits next to. What one written by ``save_pretrained`` / ``push_to_hub`` keeps of the
card of the checkpoint the model was loaded from (:class:`LoadedCheckpoint`, recorded by ``from_pretrained``) rests on
one test, :func:`model_fingerprint` of the model as loaded against the model as saved (its configuration and every
tensor, byte for byte):

* the model is unchanged: the source's card describes it. A card hf_xcv wrote is kept, its text pointed at the new
  repo (the quoted repo id of its code, the "Use without hf_xcv" section) and its links at the configured Hub; the
  measured results (model-index) of any other card become the results of hf_xcv's card of the model.
* the model has changed (fine-tuned, another dtype, another config): nothing says how well it does. hf_xcv's card of
  the model names the source as its base model and keeps the source's measured results under their own heading,
  "Results of the checkpoint it was loaded from", out of the model-index (which the Hub shows as the model's own);
  license, datasets and languages carry over.

A destination with a card keeps it, with one exception (:func:`card_to_push`): a changed model pushed back to the Hub
repo it was loaded from replaces that repo's card as above when the card is hf_xcv's and still the one the model was
loaded with (its results are of the weights the push replaces).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import torch
from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData
from huggingface_hub import constants as hub_constants
from transformers.utils import cached_file

from .registry import MODEL_TYPES, auto_class_name, exported_types, find_exporter, pipeline_tag
from .version import __version__

# The card templates, package data of hf_xcv (a checkout's top-level model_cards/ links here).
TEMPLATES = Path(__file__).resolve().parent / "model_cards"
# Cards name hf_xcv as the library: loading the model needs it (the Hub then shows no bare-transformers snippet).
LIBRARY_NAME = "hf_xcv"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
# The section on using the model without hf_xcv lies between these lines; a kept card gets it anew for its repo.
USE_WITHOUT_BEGIN, USE_WITHOUT_END = "<!-- hf_xcv:use-without -->", "<!-- /hf_xcv:use-without -->"
_USE_WITHOUT = re.compile(re.escape(USE_WITHOUT_BEGIN) + ".*?" + re.escape(USE_WITHOUT_END), re.DOTALL)
_LOADED_FROM = re.compile(r'from_pretrained\("([^"]+)"')  # a card's own repo id: the first its code loads
# Config fields that say how a model runs or was saved, not what it computes: a fingerprint leaves them out.
_NOT_THE_MODEL = frozenset(
    {"architectures", "auto_map", "custom_pipelines", "transformers_version", "dtype", "torch_dtype",
     "output_attentions", "output_hidden_states", "return_dict", "use_cache"}
)  # fmt: skip


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


def hub_url() -> str:
    """The Hub a card links to: huggingface_hub's configured endpoint (``HF_ENDPOINT``), read when the card is made,
    which is where ``push_to_hub`` pushes."""
    return hub_constants.ENDPOINT.rstrip("/")


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
    """What every card says of the model: names, size, its config table, how to load it and how to use it without
    hf_xcv, versions; ``hub_url`` for links."""
    config = model.config
    return {
        "model_name": repo_id.split("/")[-1],
        "repo_id": repo_id,
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "num_parameters": f"{model.num_parameters():,}",
        "auto_class": auto_class_name(type(model)),
        "base_model": base_model,
        "hub_url": hub_url(),
        "use_without": use_without_section(model, repo_id),
        "config_rows": [
            (key, getattr(config, key)) for key in MODEL_TYPES[config.model_type].card_fields if hasattr(config, key)
        ],
        "versions": _versions(),
    }


def use_without_section(model: Any, repo_id: str) -> str:
    """A card's "Use without hf_xcv" section (between :data:`USE_WITHOUT_BEGIN` and :data:`USE_WITHOUT_END`): for a
    type transformers holds (:func:`~hf_xcv.registry.exported_types`), the export command and transformers' lines
    that load what it writes, or why the exporter refuses this configuration; for every type, the lines that load
    ``repo_id`` through its remote code (``trust_remote_code=True``, with hf_xcv installed but not imported)."""
    config = model.config
    entry = MODEL_TYPES[config.model_type]
    exported = config.model_type in exported_types()
    processor = "AutoImageProcessor" if entry.image_processor else "AutoTokenizer" if entry.tokenizer else None
    template = jinja2.Template((TEMPLATES / "use_without_hf_xcv.md").read_text(encoding="utf-8"))
    return template.render(
        begin=USE_WITHOUT_BEGIN, end=USE_WITHOUT_END, repo_id=repo_id, model_type=config.model_type,
        auto_class=auto_class_name(type(model)), processor_class=processor,
        processor_name="tokenizer" if processor == "AutoTokenizer" else "processor", exported=exported,
        refusal=export_problem({**config.to_dict(), "architectures": [type(model).__name__]}) if exported else None,
        exported_types=exported_types(), export_folder=f"{repo_id.split('/')[-1]}-transformers",
    ).strip()  # fmt: skip


def export_problem(config_dict: dict[str, Any]) -> str | None:
    """Why ``hf-xcv-convert to-transformers`` refuses a config (its exporter's own words), None when it writes it:
    the family's ``export_config`` is asked, and nothing is written."""
    try:
        exporter = find_exporter(config_dict.get("model_type"))
        with _quiet("hf_xcv.conversion"):  # what an export would drop (stochastic depth, ...) is no news for a card
            exporter.export_config(config_dict)
    except ValueError as err:
        return str(err)
    return None


def can_export(config_dict: dict[str, Any]) -> bool:
    """Whether a config has an equivalent in transformers' own format (what a card says about leaving hf_xcv)."""
    return export_problem(config_dict) is None


@contextmanager
def _quiet(package: str) -> Iterator[None]:
    """No log records from the loggers of ``package`` and its modules (a logger's filters do not see its children's
    records, so each gets one)."""
    names = list(logging.root.manager.loggerDict)
    loggers = [logging.getLogger(name) for name in names if name == package or name.startswith(package + ".")]

    def drop(record: logging.LogRecord) -> bool:
        return False

    for target in loggers:
        target.addFilter(drop)
    try:
        yield
    finally:
        for target in loggers:
            target.removeFilter(drop)


@dataclass(frozen=True)
class CarriedResults:
    """What hf_xcv's card of a model takes from the card of the checkpoint it was loaded from: the measured results,
    as the model's own (``own``: the model is that checkpoint) or under their own heading, and the license, datasets
    and languages (of the weights it derives from)."""

    source: str  # how the card names the checkpoint: a link to its Hub repo, or a local folder's name
    own: bool
    here: bool  # the checkpoint is an earlier version of the repo the card goes to
    results: tuple[EvalResult, ...] = ()
    metadata: tuple[tuple[str, Any], ...] = ()  # license, license_name, license_link, datasets, language

    @classmethod
    def of(cls, card: ModelCard, loaded: LoadedCheckpoint, own: bool, here: bool) -> CarriedResults:
        data = card.data
        keys = ("license", "license_name", "license_link", "datasets", "language")
        metadata = tuple((key, getattr(data, key, None)) for key in keys if getattr(data, key, None) is not None)
        return cls(loaded.link(), own, here, tuple(data.eval_results or ()), metadata)

    @property
    def rows(self) -> list[dict[str, str]]:
        """The results as the card's table shows them."""
        return [
            {
                "dataset": r.dataset_name or r.dataset_type,
                "split": r.dataset_split or "",
                "metric": r.metric_name or r.metric_type,
                "value": f"{r.metric_value:.4f}" if isinstance(r.metric_value, float) else str(r.metric_value),
            }
            for r in self.results
        ]


def default_model_card(
    model: Any, repo_id: str, base_model: str | None = None, carried: CarriedResults | None = None
) -> ModelCard:
    """hf_xcv's card of a model without one of its own: the library, how to install and load it, how to use it
    without hf_xcv, what it was fine-tuned from, and what it ``carried`` from the card of the checkpoint it was
    loaded from (measured results in the model-index only when they are the model's own)."""
    config = model.config
    base = hub_id(base_model)
    own = carried is not None and carried.own and bool(carried.results)
    card_data = ModelCardData(
        library_name=LIBRARY_NAME,
        pipeline_tag=pipeline_tag(type(model)),
        tags=["hf_xcv", config.model_type],
        base_model=base,
        model_name=repo_id.split("/")[-1] if own else None,
        metrics=sorted({r.metric_type for r in carried.results}) if own else None,
        eval_results=list(carried.results) if own else None,
        **dict(carried.metadata if carried is not None else ()),
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATES / "model.md"),
        carried=carried if carried is not None and carried.results else None,
        **_model_facts(model, repo_id, base),
    )


def model_fingerprint(model: Any) -> str | None:
    """A digest of what the model computes: its config (less the fields of :data:`_NOT_THE_MODEL`) and every tensor
    of its state dict, name, dtype, shape and bytes. None when a tensor cannot be read (the model then counts as
    changed)."""
    digest = hashlib.sha1(usedforsecurity=False)
    try:
        config = {k: v for k, v in model.config.to_dict().items() if not k.startswith("_") and k not in _NOT_THE_MODEL}
        digest.update(json.dumps(config, sort_keys=True, default=repr).encode())
        for name, tensor in sorted(model.state_dict().items()):
            meta = tensor.device.type == "meta"  # offloaded: only its name, dtype and shape are known
            digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)} {meta}\n".encode())
            if not meta:
                digest.update(tensor.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy())
    except (RuntimeError, TypeError, ValueError):
        return None
    return digest.hexdigest()


@dataclass(frozen=True)
class LoadedCheckpoint:
    """The folder or Hub repo a model was loaded from, as its cards see it (``from_pretrained`` records it).

    Attributes:
        name: the folder or repo as the user gave it.
        hub_id: the Hub repo; None for a local folder.
        folder: the local folder's absolute path; None for a Hub repo.
        card: its README.md when the model was loaded; None without one.
        fingerprint: :func:`model_fingerprint` of the model as loaded (None without a card: nothing to carry).
    """

    name: str
    hub_id: str | None
    folder: str | None
    card: str | None
    fingerprint: str | None

    def link(self) -> str:
        """How a card names it: a link to the Hub repo, or a local folder's own name (a card is public: the path of
        the machine it was made on is not)."""
        if self.hub_id is not None:
            return f"[{self.hub_id}]({hub_url()}/{self.hub_id})"
        return f"`{os.path.basename(os.path.normpath(self.name))}`"


def loaded_checkpoint(model: Any, source: str | os.PathLike | None, **hub_kwargs: Any) -> LoadedCheckpoint | None:
    """What ``from_pretrained`` records of ``source`` for the cards of ``model``, just loaded from it: its card (a
    Hub repo's is fetched now, with the loading's ``hub_kwargs``), and the model's fingerprint when there is one."""
    if source is None:
        return None
    local = os.path.exists(source)
    try:
        file = cached_file(
            str(source), "README.md", _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False, **hub_kwargs,
        )  # fmt: skip
        text = Path(file).read_text(encoding="utf-8") if file else None
    except (OSError, ValueError):  # no card to carry: an unreachable Hub, a file that is no text
        text = None
    return LoadedCheckpoint(
        name=str(source),
        hub_id=None if local else hub_id(source),
        folder=os.path.abspath(source) if local else None,
        card=text,
        fingerprint=model_fingerprint(model) if text is not None else None,
    )


def _parsed(text: str | None) -> ModelCard | None:
    """A card's text as a ModelCard; None for no card, or one without metadata (nothing to carry: no results, and
    not hf_xcv's)."""
    if text is None or not text.lstrip().startswith("---"):
        return None
    try:
        return ModelCard(text, ignore_metadata_errors=True)
    except ValueError:
        return None


def _unchanged(model: Any, loaded: LoadedCheckpoint) -> bool:
    return loaded.fingerprint is not None and loaded.fingerprint == model_fingerprint(model)


def card_for_save(model: Any, repo_id: str, loaded: LoadedCheckpoint | None) -> ModelCard:
    """The card ``save_pretrained`` / ``push_to_hub`` write for ``model`` where ``repo_id`` (a Hub repo, or the name
    of a folder) has none: the card of the checkpoint it was ``loaded`` from, kept or carried over as the module
    docstring says, else :func:`default_model_card`."""
    source = _parsed(loaded.card) if loaded is not None else None
    base = loaded.hub_id if loaded is not None and loaded.hub_id != repo_id else None
    if source is None:
        return default_model_card(model, repo_id, base)
    unchanged = _unchanged(model, loaded)
    if unchanged and source.data.library_name == LIBRARY_NAME:
        return _repointed(source, model, repo_id)
    here = loaded.hub_id is not None and loaded.hub_id == repo_id
    return default_model_card(model, repo_id, base, CarriedResults.of(source, loaded, own=unchanged, here=here))


def card_to_push(
    model: Any, repo_id: str, loaded: LoadedCheckpoint | None, api: HfApi, revision: str | None = None
) -> ModelCard | None:
    """The card ``push_to_hub`` pushes to ``repo_id`` before the model, or None to leave the repo's card as it is.

    A repo without a card gets :func:`card_for_save`'s (transformers would put its generic one there). A repo with
    one keeps it, unless the model was loaded from this repo, the repo's card is still the one it was loaded with,
    hf_xcv wrote it, and the model has changed since: that card's results are of the weights this push replaces, so
    it gives way to the card of a changed model (those results under their own heading, out of the model-index).
    """
    if not api.file_exists(repo_id, "README.md", revision=revision):
        return card_for_save(model, repo_id, loaded)
    if loaded is None or loaded.hub_id != repo_id:
        return None
    source = _parsed(loaded.card)
    if source is None or source.data.library_name != LIBRARY_NAME or _unchanged(model, loaded):
        return None
    current = Path(api.hf_hub_download(repo_id, "README.md", revision=revision)).read_text(encoding="utf-8")
    if current.strip() != loaded.card.strip():  # edited since: the repo's owner has spoken
        return None
    return default_model_card(model, repo_id, None, CarriedResults.of(source, loaded, own=False, here=True))


def card_to_save(model: Any, folder: str | os.PathLike, loaded: LoadedCheckpoint | None) -> ModelCard | None:
    """The card ``save_pretrained`` writes into ``folder``, or None to leave the folder's card as it is: what
    :func:`card_to_push` does for a Hub repo, for a local folder (the one the model was loaded from, saved back into
    after training further, gets the card of a changed model unless its card was edited since loading)."""
    name = os.path.basename(os.path.normpath(folder))
    path = Path(folder) / "README.md"
    if not path.exists():
        return card_for_save(model, name, loaded)
    if loaded is None or loaded.folder != os.path.abspath(folder):
        return None
    source = _parsed(loaded.card)
    if source is None or source.data.library_name != LIBRARY_NAME or _unchanged(model, loaded):
        return None
    if path.read_text(encoding="utf-8").strip() != loaded.card.strip():  # edited since: the owner has spoken
        return None
    return default_model_card(model, name, None, CarriedResults.of(source, loaded, own=False, here=True))


def _repointed(card: ModelCard, model: Any, repo_id: str) -> ModelCard:
    """A card hf_xcv wrote, for ``repo_id``: the repo its code loads, its "Use without hf_xcv" section and its link to
    its base model (at the configured Hub) rewritten; the rest, measured results included, as it was."""
    text = card.text
    own = _LOADED_FROM.search(text)
    if own is not None and own.group(1) != repo_id:
        text = text.replace(f'"{own.group(1)}"', f'"{repo_id}"')
    section = use_without_section(model, repo_id)
    if _USE_WITHOUT.search(text):
        text = _USE_WITHOUT.sub(lambda _: section, text)
    else:  # a card of an hf_xcv release without the section
        text = f"{text.rstrip()}\n\n{section}\n"
    base = card.data.base_model
    if isinstance(base, str):
        text = re.sub(r"\]\([^)\s]*/" + re.escape(base) + r"\)", lambda _: f"]({hub_url()}/{base})", text)
    kept = ModelCard(card.content, ignore_metadata_errors=True)
    kept.text = text
    return kept


def write_model_card(card: ModelCard, folder: str | os.PathLike) -> Path:
    path = Path(folder) / "README.md"
    card.save(str(path))
    return path
