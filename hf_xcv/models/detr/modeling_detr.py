"""DETR (Carion et al. 2020): a CNN backbone, a transformer encoder-decoder with 2-D sine positions added to the
queries and keys of every layer, learned object queries, and set prediction with Hungarian matching.

Reads top to bottom: Backbone -> EncoderLayer -> DecoderLayer -> Encoder -> Decoder -> Model ->
ForObjectDetection. Attention layers are hf_xcv's shared ``MultiHeadAttention`` (positions go into the query
and key projections only, never into the values); the encoder's core is any registry entry that serves padding
masks (``encoder_attention_type``), the decoder's is exact attention on transformers' backends.

The training behaviour is the original's where transformers 5 departs from it: backbone stages after the
first are trained (BatchNorm frozen), the auxiliary decoder losses are on and do not change the forward (the
final LayerNorm is applied to a copy of each decoder layer's output), attention and FFN dropout are 0.1, sine
positions are computed in float32 from the padding mask, and boxes are relative to each unpadded image.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AutoBackbone
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple

from ...attention import MultiHeadAttention
from ...layers import Mlp, freeze_batch_norms, sine_position_embedding_2d
from ...losses import HungarianMatcher, SetCriterion
from ...modeling_utils import XcvPreTrainedModel
from .configuration_detr import DETR_ENCODER_REQUESTS, DetrConfig


@dataclass
class DetrModelOutput(ModelOutput):
    """``last_hidden_state`` (B, Q, d): the decoder's output after its final LayerNorm;
    ``intermediate_hidden_states`` (layers, B, Q, d): every decoder layer's output through that LayerNorm (the
    last equals ``last_hidden_state``); ``encoder_last_hidden_state`` (B, h*w, d); hidden states and attention
    maps of both stacks when asked (``cross_attentions``: (B, heads, Q, h*w) per decoder layer)."""

    last_hidden_state: torch.Tensor | None = None
    intermediate_hidden_states: torch.Tensor | None = None
    decoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None
    encoder_last_hidden_state: torch.Tensor | None = None
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class DetrObjectDetectionOutput(ModelOutput):
    """``loss`` (when labels are given: the weighted sum) and its unweighted parts ``loss_dict`` (``loss_ce``,
    ``loss_bbox``, ``loss_giou``, their ``_0``.. ``_{L-2}`` copies for the earlier decoder layers, and the logging-only
    ``cardinality_error`` / ``class_error``); ``logits`` (B, Q, num_labels + 1), the last class being "no
    object"; ``pred_boxes`` (B, Q, 4) normalised (cx, cy, w, h) relative to each unpadded image;
    ``auxiliary_outputs``: the same two for every earlier decoder layer (when ``config.auxiliary_loss``); the
    rest as :class:`DetrModelOutput`."""

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


# ----------------------------------------------------------------------------------------------------------
# backbone
# ----------------------------------------------------------------------------------------------------------


def backbone_stages(backbone: nn.Module) -> list[nn.Module]:
    """The stem and then each stage of a backbone, in order (its ``stage_names``): what ``frozen_backbone_stages``
    counts."""
    if hasattr(backbone, "embedder") and hasattr(backbone, "encoder"):  # transformers' ResNetBackbone
        return [backbone.embedder, *backbone.encoder.stages]
    if hasattr(backbone, "swin"):  # hf_xcv's SwinBackbone
        return [backbone.swin.embeddings, *backbone.swin.encoder.layers]
    raise ValueError(f"{type(backbone).__name__} is not a backbone DETR knows the stages of (ResNet, Swin)")


def dilate_last_stage(backbone: nn.Module) -> None:
    """DC5: the last ResNet stage keeps the stride of the one before, its later 3x3 convolutions dilated by 2
    (torchvision's ``replace_stride_with_dilation=[False, False, True]``, which the original DETR-DC5 uses).
    The weights are unchanged: a ResNet checkpoint loads as it is."""
    stage = backbone.encoder.stages[-1]
    for index, layer in enumerate(stage.layers):
        for conv in (m for m in layer.modules() if isinstance(m, nn.Conv2d)):
            if index == 0:
                conv.stride = (1, 1)  # the first block's strided conv and its strided shortcut
            elif conv.kernel_size == (3, 3):
                conv.dilation, conv.padding = (2, 2), (2, 2)


class DetrBackbone(nn.Module):
    """The feature extractor: a transformers backbone (``AutoBackbone.from_config``: transformers' ResNet or
    hf_xcv's Swin) with frozen BatchNorm, its first ``frozen_backbone_stages`` stage names frozen (the
    original: the stem and layer1; the rest trains at the backbone learning rate), and the padding mask
    resampled to the feature map."""

    def __init__(self, config: DetrConfig):
        super().__init__()
        if config.backbone_model_type == "resnet":  # no attention: an sdpa request for the detector is not its own
            config.backbone_config._attn_implementation_internal = "eager"
        self.model = AutoBackbone.from_config(config.backbone_config)
        if config.freeze_batch_norm:
            freeze_batch_norms(self.model)
        if config.dilation:
            dilate_last_stage(self.model)
        self.frozen_stages = config.frozen_backbone_stages
        self.freeze_stages()
        self.channels = self.model.channels[-1]

    def freeze_stages(self) -> None:
        """Freeze the first ``frozen_backbone_stages`` of the stem and stages (all of them for -1). Run again after
        loading: transformers' loading materialises parameters anew, trainable."""
        stages = backbone_stages(self.model)
        frozen = stages if self.frozen_stages == -1 else stages[: self.frozen_stages]
        for module in frozen:
            module.requires_grad_(False)

    def forward(self, pixel_values: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, 3, H, W) pixels and their (B, H, W) boolean valid mask -> the last feature map (B, C, h, w) and its
        valid mask (B, h, w), resampled by nearest neighbour as the original."""
        features = self.model(pixel_values).feature_maps[-1]
        mask = F.interpolate(valid[:, None].float(), size=features.shape[-2:]).to(torch.bool)[:, 0]  # (B, h, w)
        return features, mask

    def load_pretrained(self, path: str | os.PathLike) -> None:
        """Load ImageNet weights from a local transformers-format checkpoint of the backbone's architecture (a
        ``ResNetModel`` / ``ResNetForImageClassification`` / ``ResNetBackbone`` folder, or hf_xcv's Swin): every
        backbone weight must be there with its shape; a classifier head is ignored."""
        from ...conversion import load_state_dict

        state_dict = load_state_dict(path)
        prefix = next((p for p in ("resnet.", "swin.") if any(k.startswith(p) for k in state_dict)), "")
        wanted = self.model.state_dict()
        found: dict[str, torch.Tensor] = {}
        for key, tensor in state_dict.items():
            name = key.removeprefix(prefix) if prefix == "resnet." else key
            if name in wanted:
                found[name] = tensor
        missing = sorted(set(wanted) - set(found))
        if missing:
            raise ValueError(
                f"{path} lacks {len(missing)} weights of the {type(self.model).__name__} this DETR uses: "
                f"{missing[:6]}{' ...' if len(missing) > 6 else ''}"
            )
        shapes = [
            f"{k} ({list(v.shape)} vs {list(wanted[k].shape)})" for k, v in found.items() if v.shape != wanted[k].shape
        ]
        if shapes:
            raise ValueError(f"{path} has backbone weights of other shapes: {shapes[:6]}")
        self.model.load_state_dict(found)


# ----------------------------------------------------------------------------------------------------------
# transformer
# ----------------------------------------------------------------------------------------------------------


class DetrBlock(GradientCheckpointingLayer):
    """What encoder and decoder layers share: post-norm residual branches and the feed-forward block
    (Linear -> activation -> dropout -> Linear), with dropout on each branch's output."""

    def __init__(self, config: DetrConfig, ffn_dim: int):
        super().__init__()
        self.dropout = nn.Dropout(config.dropout)
        # Linear -> activation -> dropout -> Linear; the branch's own dropout follows (self.dropout).
        self.mlp = Mlp(
            config.d_model, ffn_dim, act=config.activation_function, dropout=config.activation_dropout, out_dropout=0.0
        )
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    def residual(self, x: torch.Tensor, branch: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        return norm(x + self.dropout(branch))

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.residual(x, self.mlp(x), self.final_layer_norm)


class DetrEncoderLayer(DetrBlock):
    def __init__(self, config: DetrConfig, layer_idx: int):
        super().__init__(config, config.encoder_ffn_dim)
        self.self_attn = MultiHeadAttention(
            config.d_model,
            config.encoder_attention_heads,
            attention_type=config.encoder_attention_type,
            attention_kwargs=config.encoder_attention_kwargs,
            dropout=config.attention_dropout,
            config=config,
            layer_idx=layer_idx,
        )
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)

    def forward(
        self,
        hidden_states: torch.Tensor,
        positions: torch.Tensor,
        keep: torch.Tensor,
        grid: tuple[int, int],
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``q = k = x + pos``, ``v = x``; padded pixels masked out of the keys by ``keep`` (B, 1, 1, h*w)."""
        attended, weights, _ = self.self_attn(
            hidden_states,
            attention_mask=keep,
            grid=grid,
            output_attentions=output_attentions,
            query_position_embeddings=positions,
            key_position_embeddings=positions,
        )
        hidden_states = self.residual(hidden_states, attended, self.self_attn_layer_norm)
        return self.feed_forward(hidden_states), weights


class DetrDecoderLayer(DetrBlock):
    def __init__(self, config: DetrConfig, layer_idx: int):
        super().__init__(config, config.decoder_ffn_dim)
        heads, d = config.decoder_attention_heads, config.d_model
        self.self_attn = MultiHeadAttention(
            d, heads, dropout=config.attention_dropout, config=config, layer_idx=layer_idx
        )
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = MultiHeadAttention(
            d, heads, dropout=config.attention_dropout, config=config, layer_idx=layer_idx
        )
        self.encoder_attn_layer_norm = nn.LayerNorm(d)

    def forward(
        self,
        hidden_states: torch.Tensor,
        query_positions: torch.Tensor,
        memory: torch.Tensor,
        memory_positions: torch.Tensor,
        memory_keep: torch.Tensor,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Self-attention ``q = k = x + query_pos``, ``v = x``; cross-attention ``q = x + query_pos``,
        ``k = memory + pos``, ``v = memory``, padded pixels masked; then the feed-forward block."""
        attended, self_weights, _ = self.self_attn(
            hidden_states,
            output_attentions=output_attentions,
            query_position_embeddings=query_positions,
            key_position_embeddings=query_positions,
        )
        hidden_states = self.residual(hidden_states, attended, self.self_attn_layer_norm)
        attended, cross_weights, _ = self.encoder_attn(
            hidden_states,
            memory,
            attention_mask=memory_keep,
            output_attentions=output_attentions,
            query_position_embeddings=query_positions,
            key_position_embeddings=memory_positions,
        )
        hidden_states = self.residual(hidden_states, attended, self.encoder_attn_layer_norm)
        return self.feed_forward(hidden_states), self_weights, cross_weights


class DetrEncoder(nn.Module):
    """Post-norm encoder layers over the flattened feature map; no final LayerNorm (as the original)."""

    def __init__(self, config: DetrConfig):
        super().__init__()
        self.layers = nn.ModuleList(DetrEncoderLayer(config, i) for i in range(config.encoder_layers))

    def forward(
        self,
        hidden_states: torch.Tensor,
        positions: torch.Tensor,
        keep: torch.Tensor,
        grid: tuple[int, int],
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> tuple[torch.Tensor, tuple | None, tuple | None]:
        states, maps = [hidden_states], []
        for layer in self.layers:
            hidden_states, weights = layer(hidden_states, positions, keep, grid, output_attentions)
            states.append(hidden_states)
            maps.append(weights)
        return (
            hidden_states,
            tuple(states) if output_hidden_states else None,
            tuple(maps) if output_attentions else None,
        )


class DetrDecoder(nn.Module):
    """Decoder layers from zero targets; the shared final ``layernorm`` is applied to a copy of every layer's
    output for the (auxiliary) heads, while the chain goes on with the un-normed output, as the original (so the
    forward is the same whether or not the auxiliary losses are on)."""

    def __init__(self, config: DetrConfig):
        super().__init__()
        self.layers = nn.ModuleList(DetrDecoderLayer(config, i) for i in range(config.decoder_layers))
        self.layernorm = nn.LayerNorm(config.d_model)

    def forward(
        self,
        query_positions: torch.Tensor,
        memory: torch.Tensor,
        memory_positions: torch.Tensor,
        memory_keep: torch.Tensor,
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> dict[str, Any]:
        hidden_states = torch.zeros_like(query_positions)  # (B, Q, d): the targets start empty
        states, self_maps, cross_maps, normed = [hidden_states], [], [], []
        for layer in self.layers:
            hidden_states, self_weights, cross_weights = layer(
                hidden_states, query_positions, memory, memory_positions, memory_keep, output_attentions
            )
            normed.append(self.layernorm(hidden_states))
            states.append(hidden_states)
            self_maps.append(self_weights)
            cross_maps.append(cross_weights)
        return {
            "intermediate": torch.stack(normed),  # (layers, B, Q, d)
            "hidden_states": tuple(states) if output_hidden_states else None,
            "attentions": tuple(self_maps) if output_attentions else None,
            "cross_attentions": tuple(cross_maps) if output_attentions else None,
        }


# ----------------------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------------------


class DetrPreTrainedModel(XcvPreTrainedModel):
    config_class = DetrConfig
    config: DetrConfig
    base_model_prefix = "model"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["DetrBackbone", "DetrEncoderLayer", "DetrDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _task_head_modules = ("class_labels_classifier", "bbox_predictor")
    # BatchNorm's step counter, which frozen BatchNorm has no use for (ResNet and older DETR checkpoints hold it).
    _keys_to_ignore_on_load_unexpected = [r".*\.num_batches_tracked"]
    _keys_to_ignore_on_load_missing = [r".*\.num_batches_tracked"]  # ordinary BatchNorm (freeze_batch_norm=False)
    attention_requests = DETR_ENCODER_REQUESTS
    attention_role = "DETR's encoder"

    def _init_weights(self, module: nn.Module) -> None:
        """The original initialisation: Xavier-uniform matrices in the transformer (``nn.Transformer``'s
        ``_reset_parameters``; gain ``init_xavier_std``) with zero attention-projection biases, PyTorch's default
        init elsewhere (the 1x1 input projection, the heads; the query embeddings N(0, 1)), unit LayerNorms. The
        backbone keeps its own initialisation (or its ImageNet weights)."""
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
        elif isinstance(module, DetrBlock):  # runs after its children: overrides their default init
            for name, sub in module.named_modules():
                if isinstance(sub, nn.Linear) and ".core" not in name:
                    init.xavier_uniform_(sub.weight, gain=self.config.init_xavier_std)
                    if name.split(".")[0] in ("self_attn", "encoder_attn") and sub.bias is not None:
                        init.zeros_(sub.bias)

    def _initialize_weights(self, module: nn.Module, is_custom_code: bool = False) -> None:
        # transformers skips, for code outside its library, every module without parameters of its own; the
        # original's initialisation lives on such modules (a layer's Xavier matrices, the detector's heads). Every
        # init here goes through transformers.initialization, which leaves loaded tensors alone.
        super()._initialize_weights(module, is_custom_code=False)

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any):
        result = super().from_pretrained(*args, **kwargs)
        model = result[0] if isinstance(result, tuple) else result
        for module in model.modules():
            if isinstance(module, DetrBackbone):
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


class DetrModel(DetrPreTrainedModel):
    """The bare DETR: backbone, 1x1 input projection, encoder over the feature map, decoder from the object
    queries; returns the decoded queries (before any head)."""

    def __init__(self, config: DetrConfig):
        super().__init__(config)
        self.backbone = DetrBackbone(config)
        self.input_projection = nn.Conv2d(self.backbone.channels, config.d_model, kernel_size=1)
        self.query_position_embeddings = nn.Embedding(config.num_queries, config.d_model)
        self.encoder = DetrEncoder(config)
        self.decoder = DetrDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.input_projection

    def freeze_backbone(self) -> None:
        self.backbone.requires_grad_(False)

    def unfreeze_backbone(self) -> None:
        """Every backbone stage trainable (BatchNorm stays frozen: its statistics are buffers)."""
        self.backbone.requires_grad_(True)

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        pixel_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> DetrModelOutput:
        r"""
        pixel_values (batch, channels, height, width): images, padded bottom/right to a common size.
        pixel_mask (batch, height, width): 1 for image pixels, 0 for padding (default: no padding).
        """
        self.take_kwargs(kwargs)
        output_attentions, output_hidden_states = self._resolve_outputs(output_attentions, output_hidden_states)
        pixel_values, valid = self._pixels(pixel_values, pixel_mask)
        features, mask = self.backbone(pixel_values, valid)  # (B, C, h, w), (B, h, w)
        grid = tuple(features.shape[-2:])
        positions = sine_position_embedding_2d(mask, self.config.d_model // 2)  # float32 (B, d, h, w)
        positions = positions.flatten(2).transpose(1, 2).to(features.dtype)  # (B, h*w, d)
        source = self.input_projection(features).flatten(2).transpose(1, 2)  # (B, h*w, d)
        keep = mask.flatten(1)[:, None, None, :]  # (B, 1, 1, h*w)
        memory, encoder_states, encoder_maps = self.encoder(
            source, positions, keep, grid, output_attentions, output_hidden_states
        )
        queries = self.query_position_embeddings.weight[None].expand(source.shape[0], -1, -1)  # (B, Q, d)
        decoded = self.decoder(queries, memory, positions, keep, output_attentions, output_hidden_states)
        return DetrModelOutput(
            last_hidden_state=decoded["intermediate"][-1],
            intermediate_hidden_states=decoded["intermediate"],
            decoder_hidden_states=decoded["hidden_states"],
            decoder_attentions=decoded["attentions"],
            cross_attentions=decoded["cross_attentions"],
            encoder_last_hidden_state=memory,
            encoder_hidden_states=encoder_states,
            encoder_attentions=encoder_maps,
        )


class DetrMLPPredictionHead(nn.Module):
    """The box head: ``num_layers`` Linear layers with ReLU between them (the original's ``MLP``)."""

    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, num_layers: int):
        super().__init__()
        dims = [input_dim] + [hidden_dim] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:] + [output_dim]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            x = layer(x) if index == len(self.layers) - 1 else F.relu(layer(x))
        return x


def detection_output(output_class: type[ModelOutput], outputs: ModelOutput, **heads: Any) -> ModelOutput:
    """A detector's output: the heads' fields, and every field of ``output_class`` the bare model's
    ``outputs`` also has (hidden states, attention maps, ...)."""
    shared = {name: getattr(outputs, name) for name in output_class.__dataclass_fields__ if name not in heads}
    return output_class(**{name: value for name, value in shared.items() if hasattr(outputs, name)}, **heads)


def check_detection_labels(labels: Any, batch: int) -> None:
    """One dict per image with ``class_labels`` (T,) and ``boxes`` (T, 4) — named when not."""
    if not isinstance(labels, (list, tuple)) or len(labels) != batch:
        got = f"{len(labels)} items" if isinstance(labels, (list, tuple)) else type(labels).__name__
        raise ValueError(f"labels must be a list of one dict per image ({batch}), got {got}")
    for index, target in enumerate(labels):
        if not isinstance(target, dict) or "class_labels" not in target or "boxes" not in target:
            raise ValueError(f"labels[{index}] must be a dict with 'class_labels' (T,) and 'boxes' (T, 4)")
        boxes, classes = target["boxes"], target["class_labels"]
        if boxes.dim() != 2 or boxes.shape[-1] != 4 or classes.dim() != 1 or classes.shape[0] != boxes.shape[0]:
            raise ValueError(
                f"labels[{index}] has boxes {tuple(boxes.shape)} and class_labels {tuple(classes.shape)}; "
                "expected (T, 4) normalised (cx, cy, w, h) and (T,)"
            )


class DetrForObjectDetection(DetrPreTrainedModel):
    """DETR with its heads: a class for each query (``num_labels`` classes + "no object") and a box (sigmoid
    of a 3-layer MLP: normalised (cx, cy, w, h)), shared by every decoder layer. With ``labels`` the set loss
    of the original: Hungarian matching (``class_cost``, ``bbox_cost``, ``giou_cost``), cross entropy with the
    no-object class weighted by ``eos_coefficient``, L1 and GIoU box losses, and (``auxiliary_loss``) the same
    on every earlier decoder layer with its own matching."""

    _is_task_model = True

    def __init__(self, config: DetrConfig):
        super().__init__(config)
        self.model = DetrModel(config)
        self.class_labels_classifier = nn.Linear(config.d_model, config.num_labels + 1)
        self.bbox_predictor = DetrMLPPredictionHead(config.d_model, config.d_model, 4, num_layers=3)
        self.post_init()

    def criterion(self) -> SetCriterion:
        """The set criterion of the current config (cheap to build: matcher and loss hold no state)."""
        config = self.config
        matcher = HungarianMatcher(config.class_cost, config.bbox_cost, config.giou_cost)
        return SetCriterion(
            config.num_labels,
            matcher,
            eos_coefficient=config.eos_coefficient,
            bbox_loss_coefficient=config.bbox_loss_coefficient,
            giou_loss_coefficient=config.giou_loss_coefficient,
        ).to(self.class_labels_classifier.weight.device)

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        pixel_mask: torch.Tensor | None = None,
        labels: list[dict[str, torch.Tensor]] | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> DetrObjectDetectionOutput:
        r"""
        pixel_values / pixel_mask: as :class:`DetrModel`.
        labels: one dict per image with ``class_labels`` (T,) int64 in [0, num_labels) and ``boxes`` (T, 4)
            normalised (cx, cy, w, h) relative to the unpadded image; optional ``iscrowd`` (T,): crowd regions
            are left out of matching and losses. Images without objects have T = 0.
        """
        self.take_kwargs(kwargs)
        outputs = self.model(
            pixel_values,
            pixel_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        layers = outputs.intermediate_hidden_states  # (L, B, Q, d)
        if not self.config.auxiliary_loss:
            layers = layers[-1:]  # the heads run on the last layer only: nothing reads the others
        all_logits = self.class_labels_classifier(layers)  # (L, B, Q, num_labels + 1)
        all_boxes = self.bbox_predictor(layers).sigmoid()  # (L, B, Q, 4)
        auxiliary = None
        if self.config.auxiliary_loss:
            auxiliary = [{"logits": a, "pred_boxes": b} for a, b in zip(all_logits[:-1], all_boxes[:-1])]
        loss = loss_dict = None
        if labels is not None:
            check_detection_labels(labels, all_logits.shape[1])
            predictions = {"logits": all_logits[-1], "pred_boxes": all_boxes[-1], "auxiliary_outputs": auxiliary or []}
            loss, loss_dict = self.criterion()(predictions, labels)
        return detection_output(
            DetrObjectDetectionOutput,
            outputs,
            loss=loss,
            loss_dict=loss_dict,
            logits=all_logits[-1],
            pred_boxes=all_boxes[-1],
            auxiliary_outputs=auxiliary,
        )
