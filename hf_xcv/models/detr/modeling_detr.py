"""DETR (Carion et al. 2020): a CNN backbone, a transformer encoder-decoder with 2-D sine positions added to the
queries and keys of every layer, learned object queries, and set prediction with Hungarian matching.

Reads top to bottom: EncoderLayer -> DecoderLayer -> Encoder -> Decoder -> Model -> ForObjectDetection; the
backbone, the post-norm blocks, the box head and the training behaviour are those every DETR-style detector shares
(:mod:`hf_xcv.modeling_detection`, :mod:`hf_xcv.layers.detection`). Attention layers are hf_xcv's shared
``MultiHeadAttention`` (positions go into the query and key projections only, never into the values); the
encoder's core is any registry entry that serves padding masks (``encoder_attention_type``), the decoder's is
exact attention on transformers' backends.

The training behaviour is the original's where transformers 5 departs from it: backbone stages after the
first are trained (BatchNorm frozen), the auxiliary decoder losses are on and do not change the forward (the
final LayerNorm is applied to a copy of each decoder layer's output), attention and FFN dropout are 0.1, sine
positions are computed in float32 from the padding mask, and boxes are relative to each unpadded image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import initialization as init
from transformers.utils.generic import can_return_tuple

from ...attention import MultiHeadAttention
from ...layers import sine_position_embedding_2d
from ...layers.detection import DetectionBlock, MLPPredictionHead
from ...losses import HungarianMatcher, SetCriterion
from ...modeling_detection import (
    DetectionBackbone,
    DetectionModelOutput,
    DetectionTransformerPreTrainedModel,
    ObjectDetectionOutput,
    detection_output,
)
from .configuration_detr import DETR_ENCODER_REQUESTS, DetrConfig


@dataclass
class DetrModelOutput(DetectionModelOutput):
    """``last_hidden_state`` (B, Q, d): the decoder's output after its final LayerNorm;
    ``encoder_last_hidden_state`` (B, h*w, d); hidden states and attention maps of both stacks when asked
    (``cross_attentions``: (B, heads, Q, h*w) per decoder layer); ``intermediate_hidden_states`` (layers, B, Q, d),
    only when ``config.auxiliary_loss``: every decoder layer's output through that LayerNorm (the last equals
    ``last_hidden_state``). transformers' fields, in its order and presence (``return_dict=False`` tuples alike)."""

    intermediate_hidden_states: torch.Tensor | None = None


@dataclass
class DetrObjectDetectionOutput(ObjectDetectionOutput):
    """``loss`` (when labels are given: the weighted sum) and its unweighted parts ``loss_dict`` (``loss_ce``,
    ``loss_bbox``, ``loss_giou``, their ``_0``.. ``_{L-2}`` copies for the earlier decoder layers, and the logging-only
    ``cardinality_error`` / ``class_error``); ``logits`` (B, Q, num_labels + 1), the last class being "no
    object"; ``pred_boxes`` (B, Q, 4) normalised (cx, cy, w, h) relative to each unpadded image;
    ``auxiliary_outputs``: the same two for every earlier decoder layer (when ``config.auxiliary_loss`` and labels
    are given, as transformers); the rest as :class:`DetrModelOutput`."""


# ----------------------------------------------------------------------------------------------------------
# backbone
# ----------------------------------------------------------------------------------------------------------


class DetrBackbone(DetectionBackbone):
    """The shared detector backbone (frozen BatchNorm and stages, DC5) reading the one map DETR takes (C5, or C4
    dilated)."""

    def forward(self, pixel_values: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, 3, H, W) pixels and their (B, H, W) valid mask -> the last feature map (B, C, h, w) and its valid
        mask (B, h, w)."""
        maps, masks = super().forward(pixel_values, valid)
        return maps[-1], masks[-1]


# ----------------------------------------------------------------------------------------------------------
# transformer
# ----------------------------------------------------------------------------------------------------------


class DetrEncoderLayer(DetectionBlock):
    def __init__(self, config: DetrConfig, layer_idx: int):
        super().__init__(*config.block_arguments(config.encoder_ffn_dim))
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


class DetrDecoderLayer(DetectionBlock):
    def __init__(self, config: DetrConfig, layer_idx: int):
        super().__init__(*config.block_arguments(config.decoder_ffn_dim))
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
        states[-1] = normed[-1]  # the last hidden state is the decoder's output, after its LayerNorm (transformers')
        return {
            "intermediate": torch.stack(normed),  # (layers, B, Q, d)
            "hidden_states": tuple(states) if output_hidden_states else None,
            "attentions": tuple(self_maps) if output_attentions else None,
            "cross_attentions": tuple(cross_maps) if output_attentions else None,
        }


# ----------------------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------------------


class DetrPreTrainedModel(DetectionTransformerPreTrainedModel):
    config_class = DetrConfig
    config: DetrConfig
    _no_split_modules = ["DetrBackbone", "DetrEncoderLayer", "DetrDecoderLayer"]
    _task_head_modules = ("class_labels_classifier", "bbox_predictor")
    attention_requests = DETR_ENCODER_REQUESTS
    attention_role = "DETR's encoder"

    def _init_weights(self, module: nn.Module) -> None:
        """The original initialisation: Xavier-uniform matrices in the transformer (``nn.Transformer``'s
        ``_reset_parameters``; gain ``init_xavier_std``) with zero attention-projection biases, PyTorch's default
        init elsewhere (the 1x1 input projection, the heads; the query embeddings N(0, 1)), unit LayerNorms. The
        backbone keeps its own initialisation (or its ImageNet weights)."""
        super()._init_weights(module)
        if isinstance(module, DetectionBlock):  # runs after its children: overrides their default init
            for name, sub in module.named_modules():
                if isinstance(sub, nn.Linear) and ".core" not in name:
                    init.xavier_uniform_(sub.weight, gain=self.config.init_xavier_std)
                    if name.split(".")[0] in ("self_attn", "encoder_attn") and sub.bias is not None:
                        init.zeros_(sub.bias)


class DetrModel(DetrPreTrainedModel):
    """The bare DETR: backbone, 1x1 input projection, encoder over the feature map, decoder from the object
    queries; returns the decoded queries (before any head)."""

    def __init__(self, config: DetrConfig):
        super().__init__(config)
        self.backbone = self.build_backbone(DetrBackbone)
        self.input_projection = nn.Conv2d(self.backbone.channels[-1], config.d_model, kernel_size=1)
        self.query_position_embeddings = nn.Embedding(config.num_queries, config.d_model)
        self.encoder = DetrEncoder(config)
        self.decoder = DetrDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.input_projection

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        pixel_mask: torch.Tensor | None = None,
        *,
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
            decoder_hidden_states=decoded["hidden_states"],
            decoder_attentions=decoded["attentions"],
            cross_attentions=decoded["cross_attentions"],
            encoder_last_hidden_state=memory,
            encoder_hidden_states=encoder_states,
            encoder_attentions=encoder_maps,
            intermediate_hidden_states=decoded["intermediate"] if self.config.auxiliary_loss else None,
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
        self.bbox_predictor = MLPPredictionHead(config.d_model, config.d_model, 4, num_layers=3)
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
        *,
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
        if layers is None:  # without auxiliary_loss: the heads run on the last layer only
            layers = outputs.last_hidden_state[None]
        all_logits = self.class_labels_classifier(layers)  # (L, B, Q, num_labels + 1)
        all_boxes = self.bbox_predictor(layers).sigmoid()  # (L, B, Q, 4)
        auxiliary = self.auxiliary_outputs(all_logits, all_boxes)
        loss = loss_dict = None
        if labels is not None:
            loss, loss_dict = self.detection_loss(all_logits[-1], all_boxes[-1], auxiliary, labels)
        return detection_output(
            DetrObjectDetectionOutput,
            outputs,
            loss=loss,
            loss_dict=loss_dict,
            logits=all_logits[-1],
            pred_boxes=all_boxes[-1],
            auxiliary_outputs=auxiliary if labels is not None else None,  # as transformers: with the loss
        )
