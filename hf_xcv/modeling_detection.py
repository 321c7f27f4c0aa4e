"""What the models of DETR-style detectors share (DETR, Deformable DETR, and any detector after them): the backbone
wrapper, the output layouts, and the base class with the original training behaviour where transformers departs
from it (backbone stages after the first trained with BatchNorm frozen, frozen stages kept frozen after loading,
ResNet backbones on eager attention).

A detector family subclasses :class:`DetectionTransformerPreTrainedModel` and builds its backbone as a
:class:`DetectionBackbone`; the building blocks (post-norm block, box head, references in logit space) are
:mod:`hf_xcv.layers.detection`'s, and the set criterion, matcher and target checks :mod:`hf_xcv.losses`'.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import AutoBackbone, PretrainedConfig
from transformers import initialization as init
from transformers.utils import ModelOutput

from .conversion import check_local_source, load_state_dict
from .layers import freeze_batch_norms
from .layers.detection import backbone_stages, dilate_last_stage, resample_mask
from .losses import check_targets
from .modeling_utils import XcvPreTrainedModel
from .utils.errors import UsageError


@dataclass
class DetectionModelOutput(ModelOutput):
    """``last_hidden_state`` (B, Q, d): the decoder's output (after its final LayerNorm where the detector has one);
    ``encoder_last_hidden_state`` (B, N, d); hidden states and attention maps of both stacks when asked
    (``cross_attentions``: one per decoder layer). The fields are in the order of transformers' detectors' outputs
    (a ``Seq2SeqModelOutput`` without its cache), so that ``return_dict=False`` tuples index alike; a family adds
    its own fields after these."""

    last_hidden_state: torch.Tensor | None = None
    decoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None
    encoder_last_hidden_state: torch.Tensor | None = None
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class ObjectDetectionOutput(ModelOutput):
    """``loss`` (when labels are given: the weighted sum) and its unweighted parts ``loss_dict`` (the class and box
    losses, their ``_0``.. ``_{L-2}`` copies for the earlier decoder layers, and logging-only errors); ``logits``
    (B, Q, classes); ``pred_boxes`` (B, Q, 4) normalised (cx, cy, w, h) relative to each unpadded image;
    ``auxiliary_outputs``: the same two for every earlier decoder layer (when ``config.auxiliary_loss`` and labels are
    given, as transformers); the rest as :class:`DetectionModelOutput`."""

    loss: torch.Tensor | None = None
    loss_dict: dict[str, torch.Tensor] | None = None
    logits: torch.Tensor | None = None
    pred_boxes: torch.Tensor | None = None
    auxiliary_outputs: list[dict[str, torch.Tensor]] | None = None
    last_hidden_state: torch.Tensor | None = None
    decoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None
    encoder_last_hidden_state: torch.Tensor | None = None
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None


def detection_output(output_class: type[ModelOutput], outputs: ModelOutput, **heads: Any) -> ModelOutput:
    """A detector's output: the heads' fields, and every field of ``output_class`` the bare model's
    ``outputs`` also has (hidden states, attention maps, ...)."""
    shared = {name: getattr(outputs, name) for name in output_class.__dataclass_fields__ if name not in heads}
    return output_class(**{name: value for name, value in shared.items() if hasattr(outputs, name)}, **heads)


class DetectionBackbone(nn.Module):
    """The feature extractor: a transformers backbone (``AutoBackbone.from_config``: transformers' ResNet or
    hf_xcv's Swin) with frozen BatchNorm (``freeze_batch_norm``), DC5 (``dilation``: the last ResNet stage dilated),
    its first ``frozen_stages`` stages frozen (the stem and stages of :func:`~hf_xcv.layers.detection.backbone_stages`;
    -1: all), and the padding mask resampled to each feature map it reads (``out_features``)."""

    def __init__(
        self, backbone_config: PretrainedConfig, *, freeze_batch_norm: bool, dilation: bool, frozen_stages: int
    ):
        super().__init__()
        if backbone_config.model_type == "resnet":  # no attention: an sdpa request for the detector is not its own
            backbone_config._attn_implementation_internal = "eager"
        self.model = AutoBackbone.from_config(backbone_config)
        if freeze_batch_norm:
            freeze_batch_norms(self.model)
        if dilation:
            dilate_last_stage(self.model)
        self.frozen_stages = frozen_stages
        self.freeze_stages()
        self.channels = list(self.model.channels)  # one per feature map, in out_features' order

    def freeze_stages(self) -> None:
        """Freeze the first ``frozen_stages`` of the stem and stages (all of them for -1). Run again after loading:
        transformers' loading materialises parameters anew, trainable."""
        stages = backbone_stages(self.model)
        frozen = stages if self.frozen_stages == -1 else stages[: self.frozen_stages]
        for module in frozen:
            module.requires_grad_(False)

    def forward(self, pixel_values: torch.Tensor, valid: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(B, 3, H, W) pixels and their (B, H, W) boolean valid mask -> the feature maps (B, C_l, h_l, w_l) and
        their valid masks (B, h_l, w_l), resampled by nearest neighbour as the original."""
        maps = list(self.model(pixel_values).feature_maps)
        return maps, [resample_mask(valid, m.shape[-2:]) for m in maps]

    def _check_source_type(self, path: str | os.PathLike) -> None:
        """Refuse, by its model type, a checkpoint of an architecture other than the backbone's (a ViT for a ResNet
        backbone); a source without a readable config is left to the weight checks."""
        try:
            source_type = PretrainedConfig.get_config_dict(str(path))[0].get("model_type")
        except (OSError, ValueError):
            return
        own_type = getattr(self.model.config, "model_type", None)
        fitting = {own_type, *(("swin", "xcv_swin") if own_type in ("swin", "xcv_swin") else ())}
        if source_type is not None and source_type not in fitting:
            raise UsageError(
                f"{path} holds a {source_type!r} checkpoint; this detector's backbone is {own_type!r}: give a "
                "checkpoint of that architecture (a detector with another backbone: its config's backbone=)"
            )

    def load_pretrained(self, path: str | os.PathLike) -> None:
        """Load ImageNet weights from a checkpoint of the backbone's architecture (a local folder or Hub repo):
        transformers' ResNet (``ResNetModel`` / ``ResNetForImageClassification`` / ``ResNetBackbone``), or Swin,
        hf_xcv's or transformers' (converted on load), as a classifier, a bare model or a backbone. Every weight the
        backbone has must be there with its shape (keys with or without the architecture's prefix, ``resnet.``,
        ``swin.``, as a classifier saves them), except a Swin backbone's per-stage output norms, which a classifier
        or a bare model does not have: they start new, with a warning naming them (as
        ``SwinBackbone.from_pretrained`` does). A classifier's head and final norm are not read."""
        check_local_source(path)
        self._check_source_type(path)
        if isinstance(self.model, XcvPreTrainedModel):
            found = self._xcv_backbone_weights(path)
        else:
            found = self._prefixed_weights(path)
        missing = sorted(set(self.model.state_dict()) - set(found))
        if missing:
            raise UsageError(
                f"{path} lacks {len(missing)} weights of the {type(self.model).__name__} this detector uses: "
                f"{missing[:6]}{' ...' if len(missing) > 6 else ''}"
            )
        wanted = self.model.state_dict()
        shapes = [
            f"{k} ({list(v.shape)} vs {list(wanted[k].shape)})" for k, v in found.items() if v.shape != wanted[k].shape
        ]
        if shapes:
            raise UsageError(f"{path} has backbone weights of other shapes: {shapes[:6]}")
        self.model.load_state_dict(found)
        for module in self.model.modules():  # loaded: what initialises the detector after this leaves them alone
            module._is_hf_initialized = True
            for tensor in (*module.parameters(recurse=False), *module.buffers(recurse=False)):
                tensor._is_hf_initialized = True

    def _prefixed_weights(self, path: str | os.PathLike) -> dict[str, torch.Tensor]:
        """The checkpoint's weights under the backbone's own names (a classifier's ``resnet.`` prefix removed)."""
        wanted = self.model.state_dict()
        prefix = f"{self.model.base_model_prefix}."
        found: dict[str, torch.Tensor] = {}
        for key, tensor in load_state_dict(path).items():
            name = key if key in wanted else key.removeprefix(prefix)
            if name in wanted:
                found[name] = tensor
        return found

    def _xcv_backbone_weights(self, path: str | os.PathLike) -> dict[str, torch.Tensor]:
        """The weights of an hf_xcv backbone loaded by its own ``from_pretrained`` (conversion, prefixes, new output
        norms, resampled position tables) at the detector's stages, window and resolution."""
        config = self.model.config
        keys = ("out_features", "window_size", "image_size")
        settings = {key: getattr(config, key) for key in keys if hasattr(config, key)}
        return dict(type(self.model).from_pretrained(path, **settings).state_dict())


class DetectionTransformerPreTrainedModel(XcvPreTrainedModel):
    """The base of a DETR-style detector's models: a :class:`DetectionBackbone`, pixels with a padding mask, and
    the original training behaviour (see the module docstring). Families set ``config_class``,
    ``_no_split_modules``, ``_task_head_modules``, their attention requests, and extend ``_init_weights``."""

    base_model_prefix = "model"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    # BatchNorm's step counter, which frozen BatchNorm has no use for (ResNet and older DETR checkpoints hold it).
    _keys_to_ignore_on_load_unexpected = [r".*\.num_batches_tracked"]
    _keys_to_ignore_on_load_missing = [r".*\.num_batches_tracked"]  # ordinary BatchNorm (freeze_batch_norm=False)

    def _init_weights(self, module: nn.Module) -> None:
        """PyTorch's default init for Linear and Conv2d (the original's where nothing else is said), N(0, 1)
        embeddings, unit LayerNorms; a family adds its transformer's own. The backbone keeps its own
        initialisation (or its ImageNet weights)."""
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
            if module.bias is not None:
                fan_in = module.weight[0].numel()
                bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
                init.uniform_(module.bias, -bound, bound)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, 0.0, 1.0)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    def _initialize_weights(self, module: nn.Module, is_custom_code: bool = False) -> None:
        # transformers skips, for code outside its library, every module without parameters of its own; the
        # original's initialisation lives on such modules (a layer's Xavier matrices, the detector's heads). Every
        # init here goes through transformers.initialization, which leaves loaded tensors alone.
        super()._initialize_weights(module, is_custom_code=False)

    def build_backbone(self, backbone_class: type[DetectionBackbone] = DetectionBackbone) -> DetectionBackbone:
        """The config's backbone, frozen and dilated as it says (``backbone_class``: a family's own subclass)."""
        config = self.config
        backbone = backbone_class(
            config.backbone_config,
            freeze_batch_norm=config.freeze_batch_norm,
            dilation=config.dilation,
            frozen_stages=config.frozen_backbone_stages,
        )
        # DetrConfig(backbone=..., use_pretrained_backbone=True); not into a skeleton on the meta device (loading)
        pretrained = getattr(config, "_pretrained_backbone", None)
        if pretrained is not None and next(backbone.parameters()).device.type != "meta":
            backbone.load_pretrained(pretrained)
        return backbone

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any):
        result = super().from_pretrained(*args, **kwargs)
        model = result[0] if isinstance(result, tuple) else result
        for module in model.modules():
            if isinstance(module, DetectionBackbone):
                module.freeze_stages()
        return result

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        # The backbone's config records the weights' dtype as the detector's does (what loading gives it).
        self.config.backbone_config.dtype = next(self.parameters()).dtype
        return super().save_pretrained(save_directory, *args, **kwargs)

    def set_attn_implementation(self, attn_implementation: str | dict) -> None:
        """transformers' attention backend for the transformer (and an attention backbone such as Swin); a
        convolutional backbone, which has no attention, keeps ``"eager"`` (transformers' ResNet refuses the
        others by name)."""
        if isinstance(attn_implementation, str) and self.config.backbone_model_type == "resnet":
            attn_implementation = {"": attn_implementation, "backbone_config": "eager"}
        return super().set_attn_implementation(attn_implementation)

    def criterion(self) -> Any:
        """The family's set criterion (matcher and losses) of the current config."""
        raise NotImplementedError(f"{type(self).__name__} has no set criterion: it is no detector")

    def auxiliary_outputs(
        self, all_logits: Sequence[torch.Tensor], all_boxes: Sequence[torch.Tensor]
    ) -> list[dict[str, torch.Tensor]] | None:
        """Every earlier decoder layer's ``logits`` and ``pred_boxes`` (the auxiliary losses' predictions, when
        ``config.auxiliary_loss``; the last layer's are the detector's own)."""
        if not self.config.auxiliary_loss:
            return None
        return [{"logits": a, "pred_boxes": b} for a, b in zip(all_logits[:-1], all_boxes[:-1])]

    def detection_loss(
        self,
        logits: torch.Tensor,
        pred_boxes: torch.Tensor,
        auxiliary: list[dict[str, torch.Tensor]] | None,
        labels: Any,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The set loss of the family's :meth:`criterion` on the last layer's predictions and the auxiliary ones,
        after ``labels`` are checked (one dict per image)."""
        check_targets(labels, logits.shape[0], name="labels")
        predictions = {"logits": logits, "pred_boxes": pred_boxes, "auxiliary_outputs": auxiliary or []}
        return self.criterion().to(logits.device)(predictions, labels)

    def _pixels(self, pixel_values: torch.Tensor | None, pixel_mask: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """``pixel_values`` checked and cast to the weights' dtype, and the (B, H, W) boolean valid mask (all
        valid when ``pixel_mask`` is None)."""
        pixel_values = self.checked_pixels(pixel_values)
        batch, _, height, width = pixel_values.shape
        if pixel_mask is None:
            valid = torch.ones(batch, height, width, dtype=torch.bool, device=pixel_values.device)
        elif tuple(pixel_mask.shape) != (batch, height, width):
            raise ValueError(
                f"pixel_mask has shape {tuple(pixel_mask.shape)}; the pixels need (batch, height, width) = "
                f"{(batch, height, width)}, 1 for image and 0 for padding"
            )
        else:
            valid = pixel_mask.to(torch.bool)
        return pixel_values, valid

    def freeze_backbone(self) -> None:
        """No backbone parameter trainable."""
        self.base_model.backbone.requires_grad_(False)

    def unfreeze_backbone(self) -> None:
        """Every backbone stage trainable (BatchNorm stays frozen: its statistics are buffers)."""
        self.base_model.backbone.requires_grad_(True)
