"""Layer-wise learning-rate decay for fine-tuning (BEiT, MAE, Swin's SimMIM fine-tuning): the lower a layer, the
smaller its learning rate, as AdamW parameter groups for the scripts and for ``Trainer(optimizers=...)``.

With ``L`` layers, every parameter has a layer id in ``0 .. L + 1`` and the learning rate
``learning_rate * layer_decay ** (L + 1 - layer_id)``: the embeddings (patch and position embeddings, [CLS]) are
layer 0, block ``i`` (counting from 1) is layer ``i``, and what follows the blocks (final norm, pooler, head) is
layer ``L + 1``, at the full rate. This is BEiT's and MAE's convention (MAE's ``util/lr_decay.py``:
``get_layer_id_for_vit``, scales ``layer_decay ** (num_layers + 1 - layer_id)``). Per model type:

* ViT (``xcv_vit``): ``embeddings.*`` 0; ``encoder.layers.<i>.*`` ``i + 1``; the rest ``L + 1`` (``L`` blocks).
* Swin (``xcv_swin``): the blocks are numbered across the stages (``L = sum(depths)``): block ``b`` of stage ``s`` is
  ``sum(depths[:s]) + b + 1``; a stage's patch merging (``encoder.layers.<s>.downsample``, at the end of the stage)
  takes the id of the stage's last block, ``sum(depths[:s + 1])``; ``embeddings.*`` 0; the rest (final norm, head; a
  backbone's per-stage output norms) ``L + 1``. This is the Swin authors' fine-tuning code (SimMIM's
  ``optimizer.py``, ``get_swin_layer``).
* DETR and Deformable DETR (``xcv_detr``, ``xcv_deformable_detr``): the decay runs within the backbone
  (``backbone.model.*``), by the backbone's own rule: transformers' ResNet numbers its residual blocks across the
  stages as Swin does (the stem, ``embedder``, is 0; ``L`` = the number of blocks); a Swin backbone as above. The
  transformer, the queries and the heads are all ``L + 1``.

Frozen parameters (``requires_grad=False``) are left out; every trainable parameter is in exactly one group. The
groups also split by weight decay as :func:`~.optim.parameter_groups` does (none on 1-D parameters and on the names
ending in ``no_weight_decay``). Each group carries its ``lr`` (transformers' schedulers, ``LambdaLR``, scale every
group's initial rate, so the ratios hold through warm-up and decay), and ``lr_scale`` and ``layer_id`` for the record.
"""

from __future__ import annotations

import re
from typing import Any

from torch import nn

from ..utils.errors import UsageError
from .optim import NO_WEIGHT_DECAY, decays

_VIT_EMBEDDINGS = re.compile(r"(?:^|\.)embeddings\.")
_VIT_BLOCK = re.compile(r"(?:^|\.)encoder\.layers\.(\d+)\.")
_SWIN_BLOCK = re.compile(r"(?:^|\.)encoder\.layers\.(\d+)\.blocks\.(\d+)\.")
_SWIN_MERGING = re.compile(r"(?:^|\.)encoder\.layers\.(\d+)\.downsample\.")
_RESNET_STEM = re.compile(r"^embedder\.")
_RESNET_BLOCK = re.compile(r"^encoder\.stages\.(\d+)\.layers\.(\d+)\.")
_DETECTION_BACKBONE = re.compile(r"(?:^|\.)backbone\.model\.")
DETECTORS = ("xcv_detr", "xcv_deformable_detr")


def _vit_layer(name: str, num_layers: int) -> int:
    if _VIT_EMBEDDINGS.search(name):
        return 0
    block = _VIT_BLOCK.search(name)
    return int(block.group(1)) + 1 if block else num_layers + 1


def _swin_layer(name: str, depths: list[int]) -> int:
    if _VIT_EMBEDDINGS.search(name):
        return 0
    block = _SWIN_BLOCK.search(name)
    if block:
        stage, index = int(block.group(1)), int(block.group(2))
        return sum(depths[:stage]) + index + 1
    merging = _SWIN_MERGING.search(name)
    if merging:
        return sum(depths[: int(merging.group(1)) + 1])
    return sum(depths) + 1


def _resnet_layer(name: str, depths: list[int]) -> int:
    if _RESNET_STEM.search(name):
        return 0
    block = _RESNET_BLOCK.search(name)
    if block:
        stage, index = int(block.group(1)), int(block.group(2))
        return sum(depths[:stage]) + index + 1
    return sum(depths) + 1


def _backbone_rule(config: Any) -> tuple[Any, int]:
    """(name -> layer id, number of layers) of a detector's backbone config."""
    backbone = config.backbone_config
    kind = getattr(backbone, "model_type", None)
    if kind == "resnet":
        depths = list(backbone.depths)
        return (lambda name: _resnet_layer(name, depths)), sum(depths)
    if kind == "xcv_swin":
        depths = list(backbone.depths)
        return (lambda name: _swin_layer(name, depths)), sum(depths)
    raise UsageError(f"layer-wise learning-rate decay knows the layers of resnet and xcv_swin backbones, not {kind!r}")


SUPPORTED = ("xcv_vit", "xcv_swin", *DETECTORS)


def layer_ids(model: nn.Module) -> tuple[dict[str, int], int]:
    """Every parameter's layer id (``name -> id`` in ``0 .. L + 1``, by the rules of the module's text) and the
    number of layers ``L``. A UsageError for a model type without rules (see :data:`SUPPORTED`)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    names = [name for name, _ in model.named_parameters()]
    if model_type == "xcv_vit":
        num_layers = config.num_hidden_layers
        return {name: _vit_layer(name, num_layers) for name in names}, num_layers
    if model_type == "xcv_swin":
        depths = list(config.depths)
        return {name: _swin_layer(name, depths) for name in names}, sum(depths)
    if model_type in DETECTORS:
        rule, num_layers = _backbone_rule(config)
        ids = {}
        for name in names:
            inside = _DETECTION_BACKBONE.search(name)
            ids[name] = rule(name[inside.end() :]) if inside else num_layers + 1
        return ids, num_layers
    raise UsageError(
        f"layer-wise learning-rate decay knows the layers of {list(SUPPORTED)}, not of a {model_type!r} model "
        f"({type(model).__name__})"
    )


def layer_scale(layer_id: int, num_layers: int, layer_decay: float) -> float:
    """The factor of the learning rate of layer ``layer_id``: ``layer_decay ** (num_layers + 1 - layer_id)``."""
    return layer_decay ** (num_layers + 1 - layer_id)


def layer_decay_parameter_groups(
    model: nn.Module,
    learning_rate: float,
    weight_decay: float,
    layer_decay: float = 0.75,
    no_weight_decay: tuple[str, ...] = NO_WEIGHT_DECAY,
) -> list[dict[str, Any]]:
    """AdamW parameter groups with layer-wise learning-rate decay, split by weight decay: one group per (layer id,
    decayed or not) that has trainable parameters, with ``lr`` = ``learning_rate * layer_scale(...)``,
    ``weight_decay`` (``weight_decay``, or 0 for the parameters :func:`~.optim.decays` exempts), ``lr_scale`` and
    ``layer_id``; in order of layer, then decayed first.

    ``Trainer(..., optimizers=(torch.optim.AdamW(layer_decay_parameter_groups(model, 5e-4, 0.05, 0.65)), None))``;
    ``layer_decay=1`` gives :func:`~.optim.parameter_groups`' two groups, split by layer.
    """
    if not 0.0 < layer_decay <= 1.0:
        raise UsageError(f"layer_decay must lie in (0, 1], got {layer_decay}")
    ids, num_layers = layer_ids(model)
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        layer, decayed = ids[name], decays(name, param, no_weight_decay)
        if (layer, not decayed) not in groups:
            scale = layer_scale(layer, num_layers, layer_decay)
            groups[(layer, not decayed)] = {
                "params": [], "weight_decay": weight_decay if decayed else 0.0, "lr": learning_rate * scale,
                "lr_scale": scale, "layer_id": layer,
            }  # fmt: skip
        groups[(layer, not decayed)]["params"].append(param)
    return [groups[key] for key in sorted(groups)]
