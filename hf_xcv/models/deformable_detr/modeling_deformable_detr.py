"""Deformable DETR (Zhu et al. 2020): DETR whose encoder and cross-attention attend to a few sampled points
around a reference on every level of a feature pyramid (multi-scale deformable attention), with sigmoid focal
classification, optional iterative box refinement and the two-stage variant whose encoder proposes the queries.

Reads top to bottom: EncoderLayer -> DecoderLayer -> Encoder -> Decoder -> Model -> ForObjectDetection. The
deformable attention is ``hf_xcv.attention.operators.deformable`` (pure PyTorch); the decoder's self-attention over
the object queries is hf_xcv's shared ``MultiHeadAttention`` (any registry core: ``decoder_attention_type``). What
every DETR-style detector shares is reused: the backbone (frozen BatchNorm and stages, DC5), the residual blocks and
the box head (:mod:`hf_xcv.modeling_detection`, :mod:`hf_xcv.layers.detection`), the set criterion (focal loss
here) and the image processor (sigmoid top-k).

The behaviour is the original's where transformers 5 departs from it: auxiliary losses on, focal class cost and
loss weight 2, the two-stage encoder loss, the original's initialisation (focal prior on the class biases, the
zeroed last box layer with the -2 size bias, independent heads per layer under box refinement), a backbone
with stages 2-4 trainable and read at strides 8/16/32, and boxes relative to each unpadded image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import initialization as init
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple

from ...attention import MultiHeadAttention
from ...attention.operators.deformable import MultiScaleDeformableAttention
from ...layers import sine_position_embedding_2d
from ...layers.detection import DetectionBlock, MLPPredictionHead, inverse_sigmoid, resample_mask
from ...losses import HungarianMatcher, SetCriterion
from ...modeling_detection import (
    DetectionTransformerPreTrainedModel,
    ObjectDetectionOutput,
    detection_output,
)
from .configuration_deformable_detr import (
    DEFORMABLE_DECODER_REQUESTS,
    INPUT_PROJECTION_GROUPS,
    DeformableDetrConfig,
)

# The focal prior of the original: class biases start at -log((1 - 0.01) / 0.01), a 1 % foreground probability.
FOCAL_PRIOR_PROBABILITY = 0.01
# Proposal sizes of the two-stage encoder: 0.05 of the image on the first level, doubling per level.
PROPOSAL_BASE_SIZE = 0.05


@dataclass
class DeformableDetrModelOutput(ModelOutput):
    """transformers' fields, in its order (``return_dict=False`` tuples index alike): ``init_reference_points``
    (B, Q, 2|4): the references the first decoder layer reads; ``last_hidden_state`` (B, Q, d): the last decoder
    layer's output (there is no final LayerNorm); ``intermediate_hidden_states`` (B, layers, Q, d): every decoder
    layer's; ``intermediate_reference_points`` (B, layers, Q, 2|4): the references after each layer (the next layer's;
    the initial ones throughout without box refinement); the decoder's and encoder's hidden states and attention
    maps when asked (the deformable ``encoder_attentions`` / ``cross_attentions`` (B, N|Q, heads, levels, points),
    ``decoder_attentions`` (B, heads, Q, Q)); ``encoder_last_hidden_state`` (B, N, d) over the flattened levels;
    ``enc_outputs_class`` / ``enc_outputs_coord_logits`` (two-stage): the encoder's proposal scores (B, N, K) and box
    logits (B, N, 4). Then hf_xcv's own: ``intermediate_predicted_boxes`` (B, layers, Q, 4), each layer's boxes with
    their gradient when the decoder refines them (box refinement), else None."""

    init_reference_points: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None
    intermediate_hidden_states: torch.Tensor | None = None
    intermediate_reference_points: torch.Tensor | None = None
    decoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None
    encoder_last_hidden_state: torch.Tensor | None = None
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None
    enc_outputs_class: torch.Tensor | None = None
    enc_outputs_coord_logits: torch.Tensor | None = None
    intermediate_predicted_boxes: torch.Tensor | None = None


@dataclass
class DeformableDetrObjectDetectionOutput(ObjectDetectionOutput):
    """As :class:`hf_xcv.modeling_detection.ObjectDetectionOutput`, with ``logits`` (B, Q, num_labels) sigmoid scores
    (no "no object" class) and ``loss_dict`` holding ``_enc`` losses of the two-stage proposals; then, in
    transformers' order, ``init_reference_points``, ``intermediate_hidden_states``, ``intermediate_reference_points``,
    ``enc_outputs_class`` and ``enc_outputs_coord_logits`` as :class:`DeformableDetrModelOutput`; then hf_xcv's own
    ``enc_outputs`` (two-stage: the proposals' ``logits`` and ``pred_boxes``)."""

    init_reference_points: torch.Tensor | None = None
    intermediate_hidden_states: torch.Tensor | None = None
    intermediate_reference_points: torch.Tensor | None = None
    enc_outputs_class: torch.Tensor | None = None
    enc_outputs_coord_logits: torch.Tensor | None = None
    enc_outputs: dict[str, torch.Tensor] | None = None


# ----------------------------------------------------------------------------------------------------------
# backbone
# ----------------------------------------------------------------------------------------------------------


def valid_ratios(valid: torch.Tensor) -> torch.Tensor:
    """(B, h, w) valid mask -> (B, 2): the valid fraction of the map's width and height (first row / column)."""
    height, width = valid.shape[-2:]
    valid_height = valid[:, :, 0].sum(1).to(torch.float32)
    valid_width = valid[:, 0, :].sum(1).to(torch.float32)
    return torch.stack([valid_width / width, valid_height / height], dim=-1)


def encoder_reference_points(shapes: list[tuple[int, int]], ratios: torch.Tensor) -> torch.Tensor:
    """Every pixel's centre, normalised by the valid extent of its level, then scaled onto every level:
    (B, N, L, 2) (x, y), as the original's ``get_reference_points``."""
    points = []
    for level, (h, w) in enumerate(shapes):
        ys = torch.linspace(0.5, h - 0.5, h, dtype=torch.float32, device=ratios.device)
        xs = torch.linspace(0.5, w - 0.5, w, dtype=torch.float32, device=ratios.device)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        ref_y = grid_y.reshape(-1)[None] / (ratios[:, None, level, 1] * h)
        ref_x = grid_x.reshape(-1)[None] / (ratios[:, None, level, 0] * w)
        points.append(torch.stack((ref_x, ref_y), -1))
    reference = torch.cat(points, 1)  # (B, N, 2)
    return reference[:, :, None] * ratios[:, None]  # (B, N, L, 2)


# ----------------------------------------------------------------------------------------------------------
# transformer
# ----------------------------------------------------------------------------------------------------------


class DeformableDetrEncoderLayer(DetectionBlock):
    """Deformable self-attention over all levels (query = pixel + position, value = pixel), then the
    feed-forward block; post-norm residuals with dropout, as the original."""

    def __init__(self, config: DeformableDetrConfig):
        super().__init__(*config.block_arguments(config.encoder_ffn_dim))
        self.self_attn = MultiScaleDeformableAttention(
            config.d_model, config.num_feature_levels, config.encoder_attention_heads, config.encoder_n_points
        )
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, hidden_states, positions, reference_points, shapes, padding_mask, output_attentions=False):
        attended, weights = self.self_attn(
            hidden_states,
            reference_points,
            hidden_states,
            shapes,
            padding_mask=padding_mask,
            position_embeddings=positions,
            output_attentions=output_attentions,
        )
        hidden_states = self.residual(hidden_states, attended, self.self_attn_layer_norm)
        return self.feed_forward(hidden_states), weights


class DeformableDetrDecoderLayer(DetectionBlock):
    """Self-attention over the queries (``q = k = x + query_pos``, ``v = x``), deformable cross-attention into
    the encoder's levels at the queries' references, then the feed-forward block."""

    def __init__(self, config: DeformableDetrConfig, layer_idx: int):
        super().__init__(*config.block_arguments(config.decoder_ffn_dim))
        d = config.d_model
        self.self_attn = MultiHeadAttention(
            d,
            config.decoder_attention_heads,
            attention_type=config.decoder_attention_type,
            attention_kwargs=config.decoder_attention_kwargs,
            dropout=config.attention_dropout,
            config=config,
            layer_idx=layer_idx,
        )
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = MultiScaleDeformableAttention(
            d, config.num_feature_levels, config.decoder_attention_heads, config.decoder_n_points
        )
        self.encoder_attn_layer_norm = nn.LayerNorm(d)

    def forward(
        self, hidden_states, query_positions, reference_points, memory, shapes, ratios, padding_mask, output_attentions
    ):
        attended, self_weights, _ = self.self_attn(
            hidden_states,
            output_attentions=output_attentions,
            query_position_embeddings=query_positions,
            key_position_embeddings=query_positions,
        )
        hidden_states = self.residual(hidden_states, attended, self.self_attn_layer_norm)
        attended, cross_weights = self.encoder_attn(
            hidden_states,
            reference_points,
            memory,
            shapes,
            valid_ratios=ratios,
            padding_mask=padding_mask,
            position_embeddings=query_positions,
            output_attentions=output_attentions,
        )
        hidden_states = self.residual(hidden_states, attended, self.encoder_attn_layer_norm)
        return self.feed_forward(hidden_states), self_weights, cross_weights


class DeformableDetrEncoder(nn.Module):
    def __init__(self, config: DeformableDetrConfig):
        super().__init__()
        self.layers = nn.ModuleList(DeformableDetrEncoderLayer(config) for _ in range(config.encoder_layers))

    def forward(self, hidden_states, positions, shapes, padding_mask, ratios, output_attentions, output_hidden_states):
        reference_points = encoder_reference_points(shapes, ratios)
        states, maps = [hidden_states], []
        for layer in self.layers:
            hidden_states, weights = layer(
                hidden_states, positions, reference_points, shapes, padding_mask, output_attentions
            )
            states.append(hidden_states)
            maps.append(weights)
        return (
            hidden_states,
            (tuple(states) if output_hidden_states else None),
            (tuple(maps) if output_attentions else None),
        )


class DeformableDetrDecoder(nn.Module):
    """Decoder layers from the targets and their references. With box heads (box refinement) each layer's
    boxes ``sigmoid(head(x) + inverse_sigmoid(reference))`` become the next layer's reference, detached; without,
    every layer reads the initial references. No final LayerNorm (as the original)."""

    def __init__(self, config: DeformableDetrConfig):
        super().__init__()
        self.layers = nn.ModuleList(DeformableDetrDecoderLayer(config, i) for i in range(config.decoder_layers))

    def forward(
        self,
        targets,
        query_positions,
        reference_points,
        memory,
        shapes,
        ratios,
        padding_mask,
        box_heads: nn.ModuleList | None,
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> dict[str, Any]:
        hidden_states = targets
        states, self_maps, cross_maps, outputs, references, boxes = [hidden_states], [], [], [], [], []
        for index, layer in enumerate(self.layers):
            hidden_states, self_weights, cross_weights = layer(
                hidden_states,
                query_positions,
                reference_points,
                memory,
                shapes,
                ratios,
                padding_mask,
                output_attentions,
            )
            outputs.append(hidden_states)
            states.append(hidden_states)
            self_maps.append(self_weights)
            cross_maps.append(cross_weights)
            if box_heads is not None:
                predicted = refine_boxes(box_heads[index](hidden_states), reference_points)
                boxes.append(predicted)
                reference_points = predicted.detach()
            references.append(reference_points)  # what the next layer reads
        return {
            "intermediate": torch.stack(outputs, dim=1),  # (B, layers, Q, d)
            "references": torch.stack(references, dim=1),  # (B, layers, Q, 2|4)
            "boxes": torch.stack(boxes, dim=1) if boxes else None,  # (B, layers, Q, 4)
            "hidden_states": tuple(states) if output_hidden_states else None,
            "attentions": tuple(self_maps) if output_attentions else None,
            "cross_attentions": tuple(cross_maps) if output_attentions else None,
        }


def refine_boxes(delta: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Boxes from a head's (…, 4) output relative to a reference: ``sigmoid(delta + inverse_sigmoid(ref))`` for
    box references; for point references the centre moves and the size is the head's own."""
    if reference.shape[-1] == 4:
        return (delta + inverse_sigmoid(reference)).sigmoid()
    centre = delta[..., :2] + inverse_sigmoid(reference)
    return torch.cat([centre, delta[..., 2:]], dim=-1).sigmoid()


def proposal_position_embedding(proposals: torch.Tensor, features: int) -> torch.Tensor:
    """Sine embedding of (B, K, 4) box logits (sigmoid, times 2*pi): ``features`` per coordinate, (B, K,
    4 * features); the original's ``get_proposal_pos_embed``."""
    index = torch.arange(features, dtype=torch.float32, device=proposals.device)
    dim_t = 10000 ** (2 * torch.div(index, 2, rounding_mode="floor") / features)
    position = proposals.float().sigmoid() * (2 * math.pi)
    position = position[..., None] / dim_t  # (B, K, 4, F)
    position = torch.stack((position[..., 0::2].sin(), position[..., 1::2].cos()), dim=4).flatten(3)
    return position.flatten(2)


def encoder_proposals(
    memory: torch.Tensor, padding_mask: torch.Tensor, shapes: list[tuple[int, int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two-stage proposals of every encoder pixel: a box at the pixel's centre (normalised by its level's
    valid extent) of size 0.05 * 2^level, as logits; proposals on padding or too close to the border (outside
    (0.01, 0.99)) get +inf logits and their memory zeroed. Returns (memory, proposal logits (B, N, 4))."""
    batch = memory.shape[0]
    proposals, start = [], 0
    for level, (h, w) in enumerate(shapes):
        valid = ~padding_mask[:, start : start + h * w].view(batch, h, w)
        valid_h = valid[:, :, 0].sum(1).to(torch.float32)
        valid_w = valid[:, 0, :].sum(1).to(torch.float32)
        ys = torch.linspace(0, h - 1, h, dtype=torch.float32, device=memory.device)
        xs = torch.linspace(0, w - 1, w, dtype=torch.float32, device=memory.device)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        grid = torch.stack([grid_x, grid_y], -1)  # (h, w, 2)
        scale = torch.stack([valid_w, valid_h], -1).view(batch, 1, 1, 2)
        centre = (grid[None] + 0.5) / scale
        size = torch.full_like(centre, PROPOSAL_BASE_SIZE * 2.0**level)
        proposals.append(torch.cat([centre, size], -1).view(batch, -1, 4))
        start += h * w
    proposals = torch.cat(proposals, 1)
    usable = ((proposals > 0.01) & (proposals < 0.99)).all(-1, keepdim=True)
    logits = torch.log(proposals / (1 - proposals))
    logits = logits.masked_fill(padding_mask[..., None], float("inf")).masked_fill(~usable, float("inf"))
    memory = memory.masked_fill(padding_mask[..., None], 0.0).masked_fill(~usable, 0.0)
    return memory, logits


# ----------------------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------------------


class DeformableDetrPreTrainedModel(DetectionTransformerPreTrainedModel):
    config_class = DeformableDetrConfig
    config: DeformableDetrConfig
    _no_split_modules = ["DetectionBackbone", "DeformableDetrEncoderLayer", "DeformableDetrDecoderLayer"]
    _task_head_modules = ("class_embed", "bbox_embed")
    attention_requests = DEFORMABLE_DECODER_REQUESTS
    attention_role = "Deformable DETR's decoder"

    def _init_weights(self, module: nn.Module) -> None:
        """The original initialisation: Xavier-uniform matrices in the transformer (the decoder's fused q/k/v
        bound of ``nn.MultiheadAttention``, zero attention biases), deformable attention's own (offsets in 8
        directions, zero attention weights), Xavier input projections with zero biases, N(0, 1) level embeddings
        and queries, PyTorch's default init elsewhere; the backbone keeps its own."""
        super()._init_weights(module)  # PyTorch defaults for Linear / Conv2d, N(0, 1) embeddings, unit norms
        if isinstance(module, nn.GroupNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, MultiScaleDeformableAttention):
            module.reset_parameters()
        elif isinstance(module, (DeformableDetrEncoderLayer, DeformableDetrDecoderLayer)):
            for name, sub in module.named_modules():
                if not isinstance(sub, nn.Linear) or name.startswith(("self_attn.core", "encoder_attn")):
                    continue
                if isinstance(module.self_attn, MultiScaleDeformableAttention) and name.startswith("self_attn"):
                    continue
                if name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
                    # nn.MultiheadAttention's fused (3d, d) in_proj: Xavier bound of the fused matrix.
                    init.xavier_uniform_(sub.weight, gain=math.sqrt(0.5))
                    init.zeros_(sub.bias)
                else:
                    init.xavier_uniform_(sub.weight)
                    if name == "self_attn.o_proj":
                        init.zeros_(sub.bias)
        elif isinstance(module, DeformableDetrModel):
            for projection in module.input_proj:
                init.xavier_uniform_(projection[0].weight)
                init.zeros_(projection[0].bias)
            init.normal_(module.level_embed)
            if module.config.two_stage:
                init.xavier_uniform_(module.enc_output.weight)
                init.xavier_uniform_(module.pos_trans.weight)
            else:
                init.xavier_uniform_(module.reference_points.weight)
                init.zeros_(module.reference_points.bias)


class DeformableDetrModel(DeformableDetrPreTrainedModel):
    """The bare Deformable DETR: backbone levels (and extra stride-2 levels) projected to ``d_model`` with
    GroupNorm, sine positions plus a learned level embedding, the deformable encoder over all levels, and the
    decoder from learned queries (or, two-stage, from the encoder's top proposals). Box refinement and the
    two-stage proposals need the detector's heads (``box_heads`` / ``class_heads``); without them the decoder
    reads the initial references in every layer."""

    def __init__(self, config: DeformableDetrConfig):
        super().__init__(config)
        d = config.d_model
        self.backbone = self.build_backbone()
        projections = []
        channels = self.backbone.channels
        for level in range(config.num_feature_levels):
            if level < len(channels):
                conv = nn.Conv2d(channels[level], d, kernel_size=1)
            else:  # extra levels: stride-2 3x3 convolutions, of the last backbone map and then of each other
                conv = nn.Conv2d(channels[-1] if level == len(channels) else d, d, kernel_size=3, stride=2, padding=1)
            projections.append(nn.Sequential(conv, nn.GroupNorm(INPUT_PROJECTION_GROUPS, d)))
        self.input_proj = nn.ModuleList(projections)
        self.level_embed = nn.Parameter(torch.empty(config.num_feature_levels, d))
        if config.two_stage:
            self.enc_output = nn.Linear(d, d)
            self.enc_output_norm = nn.LayerNorm(d)
            self.pos_trans = nn.Linear(2 * d, 2 * d)
            self.pos_trans_norm = nn.LayerNorm(2 * d)
        else:
            self.query_position_embeddings = nn.Embedding(config.num_queries, 2 * d)
            self.reference_points = nn.Linear(d, 2)
        self.encoder = DeformableDetrEncoder(config)
        self.decoder = DeformableDetrDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.input_proj

    def levels(self, pixel_values: torch.Tensor, valid: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The projected pyramid: (B, d, h_l, w_l) maps and their (B, h_l, w_l) valid masks."""
        maps, masks = self.backbone(pixel_values, valid)
        sources = [projection(m) for projection, m in zip(self.input_proj, maps)]
        for level in range(len(maps), self.config.num_feature_levels):
            source = self.input_proj[level](maps[-1] if level == len(maps) else sources[-1])
            sources.append(source)
            masks.append(resample_mask(valid, source.shape[-2:]))
        return sources, masks

    def decoder_queries(self, memory, padding, shapes, class_heads, box_heads) -> tuple[torch.Tensor | None, ...]:
        """The decoder's query positions, targets and (normalised) references: the learned queries, or in the
        two-stage model the encoder's top proposals (then also their scores (B, N, K) and box logits (B, N, 4))."""
        config = self.config
        batch, d, dtype = memory.shape[0], config.d_model, memory.dtype
        enc_class = enc_coords = None
        if config.two_stage:
            if class_heads is None or box_heads is None:
                raise ValueError(
                    "the two-stage Deformable DETR needs the detector's heads to score its proposals: use "
                    "DeformableDetrForObjectDetection (or pass class_heads and box_heads)"
                )
            proposals_memory, proposals = encoder_proposals(memory, padding, shapes)
            proposals_memory = self.enc_output_norm(self.enc_output(proposals_memory))
            enc_class = class_heads[-1](proposals_memory)  # (B, N, K)
            enc_coords = box_heads[-1](proposals_memory) + proposals  # (B, N, 4) logits
            count = config.two_stage_num_proposals
            if count > enc_class.shape[1]:
                raise ValueError(
                    f"two_stage_num_proposals={count} exceeds the {enc_class.shape[1]} encoder pixels of these images"
                )
            top = torch.topk(enc_class[..., 0], count, dim=1).indices  # (B, K)
            top_coords = torch.gather(enc_coords, 1, top[..., None].expand(-1, -1, 4)).detach()
            reference_points = top_coords.sigmoid()
            embedded = self.pos_trans_norm(self.pos_trans(proposal_position_embedding(top_coords, d // 2).to(dtype)))
            query_positions, targets = embedded.split(d, dim=2)
        else:
            query_positions, targets = self.query_position_embeddings.weight.split(d, dim=1)
            query_positions = query_positions[None].expand(batch, -1, -1)
            targets = targets[None].expand(batch, -1, -1)
            reference_points = self.reference_points(query_positions).sigmoid()
        return query_positions, targets, reference_points, enc_class, enc_coords

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        pixel_mask: torch.Tensor | None = None,
        *,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        class_heads: nn.ModuleList | None = None,
        box_heads: nn.ModuleList | None = None,
        **kwargs: Any,
    ) -> DeformableDetrModelOutput:
        r"""
        pixel_values (batch, channels, height, width): images, padded bottom/right to a common size.
        pixel_mask (batch, height, width): 1 for image pixels, 0 for padding (default: no padding).
        class_heads / box_heads: the detector's heads (``DeformableDetrForObjectDetection`` passes them): with
            ``with_box_refine`` the box heads refine the references layer by layer; with ``two_stage`` the last
            class and box heads score and place the encoder's proposals.
        """
        self.take_kwargs(kwargs)
        config = self.config
        output_attentions, output_hidden_states = self._resolve_outputs(output_attentions, output_hidden_states)
        pixel_values, valid = self._pixels(pixel_values, pixel_mask)
        sources, masks = self.levels(pixel_values, valid)
        shapes = [tuple(source.shape[-2:]) for source in sources]
        dtype = sources[0].dtype
        flat_sources, flat_positions, flat_masks = [], [], []
        for level, (source, mask) in enumerate(zip(sources, masks)):
            position = sine_position_embedding_2d(mask, config.d_model // 2, offset=-0.5)  # float32 (B, d, h, w)
            position = position.flatten(2).transpose(1, 2) + self.level_embed[level].float()
            flat_positions.append(position.to(dtype))
            flat_sources.append(source.flatten(2).transpose(1, 2))
            flat_masks.append(~mask.flatten(1))
        source = torch.cat(flat_sources, 1)  # (B, N, d)
        positions = torch.cat(flat_positions, 1)
        padding = torch.cat(flat_masks, 1)  # (B, N), True on padding
        ratios = torch.stack([valid_ratios(mask) for mask in masks], 1)  # (B, L, 2)
        memory, encoder_states, encoder_maps = self.encoder(
            source, positions, shapes, padding, ratios, output_attentions, output_hidden_states
        )
        query_positions, targets, reference_points, enc_class, enc_coords = self.decoder_queries(
            memory, padding, shapes, class_heads, box_heads
        )
        init_reference = reference_points
        refining = box_heads if config.with_box_refine else None
        decoded = self.decoder(
            targets,
            query_positions,
            reference_points,
            memory,
            shapes,
            ratios,
            padding,
            refining,
            output_attentions,
            output_hidden_states,
        )
        return DeformableDetrModelOutput(
            init_reference_points=init_reference,
            last_hidden_state=decoded["intermediate"][:, -1],
            intermediate_hidden_states=decoded["intermediate"],
            intermediate_reference_points=decoded["references"],
            decoder_hidden_states=decoded["hidden_states"],
            decoder_attentions=decoded["attentions"],
            cross_attentions=decoded["cross_attentions"],
            encoder_last_hidden_state=memory,
            encoder_hidden_states=encoder_states,
            encoder_attentions=encoder_maps,
            enc_outputs_class=enc_class,
            enc_outputs_coord_logits=enc_coords,
            intermediate_predicted_boxes=decoded["boxes"],
        )


class DeformableDetrForObjectDetection(DeformableDetrPreTrainedModel):
    """Deformable DETR with its heads: sigmoid class scores over ``num_labels`` classes and boxes (a 3-layer
    MLP relative to each query's reference), one pair shared by the decoder layers, or one per layer with box
    refinement (plus the encoder's proposal pair in the two-stage model). With ``labels`` the original's loss:
    Hungarian matching with the focal class cost, sigmoid focal loss (``focal_alpha``, ``focal_gamma``), L1 and
    GIoU, on every decoder layer (``auxiliary_loss``) and, two-stage, on the encoder's proposals with every
    target as one class."""

    _is_task_model = True

    def __init__(self, config: DeformableDetrConfig):
        super().__init__(config)
        self.model = DeformableDetrModel(config)
        heads = config.num_prediction_heads
        self.class_embed = nn.ModuleList(nn.Linear(config.d_model, config.num_labels) for _ in range(heads))
        self.bbox_embed = nn.ModuleList(
            MLPPredictionHead(config.d_model, config.d_model, 4, num_layers=3) for _ in range(heads)
        )
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if module is self:
            self.reset_heads()

    @torch.no_grad()
    def reset_heads(self) -> None:
        """The original's head initialisation: the first class head with the focal prior bias (-4.595), the first
        box head's last layer zero with -2 on the size biases (boxes start small around the reference); the
        other heads are copies of the first (the original clones it), and in the two-stage model every size bias
        is 0."""
        prior = -math.log((1 - FOCAL_PRIOR_PROBABILITY) / FOCAL_PRIOR_PROBABILITY)
        first_class, first_box = self.class_embed[0], self.bbox_embed[0]
        init.constant_(first_class.bias, prior)
        init.zeros_(first_box.layers[-1].weight)
        init.zeros_(first_box.layers[-1].bias)
        for index in range(1, len(self.class_embed)):
            pairs = zip(
                [*self.class_embed[index].parameters(), *self.bbox_embed[index].parameters()],
                [*first_class.parameters(), *first_box.parameters()],
            )
            for parameter, source in pairs:
                init.copy_(parameter, source)
        if not self.config.two_stage and not getattr(first_box.layers[-1].bias, "_is_hf_initialized", False):
            first_box.layers[-1].bias[2:] = -2.0

    def criterion(self) -> SetCriterion:
        config = self.config
        matcher = HungarianMatcher(
            config.class_cost,
            config.bbox_cost,
            config.giou_cost,
            class_cost_type="focal",
            focal_alpha=config.focal_alpha,
            focal_gamma=config.focal_gamma,
        )
        return SetCriterion(
            config.num_labels,
            matcher,
            class_loss="focal",
            focal_alpha=config.focal_alpha,
            focal_gamma=config.focal_gamma,
            class_loss_coefficient=config.class_loss_coefficient,
            bbox_loss_coefficient=config.bbox_loss_coefficient,
            giou_loss_coefficient=config.giou_loss_coefficient,
        )

    def head(self, index: int) -> tuple[nn.Module, nn.Module]:
        """The class and box heads of decoder layer ``index`` (the shared pair without box refinement)."""
        index = index if self.config.with_box_refine else 0
        return self.class_embed[index], self.bbox_embed[index]

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
    ) -> DeformableDetrObjectDetectionOutput:
        r"""
        pixel_values / pixel_mask: as :class:`DeformableDetrModel`.
        labels: one dict per image with ``class_labels`` (T,) int64 in [0, num_labels) and ``boxes`` (T, 4)
            normalised (cx, cy, w, h) relative to the unpadded image; optional ``iscrowd`` (T,). Images without
            objects have T = 0.
        """
        self.take_kwargs(kwargs)
        outputs = self.model(
            pixel_values,
            pixel_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            class_heads=self.class_embed,
            box_heads=self.bbox_embed,
        )
        layers = outputs.intermediate_hidden_states  # (B, L, Q, d)
        count = layers.shape[1]
        indices = range(count) if self.config.auxiliary_loss else [count - 1]
        all_logits, all_boxes = [], []
        for index in indices:
            class_head, box_head = self.head(index)
            all_logits.append(class_head(layers[:, index]))
            if outputs.intermediate_predicted_boxes is not None:
                all_boxes.append(outputs.intermediate_predicted_boxes[:, index])
            else:
                all_boxes.append(refine_boxes(box_head(layers[:, index]), outputs.init_reference_points))
        auxiliary = self.auxiliary_outputs(all_logits, all_boxes)
        enc_outputs = None
        if self.config.two_stage:
            enc_outputs = {
                "logits": outputs.enc_outputs_class,
                "pred_boxes": outputs.enc_outputs_coord_logits.sigmoid(),
            }
        loss = loss_dict = None
        if labels is not None:
            loss, loss_dict = self.detection_loss(all_logits[-1], all_boxes[-1], auxiliary, labels)
            if enc_outputs is not None:  # class-agnostic: every target is class 0 for the proposals
                agnostic = [{**t, "class_labels": torch.zeros_like(t["class_labels"])} for t in labels]
                enc_loss, enc_dict = self.criterion().to(all_logits[-1].device)(enc_outputs, agnostic)
                loss = loss + enc_loss
                loss_dict.update({f"{name}_enc": value for name, value in enc_dict.items()})
        return detection_output(
            DeformableDetrObjectDetectionOutput,
            outputs,
            loss=loss,
            loss_dict=loss_dict,
            logits=all_logits[-1],
            pred_boxes=all_boxes[-1],
            auxiliary_outputs=auxiliary if labels is not None else None,  # as transformers: with the loss
            enc_outputs=enc_outputs,
        )
