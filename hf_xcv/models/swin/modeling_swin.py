"""Swin Transformer (Liu et al. 2021): patch embedding, stages of (shifted) window attention, patch merging.

Reads top to bottom: Embeddings -> Layer (block) -> PatchMerging -> Stage -> Encoder -> Model ->
ForImageClassification -> Backbone. The window attention is the registry's ``shifted_window`` entry behind
hf_xcv's shared attention layer, so ``attention_type`` swaps it for any other core (``full``: global attention
over each stage).

Any input size works: images are padded to a multiple of the patch, each block pads its grid to a multiple of
its window, and patch merging pads to even sides, always with zeros at the bottom and right and always
cropped away again, as transformers' Swin and the original detection code do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.backbone_utils import BackboneMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BackboneOutput
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple

from ...attention import MultiHeadAttention
from ...attention.shifted_window import (
    ShiftedWindowAttention,
    padded_grid,
    partition,
    read_back_window_maps,
    unpartition,
    window_and_shift,
    window_maps_to_tokens,
)
from ...layers import DropPath, Mlp, PatchEmbed, resample_patch_pos_embed, to_pair
from ...modeling_utils import XcvPreTrainedModel
from .configuration_swin import SWIN_ATTENTION_REQUESTS, SwinConfig


@dataclass
class SwinEncoderOutput(ModelOutput):
    """``hidden_states``: the embeddings and each stage's output (after its patch merging), (B, L_i, C_i);
    ``reshaped_hidden_states``: the same as (B, C_i, H_i, W_i); ``stage_features``: each stage's output before
    its patch merging, (B, C_i, H_i, W_i), what the backbone returns; ``attentions``: each stage's last block's
    attention maps as transformers lays them out (see :class:`SwinModelOutput`); ``token_attentions``: the same maps
    (B, heads, L_i, L_i) in token order."""

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    reshaped_hidden_states: tuple[torch.Tensor, ...] | None = None
    stage_features: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    token_attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class SwinModelOutput(ModelOutput):
    """``last_hidden_state`` (B, L, C) after the final LayerNorm, ``pooler_output`` (B, C) its mean over tokens;
    ``hidden_states`` / ``reshaped_hidden_states`` as :class:`SwinEncoderOutput`. ``attentions``: one map per stage
    (its last block's) in transformers' layout: with the ``shifted_window`` core, per window, (B * windows, heads,
    w * w, w * w) over the padded grid rolled by the block's shift (the softmax with relative and region biases);
    with any other core (B, heads, L, L) over the stage's tokens, as ViT's. ``token_attentions`` (hf_xcv's own, after
    transformers' fields): the same maps in token order, (B, heads, L, L), padding tokens left out."""

    last_hidden_state: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    reshaped_hidden_states: tuple[torch.Tensor, ...] | None = None
    token_attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class SwinImageClassifierOutput(ModelOutput):
    """``loss`` (when labels are given), ``logits`` (B, num_labels), and the model's hidden states and maps."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    reshaped_hidden_states: tuple[torch.Tensor, ...] | None = None
    token_attentions: tuple[torch.Tensor, ...] | None = None


def resample_bias_table(table: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor | None:
    """A relative position bias table ((2W - 1)^2, heads) resampled bicubically to ``shape`` ((2W' - 1)^2, the
    same heads) as a (2W - 1) x (2W - 1) image per head, as the original ``load_pretrained``; None when the
    heads differ or a size is no odd square."""
    old_side, new_side = math.isqrt(table.shape[0]), math.isqrt(shape[0])
    if table.dim() != 2 or table.shape[1] != shape[1] or old_side**2 != table.shape[0] or new_side**2 != shape[0]:
        return None
    image = table.float().t().reshape(1, table.shape[1], old_side, old_side)  # (1, heads, 2W - 1, 2W - 1)
    image = F.interpolate(image, size=(new_side, new_side), mode="bicubic", align_corners=False)
    return image.reshape(table.shape[1], shape[0]).t().to(table.dtype)  # ((2W' - 1)^2, heads)


def to_map(tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(B, h * w, C) -> (B, C, h, w)."""
    return tokens.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], *grid)


def through_map(tokens: torch.Tensor, grid: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``tokens`` (B, h * w, C) as a map (B, C, h, w) and the same tokens read back from it: computing on with those
    puts the map a model returns on the autograd graph (a retained gradient, attribution), not beside it."""
    feature_map = to_map(tokens, grid)
    return feature_map, feature_map.flatten(2).transpose(1, 2).contiguous()  # (B, h * w, C)


class SwinEmbeddings(nn.Module):
    """Patch embedding (pixels padded to a multiple of the patch), LayerNorm, optional absolute positions."""

    def __init__(self, config: SwinConfig):
        super().__init__()
        self.patch_size = to_pair(config.patch_size)
        self.patch_embeddings = PatchEmbed(config.patch_size, config.num_channels, config.embed_dim)
        self.grid = self.grid_of(config)
        self.position_embeddings = None
        if config.use_absolute_embeddings:
            self.position_embeddings = nn.Parameter(torch.zeros(1, self.grid[0] * self.grid[1], config.embed_dim))
        self.norm = nn.LayerNorm(config.embed_dim)  # transformers' and the original's: default eps
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    @staticmethod
    def grid_of(config: SwinConfig) -> tuple[int, int]:
        """The patch grid at ``config.image_size`` (a partial patch counts: the pixels are padded)."""
        (h, w), (ph, pw) = to_pair(config.image_size), to_pair(config.patch_size)
        return -(-h // ph), -(-w // pw)

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """(B, C, H, W) -> tokens (B, ceil(H/p) * ceil(W/p), embed_dim) and their grid."""
        if pixel_values.ndim == 4 and min(pixel_values.shape[-2:]) < 1:
            raise ValueError(f"pixel_values have an empty side: shape {tuple(pixel_values.shape)}")
        # Concrete sizes, also while tracing: windows, shifts and padding follow the image size, so an exported or
        # compiled graph holds one size (its batch stays free) rather than guards that ONNX cannot check.
        height, width = (int(size) for size in pixel_values.shape[-2:])
        ph, pw = self.patch_size
        if height % ph or width % pw:  # to a multiple of the patch
            pixel_values = F.pad(pixel_values, (0, (-width) % pw, 0, (-height) % ph))
        tokens, grid = self.patch_embeddings(pixel_values)  # (B, N, C)
        tokens = self.norm(tokens)
        if self.position_embeddings is not None:
            tokens = tokens + resample_patch_pos_embed(self.position_embeddings, self.grid, grid, 0)
        return self.dropout(tokens), grid


class SwinLayer(GradientCheckpointingLayer):
    """One Swin block (pre-norm): x + DropPath(WindowAttention(LN(x))), then x + DropPath(MLP(LN(x))).

    With Swin's ``shifted_window`` core the block windows the grid itself, as the original block does: it pads the
    normalised tokens with zeros to whole windows (they take part, as in the original and transformers), rolls by
    its shift, cuts windows and hands them to the attention as a batch of one-window grids, with the -100 between
    regions of a shifted window as the seam's ``attention_bias``; the core adds its relative position bias. Any
    other core attends over the whole stage grid.
    """

    def __init__(self, config: SwinConfig, dim: int, num_heads: int, block: int, drop_path: float, backbone: bool):
        super().__init__()
        self.layernorm_before = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.attention = MultiHeadAttention(
            dim,
            num_heads,
            qkv_bias=config.qkv_bias,
            attention_type=config.attention_type,
            attention_kwargs=config.block_attention_kwargs(),
            dropout=config.attention_probs_dropout_prob,
            config=config,
        )
        self.windowed = isinstance(self.attention.core, ShiftedWindowAttention)
        self.window_size = config.window_size
        self.shift_size = 0 if block % 2 == 0 else config.window_size // 2
        self.shrink_to_grid = not backbone  # the detection backbone keeps window and shift at every size
        self.layernorm_after = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        hidden = int(config.mlp_ratio * dim)
        self.mlp = Mlp(dim, hidden, act=config.hidden_act, dropout=0.0, out_dropout=config.hidden_dropout_prob)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.drop_path = DropPath(drop_path)

    def _window_attention(
        self, x: torch.Tensor, grid: tuple[int, int], output_attentions: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(B, h * w, C) -> attended (B, h * w, C) and the maps, per window (B * windows, heads, w * w, w * w) and in
        token order (B, heads, h * w, h * w), both on the autograd graph."""
        window, shift = window_and_shift(grid, self.window_size, self.shift_size, self.shrink_to_grid)
        batch, length, channels = x.shape
        padded = padded_grid(grid, window)
        x = x.view(batch, *grid, channels)
        if padded != tuple(grid):  # (a pad of nothing would still copy)
            x = F.pad(x, (0, 0, 0, padded[1] - grid[1], 0, padded[0] - grid[0]))
        if shift:
            x = torch.roll(x, (-shift, -shift), dims=(1, 2))
        windows = partition(x, window)  # (B, nW, N, C)
        count = windows.shape[1]
        regions = self.attention.core.region_bias(padded, window, shift, x.device)  # (nW, N, N) or None
        bias = None
        if regions is not None:
            bias = (
                regions.to(x.dtype)[None, :, None]
                .expand(batch, -1, -1, -1, -1)
                .reshape(batch * count, 1, *regions.shape[1:])
            )
        windows = windows.reshape(batch * count, window * window, channels)
        attended, weights, _ = self.attention(
            windows, grid=(window, window), attention_bias=bias, output_attentions=output_attentions
        )  # (B * nW, N, C)
        tokens = None
        if weights is not None:  # (B * nW, heads, N, N): transformers' layout
            tokens = window_maps_to_tokens(weights, grid, window, shift, batch)  # (B, heads, L, L)
            # computed on from the token-order maps, which are computed from the window maps: both on the graph
            read_back = read_back_window_maps(tokens, weights, grid, window, shift)  # (B * nW, heads, N, N)
            attended = self._through_maps(attended, windows, read_back)
        attended = unpartition(attended.view(batch, count, window * window, channels), window, padded)
        if shift:
            attended = torch.roll(attended, (shift, shift), dims=(1, 2))
        if padded != tuple(grid):
            attended = attended[:, : grid[0], : grid[1]]
        return attended.reshape(batch, length, channels), weights, tokens

    def _through_maps(self, attended: torch.Tensor, windows: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """``attended`` (B * nW, N, C) as computed, with the gradient of ``o_proj(probs @ v)`` (the same function of
        the same values; ``probs`` (B * nW, heads, N, N) read back from the token-order maps the block returns): the
        maps are on the autograd graph (``retain_grad``, attribution), as transformers' are. Attention dropout is
        left out of this gradient, as the registry's maps that are copies leave it out."""
        attention = self.attention
        count, size, channels = windows.shape
        v = attention.v_proj(windows).view(count, size, attention.num_heads, -1).transpose(1, 2)  # (B * nW, H, N, D)
        through = attention.o_proj(torch.matmul(probs, v).transpose(1, 2).reshape(count, size, channels))
        return attended.detach() + (through - through.detach())

    def forward(
        self, hidden_states: torch.Tensor, grid: tuple[int, int], output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Returns the output and, when asked, the maps in transformers' layout and in token order (the same tensor
        for a core that is not windowed here)."""
        normed = self.layernorm_before(hidden_states)
        if self.windowed:
            attended, weights, tokens = self._window_attention(normed, grid, output_attentions)
        else:
            attended, weights, _ = self.attention(normed, grid=grid, output_attentions=output_attentions)
            tokens = weights
        hidden_states = hidden_states + self.drop_path(self.dropout(attended))
        hidden_states = hidden_states + self.drop_path(self.mlp(self.layernorm_after(hidden_states)))
        return hidden_states, weights, tokens


class SwinPatchMerging(nn.Module):
    """2x2 neighbourhoods concatenated (x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2]), LayerNorm,
    Linear 4C -> 2C; an odd side is padded with zeros first."""

    def __init__(self, dim: int):
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, hidden_states: torch.Tensor, grid: tuple[int, int]) -> tuple[torch.Tensor, tuple[int, int]]:
        batch, _, channels = hidden_states.shape
        x = hidden_states.view(batch, *grid, channels)
        if grid[0] % 2 or grid[1] % 2:
            x = F.pad(x, (0, 0, 0, grid[1] % 2, 0, grid[0] % 2))  # (B, even h, even w, C)
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], dim=-1)
        merged = (x.shape[1], x.shape[2])
        x = x.reshape(batch, merged[0] * merged[1], 4 * channels)  # (B, h/2 * w/2, 4C)
        return self.reduction(self.norm(x)), merged


class SwinStage(nn.Module):
    """``depth`` blocks at one width, then (except in the last stage) patch merging."""

    def __init__(self, config: SwinConfig, stage: int, drop_paths: list[float], backbone: bool):
        super().__init__()
        dim, heads = config.stage_width(stage), config.num_heads[stage]
        self.blocks = nn.ModuleList(
            [SwinLayer(config, dim, heads, block, rate, backbone) for block, rate in enumerate(drop_paths)]
        )
        self.downsample = SwinPatchMerging(dim) if stage < len(config.depths) - 1 else None

    def forward(
        self,
        hidden_states: torch.Tensor,
        grid: tuple[int, int],
        output_attentions: bool = False,
        output_features: bool = False,
    ) -> tuple[torch.Tensor, tuple[int, int], torch.Tensor | None, tuple[torch.Tensor | None, torch.Tensor | None]]:
        """Returns the output, its grid, the features before merging as a map (B, C, h, w) when
        ``output_features`` (the merging reads it) and the last block's maps (transformers' layout, token order)."""
        weights = tokens = features = None
        for block in self.blocks:
            hidden_states, weights, tokens = block(hidden_states, grid, output_attentions)
        if output_features:
            features, hidden_states = through_map(hidden_states, grid)
        if self.downsample is not None:
            hidden_states, grid = self.downsample(hidden_states, grid)
        return hidden_states, grid, features, (weights, tokens)


class SwinEncoder(nn.Module):
    def __init__(self, config: SwinConfig, backbone: bool = False):
        super().__init__()
        total = sum(config.depths)
        rates = [config.drop_path_rate * i / max(total - 1, 1) for i in range(total)]  # linear over all blocks
        starts = [sum(config.depths[:i]) for i in range(len(config.depths))]
        self.layers = nn.ModuleList(
            [
                SwinStage(config, stage, rates[start : start + depth], backbone)
                for stage, (start, depth) in enumerate(zip(starts, config.depths))
            ]
        )

    def forward(
        self,
        hidden_states: torch.Tensor,
        grid: tuple[int, int],
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        output_stage_features: bool = False,
    ) -> SwinEncoderOutput:
        # Every map returned is on the path to the outputs: the tokens computed on are read back from it.
        hidden = reshaped = features = None
        if output_hidden_states or output_stage_features:
            stem, hidden_states = through_map(hidden_states, grid)
            hidden, reshaped, features = [hidden_states], [stem], [stem]
        all_weights, all_tokens = [], []
        for stage in self.layers:
            hidden_states, grid, before, (weights, tokens) = stage(
                hidden_states, grid, output_attentions, output_stage_features
            )
            if output_hidden_states:
                feature_map, hidden_states = through_map(hidden_states, grid)
                hidden.append(hidden_states)
                reshaped.append(feature_map)
            if output_stage_features:
                features.append(before)
            if output_attentions:
                all_weights.append(weights)
                all_tokens.append(tokens)
        return SwinEncoderOutput(
            last_hidden_state=hidden_states,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            reshaped_hidden_states=tuple(reshaped) if output_hidden_states else None,
            stage_features=tuple(features) if output_stage_features else None,
            attentions=tuple(all_weights) if output_attentions else None,
            token_attentions=tuple(all_tokens) if output_attentions else None,
        )


class SwinPreTrainedModel(XcvPreTrainedModel):
    config_class = SwinConfig
    config: SwinConfig
    base_model_prefix = "swin"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["SwinEmbeddings", "SwinLayer", "SwinPatchMerging"]
    _supports_sdpa = True
    _supports_attention_backend = True
    _task_head_modules = ("classifier",)
    attention_requests = SWIN_ATTENTION_REQUESTS
    attention_role = "a Swin stage"
    # Fine-tuning at another window or resolution resamples these (as the original load_pretrained does).
    _resampled_weights = (r".*relative_position_bias_table", r"(swin\.)?embeddings\.position_embeddings")

    def resample_weight(self, key: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor | None:
        """A bias table ((2W - 1)^2, heads) resampled bicubically to another window, or square absolute positions
        (1, n * n, C) to the model's grid; None for anything else (another head count, ...)."""
        if key.endswith("relative_position_bias_table"):
            return resample_bias_table(tensor, shape)
        if tensor.dim() == 3 and tensor.shape[0] == 1 and tensor.shape[2] == shape[2]:
            side = math.isqrt(tensor.shape[1])
            if side * side != tensor.shape[1]:
                return None
            grid = SwinEmbeddings.grid_of(self.config)
            return resample_patch_pos_embed(tensor, (side, side), grid, 0)
        return None

    def _init_weights(self, module: nn.Module) -> None:
        """The original initialisation: truncated normal (std ``initializer_range``) for Linear weights and the
        absolute positions, zero biases, unit LayerNorms; the patch embedding keeps PyTorch's conv init; the
        relative position bias tables start from a truncated normal of std 0.02 (their core builds them so)."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.trunc_normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, SwinEmbeddings) and module.position_embeddings is not None:
            init.trunc_normal_(module.position_embeddings, mean=0.0, std=std)

    def _pixels(self, pixel_values: torch.Tensor | None) -> torch.Tensor:
        return self.checked_pixels(pixel_values)


class SwinModel(SwinPreTrainedModel):
    """The bare Swin: ``last_hidden_state`` after the final LayerNorm and its mean over tokens."""

    def __init__(self, config: SwinConfig, add_pooling_layer: bool = True, backbone: bool = False):
        super().__init__(config)
        self.num_features = config.hidden_size
        self.embeddings = SwinEmbeddings(config)
        self.encoder = SwinEncoder(config, backbone)
        # A backbone normalises each of its feature maps instead (its own norms) and has no final norm.
        self.layernorm = None if backbone else nn.LayerNorm(self.num_features, eps=config.layer_norm_eps)
        self.add_pooling_layer = add_pooling_layer
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.patch_embeddings

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        *,
        interpolate_pos_encoding: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> SwinModelOutput:
        r"""
        Args:
            pixel_values: (batch, num_channels, height, width) images of any size, as the image processor makes
                them.
            interpolate_pos_encoding: accepted for transformers' signature; absolute position embeddings (when
                used) are always resampled to the input's grid.

        Returns:
            last_hidden_state (batch, tokens of the last stage, hidden_size), pooler_output (batch, hidden_size),
            hidden_states / reshaped_hidden_states (embeddings + one per stage), attentions (one per stage, in
            transformers' layout: per window with the ``shifted_window`` core) and token_attentions (the same maps in
            token order).
        """
        self.take_kwargs(kwargs)
        output_attentions, output_hidden_states = self._resolve_outputs(output_attentions, output_hidden_states)
        hidden_states, grid = self.embeddings(self._pixels(pixel_values))
        encoded = self.encoder(hidden_states, grid, output_attentions, output_hidden_states)
        sequence_output = self.layernorm(encoded.last_hidden_state)
        return SwinModelOutput(
            last_hidden_state=sequence_output,
            pooler_output=sequence_output.mean(dim=1) if self.add_pooling_layer else None,  # (B, C)
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
            reshaped_hidden_states=encoded.reshaped_hidden_states,
            token_attentions=encoded.token_attentions,
        )


class SwinForImageClassification(SwinPreTrainedModel):
    """Swin with a linear classifier on the mean of the last stage's tokens.

    The loss follows ``config.problem_type`` as in transformers: cross-entropy for integer labels, binary
    cross-entropy for multi-hot float labels, MSE when ``num_labels == 1``.
    """

    _is_task_model = True
    _honoured_kwargs = frozenset({"num_items_in_batch"})  # Trainer's loss normalisation

    def __init__(self, config: SwinConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.swin = SwinModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels) if config.num_labels > 0 else nn.Identity()
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        *,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> SwinImageClassifierOutput:
        r"""
        Args:
            labels: (batch,) class indices, (batch, num_labels) multi-hot floats, or (batch,) regression targets.
            kwargs: ``num_items_in_batch`` (from Trainer) normalises the loss over gradient accumulation; any
                other key is refused.

        Returns:
            loss (when labels are given), logits (batch, num_labels), hidden_states, attentions,
            reshaped_hidden_states, token_attentions (as :class:`SwinModel`).
        """
        loss_kwargs = self.take_kwargs(kwargs)
        outputs = self.swin(
            pixel_values,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.classifier(outputs.pooler_output)  # (B, num_labels)
        loss = None
        if labels is not None:
            loss = self.classification_loss(labels, logits, **loss_kwargs)
        return SwinImageClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            reshaped_hidden_states=outputs.reshaped_hidden_states,
            token_attentions=outputs.token_attentions,
        )


class SwinBackbone(BackboneMixin, SwinPreTrainedModel):
    """Swin as a dense-prediction backbone on transformers' backbone API: the feature maps (B, C_i, H_i, W_i) of
    ``config.out_features`` (``stem`` at stride 4 and ``stage1``..``stage4`` at strides 4, 8, 16, 32 before their
    patch merging), each through its own LayerNorm. As the original detection code (and transformers'
    backbone), every block keeps its window and shift at every input size."""

    # A classifier's or a bare model's final norm, which the backbone has no use for (as transformers' backbone).
    _keys_to_ignore_on_load_unexpected = [r"(swin\.)?layernorm\..*"]

    def __init__(self, config: SwinConfig):
        super().__init__(config)
        self.num_features = [config.embed_dim] + [config.stage_width(i) for i in range(len(config.depths))]
        self.swin = SwinModel(config, add_pooling_layer=False, backbone=True)
        self.hidden_states_norms = nn.ModuleDict(
            {stage: nn.LayerNorm(channels) for stage, channels in zip(self.out_features, self.channels)}
        )
        self.post_init()

    def stage_modules(self) -> list[nn.Module]:
        """The stem (patch embedding) and each stage, in the order of ``stage_names``: what a detector freezes
        (``frozen_backbone_stages``)."""
        return [self.swin.embeddings, *self.swin.encoder.layers]

    @property
    def strides(self) -> list[int]:
        """The stride in pixels of each of ``out_features``."""
        patch = to_pair(self.config.patch_size)[0]
        return [patch * 2 ** max(self.config.stage_names.index(name) - 1, 0) for name in self.out_features]

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        *,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BackboneOutput:
        r"""
        Returns:
            feature_maps (one (batch, C_i, H_i, W_i) tensor per out_feature), hidden_states (every stage's map
            before merging, the stem first, when asked), attentions (one per stage, in transformers' layout: per
            window with the ``shifted_window`` core; the token-order maps are the bare model's).
        """
        self.take_kwargs(kwargs)
        output_attentions, output_hidden_states = self._resolve_outputs(output_attentions, output_hidden_states)
        hidden_states, grid = self.swin.embeddings(self._pixels(pixel_values))
        encoded = self.swin.encoder(hidden_states, grid, output_attentions, output_stage_features=True)
        feature_maps = []
        for stage, features in zip(self.stage_names, encoded.stage_features):
            if stage in self.out_features:
                normed = self.hidden_states_norms[stage](features.permute(0, 2, 3, 1))  # (B, h, w, C)
                feature_maps.append(normed.permute(0, 3, 1, 2).contiguous())
        return BackboneOutput(
            feature_maps=tuple(feature_maps),
            hidden_states=encoded.stage_features if output_hidden_states else None,
            attentions=encoded.attentions,
        )
