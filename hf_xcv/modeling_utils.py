"""The base class of every hf_xcv model: strict, explicit checkpoint loading.

transformers' ``from_pretrained`` fills missing weights with random values and drops unknown ones
with a warning. For hf_xcv that would hide a broken or mismatched checkpoint, so loading here

* converts checkpoints of other libraries' model types (e.g. transformers' ``vit``) on load,
* refuses checkpoints of a model type it cannot take, naming both types,
* raises when a weight the checkpoint's own architecture has is missing, or when the checkpoint holds
  weights that architecture does not have (a task head may be missing: that is how fine-tuning starts from a
  backbone checkpoint; a head of another task may be left over),
* initialises and reports what the requested configuration adds beyond the checkpoint's own (a new
  attention core, ``from_pretrained(path, attention_type="performer")``) or the requested class beyond the class the
  checkpoint was saved from (a Swin backbone's output norms, loaded from a Swin classifier; the base model's prefix
  is added or removed as transformers does), and what it no longer uses,
* raises ``CheckpointMismatchError`` (a ValueError and, as transformers raises, a RuntimeError) for backbone
  weights of the wrong shape,
* turns a truncated or corrupt weights file into an error naming the file,

and every error and report names the user's path, never a temporary conversion folder.
"""

from __future__ import annotations

import inspect
import logging
import os
import pickle
import re
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.generation.configuration_utils import ALL_STATIC_CACHE_IMPLEMENTATIONS

from .attention import AttentionCore
from .checkpoint_conversion import convert_checkpoint
from .configuration_utils import check_attention_serves
from .conversion import (
    CheckpointMismatchError,
    CorruptCheckpointError,
    check_local_source,
    find_corrupt_weights,
    load_config_dict,
    load_state_dict,
    split_hub_kwargs,
)
from .integrations.peft import hold_frozen_batch_norms
from .layers import SinusoidalPositionEmbedding, check_pixel_tensor, sinusoidal_table
from .model_card import card_to_push, card_to_save, loaded_checkpoint
from .registry import MODEL_TYPES, convertible_sources, find_converter
from .utils.checks import check_batch_not_empty, check_class_labels

logger = logging.getLogger(__name__)

_LISTED_KEYS = 8  # how many offending keys an error message shows


def _show(keys: list[str]) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - _LISTED_KEYS} more" if len(keys) > _LISTED_KEYS else ""
    return ", ".join(keys[:_LISTED_KEYS]) + more


def _show_shapes(mismatches: list[tuple[str, Any, Any]]) -> str:
    """(key, checkpoint shape, model shape) triples, as ``key (checkpoint [3, 32], model [5, 32])``."""
    return _show([f"{key} (checkpoint {list(theirs)}, model {list(ours)})" for key, theirs, ours in mismatches])


class XcvPreTrainedModel(PreTrainedModel):
    """PreTrainedModel with conversion on load and strict weight checks (see the module docstring), the
    attention requests of the model, and one policy for extra keyword arguments (:meth:`take_kwargs`)."""

    # What the model asks of its attention core: the keyword requests of hf_xcv.attention.capability_problems
    # ({"causal": True}, {"grid_available": True}, ...), checked at construction; None when the class serves no
    # single request set (a bare backbone that both causal and bidirectional heads wrap). The registry-driven
    # tests read it to know which entries each model serves.
    attention_requests: ClassVar[dict[str, Any] | None] = None
    attention_role: ClassVar[str] = "this model"  # the model in words, for the refusal ("a ViT encoder")
    # The pass-through keyword arguments (what transformers' Trainer and generate() send through **kwargs) this
    # class honours, e.g. {"num_items_in_batch"} for a loss normalised over gradient accumulation.
    _honoured_kwargs: ClassVar[frozenset[str]] = frozenset()

    # Top-level modules of task heads across a family (e.g. "classifier"): their weights may be
    # missing from a checkpoint (a new head) or left over (a head this class does not have).
    _task_head_modules: ClassVar[tuple[str, ...]] = ()
    # True for models with a task head: conversion then drops parts only a bare backbone keeps
    # (e.g. transformers' ViT pooler, which its classification model ignores too).
    _is_task_model: ClassVar[bool] = False
    # Weights whose shape follows a setting that fine-tuning may change (a window, a resolution), as regexes over
    # state-dict keys: a checkpoint of another shape is resampled by :meth:`resample_weight`, and logged.
    _resampled_weights: ClassVar[tuple[str, ...]] = ()

    def resample_weight(self, key: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor | None:
        """``tensor`` (a checkpoint's ``key``) resampled to the model's ``shape``; None when it cannot be."""
        return None

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike | None, *model_args: Any, **kwargs: Any):
        config = kwargs.get("config")
        if pretrained_model_name_or_path is None or (config is not None and not isinstance(config, (str, os.PathLike))):
            return cls._load_checked(pretrained_model_name_or_path, *model_args, **kwargs)
        hub_kwargs, _ = split_hub_kwargs(kwargs)
        check_local_source(config if isinstance(config, (str, os.PathLike)) else pretrained_model_name_or_path)
        try:
            source_type = load_config_dict(config or pretrained_model_name_or_path, **hub_kwargs).get("model_type")
        except OSError:
            source_type = None  # no config: transformers' own loading gives its usual error
        target_type = cls.config_class.model_type
        if source_type is None or source_type == target_type:
            return cls._load_checked(pretrained_model_name_or_path, *model_args, **kwargs)
        if find_converter(target_type, source_type) is None:
            raise ValueError(
                f"{pretrained_model_name_or_path} holds a checkpoint of model_type {source_type!r}; "
                f"{cls.__name__} loads {target_type!r} checkpoints and converts {convertible_sources(target_type)}"
            )
        return cls._load_converted(pretrained_model_name_or_path, *model_args, **kwargs)

    @classmethod
    def _load_converted(cls, source: str | os.PathLike, *model_args: Any, **kwargs: Any):
        hub_kwargs, rest = split_hub_kwargs(kwargs)
        rest.pop("config", None)
        with tempfile.TemporaryDirectory(prefix="hf_xcv-convert-") as tmp:
            converted = os.path.join(tmp, "converted")
            try:
                convert_checkpoint(
                    source, converted, cls.config_class.model_type, for_task_model=cls._is_task_model, **hub_kwargs
                )
            except ValueError as err:  # the converter's words, with the user's path (never the conversion folder)
                message = str(err).replace(converted, str(source))
                if str(source) not in message:
                    message = f"cannot convert {source}: {message}"
                raise type(err)(message) from err
            result = cls._load_checked(converted, *model_args, shown_as=source, **rest)
        model = result[0] if isinstance(result, tuple) else result
        model.config._name_or_path = str(source)
        model.name_or_path = str(source)
        return result

    @classmethod
    def _load_checked(
        cls, path: str | os.PathLike | None, *model_args: Any, shown_as: str | os.PathLike | None = None, **kwargs: Any
    ):
        """transformers' loading, then the checks of the module docstring; ``shown_as`` is the path the user
        gave when ``path`` is a conversion folder."""
        shown = path if shown_as is None else shown_as
        want_info = kwargs.pop("output_loading_info", False)
        # Mismatched shapes are judged (and named, with their shapes) by _check_loading_info, not by transformers'
        # bare RuntimeError
        new_heads = kwargs.pop("ignore_mismatched_sizes", False)
        hub_kwargs, _ = split_hub_kwargs(kwargs)
        try:
            with _reports_naming(path, shown):
                model, info = super().from_pretrained(
                    path, *model_args, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
                )
        except (SafetensorError, OSError, EOFError, pickle.UnpicklingError, RuntimeError) as err:
            corrupt = find_corrupt_weights(path) if path is not None else None
            if corrupt is not None:
                raise CorruptCheckpointError(corrupt.replace(str(path), str(shown))) from err
            if isinstance(err, SafetensorError):
                raise CorruptCheckpointError(f"a weights file of {shown} is corrupt or truncated: {err}") from err
            raise
        model._resample_mismatched(info, path, shown, hub_kwargs)
        model._check_loading_info(info, path, shown, hub_kwargs, new_heads)
        # What the model's cards may take from its source: its card, whether it is a Hub repo (judged now, where a
        # local folder exists) and the model as loaded (hf_xcv.model_card)
        model._loaded_from = loaded_checkpoint(model, shown, **hub_kwargs)
        return (model, info) if want_info else model

    @classmethod
    def register_for_auto_class(cls, auto_class: Any = "AutoModel") -> None:
        """Nothing to register: the config's save writes the remote code (:mod:`hf_xcv.remote_code`). transformers
        calls this on a class it loaded by remote code; its own registration would make the next save copy hf_xcv's
        source file."""

    def _initialize_weights(self, module: nn.Module, is_custom_code: bool = False) -> None:
        # An attention core's own tensors (random features, identity projections, ...) are not what a model's
        # _init_weights makes: a core missing from a checkpoint starts as a freshly built one.
        if isinstance(module, AttentionCore) and not getattr(module, "_is_hf_initialized", False):
            module.initialize_unloaded_()
        super()._initialize_weights(module, is_custom_code)

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        """transformers' ``save_pretrained``, and a model card (README.md) where the folder has none: it names
        hf_xcv as the library, says how to install and load the model, and what it was fine-tuned from. Saved back
        into the folder it was loaded from after changing, the model's card replaces that folder's (unless edited
        since): its results were of the weights this save replaces (:func:`hf_xcv.model_card.card_to_save`)."""
        result = super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            card = card_to_save(self, save_directory, getattr(self, "_loaded_from", None))
            if card is not None:
                card.save(os.path.join(save_directory, "README.md"))
        return result

    def push_to_hub(self, repo_id: str, *args: Any, **kwargs: Any) -> Any:
        """transformers' ``push_to_hub``, hf_xcv's card first (:func:`hf_xcv.model_card.card_to_push`): a repo without
        one gets it (transformers would put its generic card there, and it keeps and tags an existing one), and so
        does the repo the model was loaded from when the model has changed since and its card is still hf_xcv's
        card of the weights this push replaces."""
        from huggingface_hub import HfApi

        token, revision = kwargs.get("token"), kwargs.get("revision")
        api = HfApi(token=token)
        repo_id = api.create_repo(repo_id, private=kwargs.get("private"), exist_ok=True).repo_id
        card = card_to_push(self, repo_id, getattr(self, "_loaded_from", None), api, revision)
        if card is not None:
            card.push_to_hub(repo_id, token=token, revision=revision)
        return super().push_to_hub(repo_id, *args, **kwargs)

    def __init__(self, config, *inputs: Any, **kwargs: Any):
        super().__init__(config, *inputs, **kwargs)
        # attention_type None: the model's own attention, no registry core (TTSR's hard attention)
        if self.attention_requests is not None and getattr(config, "attention_type", None) is not None:
            check_attention_serves(config.attention_type, self.attention_requests, self.attention_role)

    def train(self, mode: bool = True) -> XcvPreTrainedModel:
        """``nn.Module.train``, except that a BatchNorm whose parameters are frozen (by peft, ``freeze_backbone``,
        frozen backbone stages) stays in eval mode: it keeps its running statistics, which an adapter does not save
        (:func:`hf_xcv.integrations.peft.hold_frozen_batch_norms`)."""
        super().train(mode)
        return hold_frozen_batch_norms(self) if mode else self

    def take_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of a ``forward(**kwargs)`` call that this model honours (``_honoured_kwargs``,
        e.g. ``num_items_in_batch`` for its loss), for the caller to pass on.

        Nothing is silently dropped: any other key with a value is refused with the names the model accepts
        (its explicit parameters and the honoured keys). A None value passes nothing and is ignored, as
        transformers sends ``None`` for arguments it does not use.
        """
        unknown = sorted(key for key, value in kwargs.items() if value is not None and key not in self._honoured_kwargs)
        if unknown:
            explicit = [
                name for name in inspect.signature(type(self).forward).parameters if name not in ("self", "kwargs")
            ]
            raise ValueError(
                f"{type(self).__name__}.forward got unexpected arguments {unknown}; it accepts "
                f"{sorted(set(explicit) | self._honoured_kwargs)}"
            )
        return {key: value for key, value in kwargs.items() if value is not None}

    def take_cache(self, cache: Cache | None, kwargs: dict[str, Any]) -> Cache | None:
        """``cache``, or what was passed as ``past_key_values`` (its old name, which transformers 5 still takes
        with a deprecation warning; taken out of ``kwargs`` here so that it is never swallowed)."""
        old = kwargs.pop("past_key_values", None)
        if old is None:
            return cache
        if cache is not None:
            raise ValueError("pass cache or past_key_values (its old name), not both")
        warnings.warn("past_key_values is deprecated: pass the key/value cache as cache=", FutureWarning, stacklevel=3)
        return old

    def checked_pixels(self, pixel_values: torch.Tensor | None) -> torch.Tensor:
        """``pixel_values`` checked (a 4-D tensor with the model's ``num_channels``, at least one image) and cast to
        the weights' dtype: what every image model does first."""
        if pixel_values is None:
            raise ValueError("pixel_values is required")
        check_pixel_tensor(pixel_values, self.config.num_channels)
        check_batch_not_empty("pixel_values", pixel_values)
        dtype = next(self.parameters()).dtype
        return pixel_values.to(dtype) if pixel_values.dtype != dtype else pixel_values

    def classification_loss(self, labels: torch.Tensor, logits: torch.Tensor, **loss_kwargs: Any) -> torch.Tensor:
        """The loss of a classification head (transformers' ``loss_function``: cross-entropy, binary cross-entropy
        or MSE by ``config.problem_type``), after class-index labels are checked to lie in [0, num_labels) (-100,
        which cross-entropy ignores, allowed): every classification head computes its loss here.

        Soft targets (Mixup / CutMix, :class:`hf_xcv.data.MixupCutmix`): with ``config.problem_type ==
        "single_label_classification"``, floating labels of shape (B, num_labels) are class probabilities and the
        loss is the cross-entropy against them, :func:`hf_xcv.losses.soft_target_cross_entropy`, with the matrix
        taken as it is (the mixer smoothed it; no config here has a label smoothing). Class ids are unchanged. With
        ``problem_type`` None such a matrix keeps transformers' meaning, multi-hot targets of a binary
        cross-entropy: set ``problem_type="single_label_classification"`` to train on soft targets.
        ``num_items_in_batch`` (Trainer's count of label entries: num_labels per row of a matrix) divides the
        summed loss by the rows it counts, as it does for class ids."""
        config = self.config
        if config.problem_type == "single_label_classification" and labels.is_floating_point() and labels.dim() == 2:
            from .losses.soft_target import soft_target_cross_entropy

            labels = labels.to(logits.device)
            count = loss_kwargs.get("num_items_in_batch")
            if count is None:
                return soft_target_cross_entropy(logits, labels)
            if isinstance(count, torch.Tensor):
                count = count.to(logits.device)
            return soft_target_cross_entropy(logits, labels, reduction="sum") / (count / config.num_labels)
        if config.problem_type is None:  # transformers' rule for the loss it picks
            class_indices = config.num_labels > 1 and labels.dtype in (torch.long, torch.int)
        else:
            class_indices = config.problem_type == "single_label_classification"
        if class_indices:
            check_class_labels(labels, config.num_labels)
        return self.loss_function(labels, logits, config, **loss_kwargs)

    def _resolve_outputs(self, output_attentions: bool | None, output_hidden_states: bool | None) -> tuple[bool, bool]:
        """The call's ``output_attentions`` / ``output_hidden_states``, falling back to the config's."""
        attentions = self.config.output_attentions if output_attentions is None else output_attentions
        hidden = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return bool(attentions), bool(hidden)

    def _is_head_key(self, key: str) -> bool:
        prefix = self.base_model_prefix + "."
        key = key[len(prefix) :] if key.startswith(prefix) else key
        return key.split(".", 1)[0] in self._task_head_modules

    @torch.no_grad()
    def _resample_mismatched(self, info: dict[str, Any], path: Any, shown: Any, hub_kwargs: dict[str, Any]) -> None:
        """Checkpoint weights of ``_resampled_weights`` whose shape differs from the model's: read them again,
        resample them into the model, log it, and strike them from the mismatches."""
        patterns = [re.compile(p) for p in self._resampled_weights]
        wanted = [m for m in info.get("mismatched_keys") or () if any(p.fullmatch(m[0]) for p in patterns)]
        if not wanted or path is None:
            return
        checkpoint = load_state_dict(path, **hub_kwargs)
        tensors = dict(self.state_dict(keep_vars=True))
        prefix = self.base_model_prefix + "."
        done = []
        for key, old_shape, new_shape in wanted:
            source = next((k for k in (key, prefix + key, key.removeprefix(prefix)) if k in checkpoint), None)
            resampled = None if source is None else self.resample_weight(key, checkpoint[source], tuple(new_shape))
            if resampled is None or tuple(resampled.shape) != tuple(tensors[key].shape):
                continue
            tensors[key].copy_(resampled.to(tensors[key].dtype))
            done.append((key, old_shape, new_shape))
        if done:
            logger.warning("resampled %d weights of %s to this configuration: %s", len(done), shown, _show_shapes(done))
            info["mismatched_keys"] = [m for m in info["mismatched_keys"] if m not in done]

    def _check_loading_info(
        self, info: dict[str, Any], path: Any, shown: Any, hub_kwargs: dict[str, Any], new_heads: bool = False
    ) -> None:
        converted = "" if str(path) == str(shown) else f" (hf_xcv's names; {shown} was converted on load)"
        mismatches = sorted(info.get("mismatched_keys", ()))
        backbone = [m for m in mismatches if not self._is_head_key(m[0])]
        head = [m for m in mismatches if self._is_head_key(m[0])]
        if backbone:  # ignore_mismatched_sizes=True is for re-initialising a task head, not the backbone
            raise CheckpointMismatchError(
                f"checkpoint {shown} has {len(backbone)} backbone weights whose shapes do not match its config or "
                f"the settings passed to from_pretrained{converted}: {_show_shapes(backbone)}"
            )
        if head and not new_heads:
            raise CheckpointMismatchError(
                f"checkpoint {shown} has {len(head)} task-head weights whose shapes do not match its config or the "
                f"settings passed to from_pretrained (num_labels?){converted}: {_show_shapes(head)}; pass "
                "ignore_mismatched_sizes=True to re-initialise the head on purpose"
            )
        missing = {k for k in info.get("missing_keys", ()) if not self._is_head_key(k)}
        unexpected = {k for k in info.get("unexpected_keys", ()) if not self._is_head_key(k)}
        if missing or unexpected:
            own, saved, source = self._checkpoint_architecture_keys(path, hub_kwargs)
            if missing & own & saved:
                raise ValueError(
                    f"checkpoint {shown} is missing {len(missing & own & saved)} weights of the model{converted}: "
                    f"{_show(missing & own & saved)}"
                )
            if unexpected - own - saved:
                raise ValueError(
                    f"checkpoint {shown} has {len(unexpected - own - saved)} weights the model does not have "
                    f"(another architecture or size?){converted}: {_show(unexpected - own - saved)}"
                )
            if missing:  # what this class (a Swin backbone's output norms) or configuration (a new core) adds
                trained = {name for name, _ in self.named_parameters()}
                logger.warning(
                    "newly initialised tensors that this %s (attention_type=%r) has and the checkpoint (a %s as "
                    "saved) does not (as freshly built; parameters among them are untrained: fine-tune before use): "
                    "parameters %s; buffers %s",
                    type(self).__name__,
                    self.config.attention_type,
                    source,
                    _show([k for k in missing if k in trained]) or "none",
                    _show([k for k in missing if k not in trained]) or "none",
                )
            if unexpected:
                logger.warning("checkpoint weights this model does not use: %s", _show(list(unexpected)))
        new_head = [k for k in info.get("missing_keys", ()) if self._is_head_key(k)]
        new_head += [k for k, *_ in info.get("mismatched_keys", ())]
        if new_head:
            logger.warning("newly initialised task-head weights (train before use): %s", _show(new_head))

    def _checkpoint_architecture_keys(self, path: Any, hub_kwargs: dict[str, Any]) -> tuple[set[str], set[str], str]:
        """What the checkpoint should hold, from models built on the meta device under its own saved config (the
        model's own config when there is no saved one): the state-dict keys of this class; those of the class it was
        saved from (its ``architectures``: the family's classifier, bare model or backbone), under this class's names
        (the base model's prefix added or removed, as transformers loads them); and that class's name."""
        config, saved_class = self.config, type(self)
        if path is not None:
            try:
                saved = load_config_dict(path, **hub_kwargs)
            except OSError:
                saved = None
            if saved is not None:
                config = self.config_class.from_dict(saved)
                saved_class = _family_class(type(self), saved.get("architectures"))
        with torch.device("meta"):
            own = set(type(self)(config).state_dict())
            if saved_class is type(self):
                return own, own, saved_class.__name__
            theirs = set(saved_class(config).state_dict())
        return own, _named_as(theirs, own, self.base_model_prefix), saved_class.__name__


def _family_class(cls: type, architectures: list[str] | None) -> type:
    """The class of ``cls``'s model type that ``architectures`` names (``cls`` when it names none of them)."""
    entry = MODEL_TYPES.get(cls.config_class.model_type)
    classes = {} if entry is None else {model.__name__: model for model in entry.model_classes}
    return next((classes[name] for name in architectures or () if name in classes), cls)


def _named_as(keys: set[str], own: set[str], prefix: str) -> set[str]:
    """``keys`` of another class of the family under the names of a class whose keys are ``own``: the base model's
    ``prefix`` removed (a classifier's weights for the bare model) or added (a bare model's for a classifier)."""
    dotted = f"{prefix}."
    theirs_prefixed = any(key.startswith(dotted) for key in keys)
    ours_prefixed = any(key.startswith(dotted) for key in own)
    if theirs_prefixed and not ours_prefixed:
        return {key.removeprefix(dotted) for key in keys}
    if ours_prefixed and not theirs_prefixed:
        return {dotted + key for key in keys}
    return keys


class XcvGenerationMixin(GenerationMixin):
    """transformers' ``generate`` within what hf_xcv's generative models support.

    * Generation stops at the model's last position: ``max_length`` beyond ``generation_length_limit()`` is
      cut to it with a warning, instead of failing at that step and losing the output.
    * Keys and values go in a growing ``DynamicCache``; static caches (``cache_implementation="static"``, which
      hands every layer a buffer of the final length) are refused by name.
    """

    def generation_length_limit(self) -> int | None:
        """The longest sequence ``generate`` can produce (the positions the model has, plus the last token,
        which is never fed back); None without a limit."""
        return None

    def _prepare_generated_length(self, generation_config, *args: Any, **kwargs: Any):
        generation_config = super()._prepare_generated_length(generation_config, *args, **kwargs)
        limit = self.generation_length_limit()
        if limit is None:
            return generation_config
        prompt = kwargs.get("input_ids_length")
        if prompt is not None and not self.config.is_encoder_decoder and prompt >= limit:
            raise ValueError(
                f"the prompt has {prompt} tokens, but {type(self).__name__} has {limit - 1} positions "
                f"(max_position_embeddings): truncate it to at most {limit - 1} tokens, fewer to leave room for the "
                f"output (tokenizer(..., truncation=True, max_length={limit - 1}))"
            )
        if generation_config.max_length > limit:
            logger.warning(
                "generating up to %d tokens (the prompt and max_new_tokens, or max_length) goes beyond the %d "
                "positions of the model (max_position_embeddings); generation stops at %d tokens",
                generation_config.max_length,
                limit - 1,
                limit,
            )
            generation_config.max_length = limit
        return generation_config

    def _prepare_cache_for_generation(self, generation_config, *args: Any, **kwargs: Any):
        if generation_config.cache_implementation in ALL_STATIC_CACHE_IMPLEMENTATIONS:
            raise ValueError(
                f"cache_implementation={generation_config.cache_implementation!r} is not supported by "
                f"{type(self).__name__}: its attention keeps a growing DynamicCache (leave cache_implementation unset "
                "or 'dynamic')"
            )
        return super()._prepare_cache_for_generation(generation_config, *args, **kwargs)


@contextmanager
def _reports_naming(path: Any, shown: Any) -> Iterator[None]:
    """transformers' load report names the folder it loaded; while loading a conversion folder it names the
    user's path instead."""
    if path is None or str(path) == str(shown):
        yield
        return

    def rename(record: logging.LogRecord) -> bool:
        record.msg = str(record.msg).replace(str(path), str(shown))
        return True

    loggers = [logging.getLogger(name) for name in ("transformers.modeling_utils", "transformers.utils.loading_report")]
    for target in loggers:
        target.addFilter(rename)
    try:
        yield
    finally:
        for target in loggers:
            target.removeFilter(rename)


def init_sequence_model_weights(module: nn.Module, std: float) -> None:
    """The ``_init_weights`` of the token-sequence models: normal(0, std) Linear and Embedding weights (the
    padding row zeroed), zero biases, unit LayerNorms, and fixed sinusoid tables recomputed (they are
    non-persistent buffers, so loading off the meta device leaves them empty otherwise)."""
    if isinstance(module, nn.Linear):
        init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        init.normal_(module.weight, mean=0.0, std=std)
        if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
            init.zeros_(module.weight[module.padding_idx])
    elif isinstance(module, nn.LayerNorm):
        init.ones_(module.weight)
        init.zeros_(module.bias)
    elif isinstance(module, SinusoidalPositionEmbedding):
        init.copy_(module.table, sinusoidal_table(module.num_positions, module.dim, module.layout))
