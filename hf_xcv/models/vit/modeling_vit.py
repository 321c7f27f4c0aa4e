"""Vision Transformer (Dosovitskiy et al. 2020): patch embedding, [CLS], learned positions, pre-LN encoder.

Reads top to bottom: Embeddings -> Layer -> Encoder -> Pooler -> Model -> ForImageClassification.
The attention layer and the MLP are hf_xcv's shared blocks; the attention core comes from the
registry (``config.attention_type``), with ``full`` running on transformers' attention interface.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPooling, ImageClassifierOutput
from transformers.utils.generic import can_return_tuple

from ...attention import MultiHeadAttention
from ...layers import DropPath, Mlp, PatchEmbed, resample_patch_pos_embed, to_pair
from ...modeling_utils import XcvPreTrainedModel
from .configuration_vit import VIT_ATTENTION_REQUESTS, ViTConfig


class ViTEmbeddings(nn.Module):
    """Patches + [CLS] + learned positions (resampled bicubically for other resolutions on request)."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        dim = config.hidden_size
        self.image_size = to_pair(config.image_size)
        self.grid = config.grid_size
        self.num_prefix_tokens = 1 if config.use_cls_token else 0
        self.patch_embeddings = PatchEmbed(config.patch_size, config.num_channels, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if config.use_cls_token else None
        num_positions = self.num_prefix_tokens + self.grid[0] * self.grid[1]
        self.position_embeddings = nn.Parameter(torch.zeros(1, num_positions, dim))
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False
    ) -> tuple[torch.Tensor, tuple[int, int]]:
        """(B, C, H, W) -> tokens (B, prefix + H/p * W/p, D) and the patch grid (H/p, W/p)."""
        self.patch_embeddings.check_pixels(pixel_values)
        size = tuple(pixel_values.shape[-2:])
        if size != self.image_size and not interpolate_pos_encoding:
            raise ValueError(
                f"image size {size[0]}x{size[1]} differs from the model's image_size "
                f"{self.image_size[0]}x{self.image_size[1]}; resize the images or pass interpolate_pos_encoding=True"
            )
        tokens, grid = self.patch_embeddings(pixel_values)  # (B, N, D)
        if self.cls_token is not None:
            tokens = torch.cat([self.cls_token.expand(tokens.shape[0], -1, -1), tokens], dim=1)  # (B, 1 + N, D)
        positions = resample_patch_pos_embed(self.position_embeddings, self.grid, grid, self.num_prefix_tokens)
        return self.dropout(tokens + positions), grid


class ViTLayer(GradientCheckpointingLayer):
    """Pre-LN block: x + Attn(LN(x)), then x + MLP(LN(x)), with optional stochastic depth."""

    def __init__(self, config: ViTConfig, drop_path: float = 0.0):
        super().__init__()
        dim = config.hidden_size
        self.num_prefix_tokens = 1 if config.use_cls_token else 0  # [CLS]: global for global-token cores
        self.layernorm_before = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.attention = MultiHeadAttention(
            dim,
            config.num_attention_heads,
            qkv_bias=config.qkv_bias,
            attention_type=config.attention_type,
            attention_kwargs=config.attention_kwargs,
            dropout=config.attention_probs_dropout_prob,
            config=config,
        )
        self.layernorm_after = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.mlp = Mlp(dim, config.intermediate_size, act=config.hidden_act, dropout=config.hidden_dropout_prob)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.drop_path = DropPath(drop_path)

    def forward(
        self, hidden_states: torch.Tensor, grid: tuple[int, int], output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights, _ = self.attention(
            self.layernorm_before(hidden_states),
            grid=grid,
            output_attentions=output_attentions,
            prefix_tokens=self.num_prefix_tokens,
        )
        hidden_states = hidden_states + self.drop_path(self.dropout(attended))
        hidden_states = hidden_states + self.drop_path(self.mlp(self.layernorm_after(hidden_states)))
        return hidden_states, weights


class ViTEncoder(nn.Module):
    def __init__(self, config: ViTConfig):
        super().__init__()
        depth = config.num_hidden_layers
        rates = [config.drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]  # linear, 0 at the input
        self.layers = nn.ModuleList([ViTLayer(config, rate) for rate in rates])

    def forward(
        self,
        hidden_states: torch.Tensor,
        grid: tuple[int, int],
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BaseModelOutput:
        """``hidden_states`` collects the embeddings and each block's output (before the final norm)."""
        all_hidden = [hidden_states] if output_hidden_states else None
        all_weights = [] if output_attentions else None
        for layer in self.layers:
            hidden_states, weights = layer(hidden_states, grid, output_attentions)
            if output_hidden_states:
                all_hidden.append(hidden_states)
            if output_attentions:
                all_weights.append(weights)
        return BaseModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=tuple(all_hidden) if all_hidden is not None else None,
            attentions=tuple(all_weights) if all_weights is not None else None,
        )


class ViTPooler(nn.Module):
    """[CLS] token or mean of the patch tokens, then the optional pre-logits layer (Linear + act)."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.pooling = config.pooling
        self.num_prefix_tokens = 1 if config.use_cls_token else 0
        size = config.representation_size
        self.dense = nn.Linear(config.hidden_size, size) if size else None
        self.activation = ACT2FN[config.representation_act] if size else nn.Identity()

    def forward(self, sequence_output: torch.Tensor) -> torch.Tensor:
        if self.pooling == "cls":
            pooled = sequence_output[:, 0]  # (B, D)
        else:
            pooled = sequence_output[:, self.num_prefix_tokens :].mean(dim=1)  # (B, D)
        return self.activation(self.dense(pooled)) if self.dense is not None else pooled


class ViTPreTrainedModel(XcvPreTrainedModel):
    config_class = ViTConfig
    config: ViTConfig
    base_model_prefix = "vit"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["ViTEmbeddings", "ViTLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _task_head_modules = ("classifier",)
    attention_requests = VIT_ATTENTION_REQUESTS
    attention_role = "a ViT encoder"

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            init.trunc_normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, ViTEmbeddings):
            init.trunc_normal_(module.position_embeddings, mean=0.0, std=std)
            if module.cls_token is not None:
                init.trunc_normal_(module.cls_token, mean=0.0, std=std)


class ViTModel(ViTPreTrainedModel):
    """The bare encoder: ``last_hidden_state`` (after the final LayerNorm) and the pooled features."""

    def __init__(self, config: ViTConfig):
        super().__init__(config)
        self.embeddings = ViTEmbeddings(config)
        self.encoder = ViTEncoder(config)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.pooler = ViTPooler(config)
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
    ) -> BaseModelOutputWithPooling:
        r"""
        Args:
            pixel_values: (batch, num_channels, height, width) images, as the image processor makes them.
            interpolate_pos_encoding: resample the position embeddings for another resolution.

        Returns:
            last_hidden_state (batch, tokens, hidden_size), pooler_output (batch, representation_size or
            hidden_size), hidden_states (num_hidden_layers + 1 tensors), attentions (one
            (batch, heads, tokens, tokens) tensor per layer).
        """
        self.take_kwargs(kwargs)
        pixel_values = self.checked_pixels(pixel_values)
        output_attentions, output_hidden_states = self._resolve_outputs(output_attentions, output_hidden_states)
        hidden_states, grid = self.embeddings(pixel_values, bool(interpolate_pos_encoding))
        encoded = self.encoder(hidden_states, grid, output_attentions, output_hidden_states)
        sequence_output = self.layernorm(encoded.last_hidden_state)
        return BaseModelOutputWithPooling(
            last_hidden_state=sequence_output,
            pooler_output=self.pooler(sequence_output),
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
        )


class ViTForImageClassification(ViTPreTrainedModel):
    """ViT with a linear classifier on the pooled features.

    The loss follows ``config.problem_type`` as in transformers: cross-entropy for integer labels,
    binary cross-entropy for multi-hot float labels, MSE when ``num_labels == 1``.
    """

    _is_task_model = True
    _honoured_kwargs = frozenset({"num_items_in_batch"})  # Trainer's loss normalisation

    def __init__(self, config: ViTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.vit = ViTModel(config)
        features = config.representation_size or config.hidden_size
        self.classifier = nn.Linear(features, config.num_labels) if config.num_labels > 0 else nn.Identity()
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
    ) -> ImageClassifierOutput:
        r"""
        Args:
            labels: (batch,) class indices, (batch, num_labels) multi-hot floats, or (batch,) regression targets.
            kwargs: ``num_items_in_batch`` (from Trainer) normalises the loss over gradient accumulation; any
                other key is refused.

        Returns:
            loss (when labels are given), logits (batch, num_labels), hidden_states, attentions.
        """
        loss_kwargs = self.take_kwargs(kwargs)
        outputs = self.vit(
            pixel_values,
            interpolate_pos_encoding=interpolate_pos_encoding,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,  # whatever config.return_dict says; this forward decides its own form
        )
        logits = self.classifier(outputs.pooler_output)  # (B, num_labels)
        loss = None
        if labels is not None:
            loss = self.classification_loss(labels, logits, **loss_kwargs)
        return ImageClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
