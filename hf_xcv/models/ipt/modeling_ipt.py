"""IPT (Chen et al. 2021): one transformer body shared by image-restoration tasks, a head and a tail per task.

Reads top to bottom: MeanShift -> ResBlock -> Head -> EncoderLayer -> DecoderLayer -> Body -> Tail -> tiling ->
Model -> ForImageRestoration.

Values are in [0, rgb_range] (255, as the official code and :class:`IPTImageProcessor`). A task's head maps the image
to ``n_feats`` channels; the body cuts that map into ``patch_size`` x ``patch_size`` patches (its tokens: the flattened
patches plus a linear embedding of them, plus learned positions), runs a pre-norm encoder and a decoder whose queries
and keys carry the task's learned embedding (``q = k = x + query_pos`` in one call of hf_xcv's attention layer),
adds an MLP of the tokens and folds them back; the body's output plus the head's is the task's tail's input
(sub-pixel upsampling, then RGB). The encoder's self-attention goes through the attention registry
(``config.attention_type``).

The body takes ``image_size`` x ``image_size`` maps only (its positions and task queries are learned per token), so
a larger image is processed in overlapping tiles, whole network per tile as the official ``forward_chop``, and the
tiles' outputs blended with weights that fall linearly across the overlap (:func:`tiled`); any batch size, any
device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple

from ...attention import MultiHeadAttention
from ...layers import check_pixel_tensor
from ...layers.mlp import Mlp
from ...losses.contrastive import supervised_contrastive_loss
from ...losses.reconstruction import reconstruction_loss
from ...modeling_utils import XcvPreTrainedModel
from .configuration_ipt import IPT_ATTENTION_REQUESTS, IPTConfig


@dataclass
class IPTModelOutput(ModelOutput):
    """Outputs of :class:`IPTModel`.

    Args:
        last_hidden_state: (B, n_feats, H, W) the body's output plus the head's features (the tail's input).
        patch_features: (B, num_patches, hidden_size) the body's per-patch output before it is folded back (for the
            contrastive loss); only for inputs of one tile and when asked.
        encoder_hidden_states / decoder_hidden_states: the encoder's and the decoder's token states
            (B, num_patches, hidden_size), each stack's input first; one tile only.
        encoder_attentions / decoder_attentions / cross_attentions: attention probabilities
            (B, heads, num_patches, num_patches) of the encoder's and the decoder's self-attentions and of the
            decoder's cross-attentions; one tile only.
    """

    last_hidden_state: torch.Tensor | None = None
    patch_features: torch.Tensor | None = None
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None
    decoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class ImageRestorationOutput(ModelOutput):
    """Outputs of :class:`IPTForImageRestoration`.

    Args:
        loss: the L1 loss to ``labels`` (plus the weighted contrastive loss when the config asks for it).
        reconstruction: (B, 3, s*H, s*W) the restored images in [0, rgb_range] (not clamped), s the task's scale.
        patch_features, encoder_hidden_states, ...: as :class:`IPTModelOutput`.
    """

    loss: torch.Tensor | None = None
    reconstruction: torch.Tensor | None = None
    patch_features: torch.Tensor | None = None
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None
    decoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None


STATE_FIELDS = ("encoder_hidden_states", "decoder_hidden_states")
ATTENTION_FIELDS = ("encoder_attentions", "decoder_attentions", "cross_attentions")


class IPTMeanShift(nn.Module):
    """Adds ``sign * rgb_range * image_mean`` per channel (the official MeanShift with std 1: a frozen 1x1
    convolution with an identity kernel), kept as a non-persistent constant."""

    def __init__(self, config: IPTConfig, sign: float):
        super().__init__()
        self.sign = sign
        self.register_buffer("shift", torch.zeros(1, config.num_channels, 1, 1), persistent=False)
        self.reset(config)

    def reset(self, config: IPTConfig) -> None:
        values = torch.tensor(config.image_mean, dtype=torch.float32) * float(config.rgb_range) * self.sign
        with torch.no_grad():
            self.shift.copy_(values.view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.shift.to(x.dtype)


def conv(in_channels: int, out_channels: int, kernel_size: int) -> nn.Conv2d:
    """A same-size convolution with bias (the official ``default_conv``)."""
    return nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)


class IPTResBlock(nn.Module):
    """``x + conv2(relu(conv1(x)))``, no normalisation (EDSR's block, 5x5 in IPT's heads)."""

    def __init__(self, n_feats: int, kernel_size: int):
        super().__init__()
        self.conv1 = conv(n_feats, n_feats, kernel_size)
        self.conv2 = conv(n_feats, n_feats, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.relu(self.conv1(x)))


class IPTHead(nn.Module):
    """A task's head: 3x3 convolution to ``n_feats`` channels and ``num_head_blocks`` residual blocks."""

    def __init__(self, config: IPTConfig):
        super().__init__()
        self.conv = conv(config.num_channels, config.n_feats, 3)
        self.blocks = nn.ModuleList(
            IPTResBlock(config.n_feats, config.head_kernel_size) for _ in range(config.num_head_blocks)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        for block in self.blocks:
            x = block(x)
        return x


class IPTLayer(GradientCheckpointingLayer):
    """What encoder and decoder layers share: pre-norm residual branches and the feed-forward block (Linear -> ReLU
    -> dropout -> Linear), with dropout on each branch's output."""

    def __init__(self, config: IPTConfig):
        super().__init__()
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.mlp = Mlp(config.hidden_size, config.intermediate_size, act="relu", dropout=config.hidden_dropout,
                       out_dropout=0.0)  # fmt: skip
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(self.mlp(self.final_layer_norm(x)))


def attention(config: IPTConfig, layer_idx: int, registry_core: bool = False) -> MultiHeadAttention:
    """An attention layer without biases (the official ``nn.MultiheadAttention(bias=False)``; an output bias if the
    config asks for one); the encoder's
    self-attention uses the config's registry core, the decoder's attend fully."""
    return MultiHeadAttention(
        config.hidden_size,
        config.num_attention_heads,
        qkv_bias=False,
        out_bias=config.attention_output_bias,
        attention_type=config.attention_type if registry_core else "full",
        attention_kwargs=config.attention_kwargs if registry_core else None,
        dropout=config.attention_dropout,
        config=config,
        layer_idx=layer_idx,
    )


class IPTEncoderLayer(IPTLayer):
    def __init__(self, config: IPTConfig, layer_idx: int):
        super().__init__(config)
        self.self_attn = attention(config, layer_idx, registry_core=True)
        self.self_attn_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(
        self, hidden_states: torch.Tensor, grid: tuple[int, int], output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x + attn(norm(x))`` (no positions inside: they are in the encoder's input), then the feed-forward."""
        attended, weights, _ = self.self_attn(
            self.self_attn_layer_norm(hidden_states), grid=grid, output_attentions=output_attentions
        )
        hidden_states = hidden_states + self.dropout(attended)
        return self.feed_forward(hidden_states), weights


class IPTDecoderLayer(IPTLayer):
    def __init__(self, config: IPTConfig, layer_idx: int):
        super().__init__(config)
        self.self_attn = attention(config, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.encoder_attn = attention(config, layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        memory: torch.Tensor,
        task_query: torch.Tensor,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Self-attention ``q = k = norm(x) + query``, ``v = norm(x)``; cross-attention ``q = norm(x) + query``,
        ``k = v = memory``; then the feed-forward block; each a pre-norm residual branch."""
        normed = self.self_attn_layer_norm(hidden_states)
        attended, self_weights, _ = self.self_attn(
            normed,
            output_attentions=output_attentions,
            query_position_embeddings=task_query,
            key_position_embeddings=task_query,
        )
        hidden_states = hidden_states + self.dropout(attended)
        attended, cross_weights, _ = self.encoder_attn(
            self.encoder_attn_layer_norm(hidden_states),
            memory,
            output_attentions=output_attentions,
            query_position_embeddings=task_query,
        )
        hidden_states = hidden_states + self.dropout(attended)
        return self.feed_forward(hidden_states), self_weights, cross_weights


@dataclass
class BodyOutput:
    features: torch.Tensor  # (B, n_feats, S, S) folded back
    tokens: torch.Tensor  # (B, N, C) before the fold
    states: dict[str, tuple[torch.Tensor, ...]]  # by IPTModelOutput field
    attentions: dict[str, tuple[torch.Tensor | None, ...]]


class IPTBody(nn.Module):
    """The shared transformer: patches -> embedding (+ learned positions) -> encoder -> decoder with the task's query
    embedding -> MLP -> fold."""

    def __init__(self, config: IPTConfig):
        super().__init__()
        self.config = config
        hidden, patches = config.hidden_size, config.num_patches
        self.linear_encoding = nn.Linear(hidden, hidden)
        self.position_embeddings = nn.Embedding(patches, hidden)
        # a learned query map per task, by name as the heads and tails (a checkpoint's tasks load by name, any order)
        self.query_embeddings = nn.ParameterDict(
            {name: nn.Parameter(torch.empty(patches, hidden)) for name in config.tasks}
        )
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.encoder = nn.ModuleList(IPTEncoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.decoder = nn.ModuleList(IPTDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.mlp_head = Mlp(hidden, config.intermediate_size, act="relu", dropout=config.hidden_dropout,
                            out_dropout=config.hidden_dropout)  # fmt: skip

    def forward(self, features: torch.Tensor, task: str, output_attentions: bool = False) -> BodyOutput:
        size, patch = self.config.image_size, self.config.patch_size
        side = size // patch
        tokens = F.unfold(features, patch, stride=patch).transpose(1, 2)  # (B, N, n_feats * p * p)
        tokens = self.dropout(self.linear_encoding(tokens)) + tokens
        hidden = tokens + self.position_embeddings.weight.unsqueeze(0)  # (B, N, C): positions in the stream
        query = self.query_embeddings[task].unsqueeze(0)  # (1, N, C)
        states: dict[str, list] = {name: [] for name in STATE_FIELDS}
        maps: dict[str, list] = {name: [] for name in ATTENTION_FIELDS}
        states["encoder_hidden_states"].append(hidden)
        for layer in self.encoder:
            hidden, weights = layer(hidden, (side, side), output_attentions)
            states["encoder_hidden_states"].append(hidden)
            maps["encoder_attentions"].append(weights)
        memory = hidden
        states["decoder_hidden_states"].append(hidden)
        for layer in self.decoder:  # the decoder's input is the encoder's output too (the official decoder(x, x))
            hidden, self_weights, cross_weights = layer(hidden, memory, query, output_attentions)
            states["decoder_hidden_states"].append(hidden)
            maps["decoder_attentions"].append(self_weights)
            maps["cross_attentions"].append(cross_weights)
        hidden = self.mlp_head(hidden) + hidden  # (B, N, C)
        folded = F.fold(hidden.transpose(1, 2), size, patch, stride=patch)  # (B, n_feats, S, S)
        as_tuples = lambda d: {key: tuple(value) for key, value in d.items()}  # noqa: E731
        return BodyOutput(folded, hidden, as_tuples(states), as_tuples(maps))


class IPTTail(nn.Module):
    """A task's tail: sub-pixel upsampling (a convolution to 4x the channels and a pixel shuffle per factor 2, or
    one to 9x and a shuffle by 3; nothing for scale 1), then a 3x3 convolution to RGB."""

    def __init__(self, config: IPTConfig, scale: int):
        super().__init__()
        n = config.n_feats
        factors = [3] if scale == 3 else [2] * int(math.log2(scale))
        self.factors = factors
        self.upsample = nn.ModuleList(conv(n, f * f * n, 3) for f in factors)
        self.conv = conv(n, config.num_channels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for factor, layer in zip(self.factors, self.upsample):
            x = F.pixel_shuffle(layer(x), factor)
        return self.conv(x)


# ----------------------------------------------------------------------------------------------------------
# Tiled inference


def tile_starts(length: int, tile: int, overlap: int) -> list[int]:
    """Starts of the tiles that cover ``length`` pixels: every ``tile - overlap`` pixels, the last one flush with the
    end (so it may overlap its neighbour by more)."""
    if length < tile:
        raise ValueError(f"a side of {length} pixels is smaller than one tile ({tile})")
    starts = list(range(0, length - tile + 1, tile - overlap))
    return starts if starts[-1] == length - tile else [*starts, length - tile]


def blend_ramp(size: int, ramp: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(size,) weights rising linearly over ``ramp`` pixels from each end (``(i + 0.5) / ramp``) and 1 between."""
    position = torch.arange(size, device=device).to(dtype)  # exact integers, whatever the dtype
    edge = torch.minimum(position, size - 1 - position) + 0.5
    return (edge / max(ramp, 1)).clamp(max=1.0)


def tiled(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, tile: int, overlap: int, scale: int, batch: int
) -> torch.Tensor:
    """``fn`` (tile-sized (n, C, tile, tile) -> (n, C', s*tile, s*tile)) over an image of any size (B, C, H, W),
    H, W >= tile: overlapping tiles (``overlap`` input pixels, starts from :func:`tile_starts`), ``batch`` tiles
    per call, each call's outputs blended into the result at once with weights that rise linearly over the overlap
    from each tile's edges (normalised by their sum, so an image of one tile gives ``fn``'s output exactly). The sums
    are float32 at least (half-precision outputs are blended in float32 and cast back). Memory: the network's on
    ``batch`` tiles, plus the input and the output images."""
    height, width = x.shape[-2:]
    boxes = [(top, left) for top in tile_starts(height, tile, overlap) for left in tile_starts(width, tile, overlap)]
    if len(boxes) == 1:
        return torch.cat([fn(x[i : i + batch]) for i in range(0, x.shape[0], batch)])
    jobs = [(image, top, left) for image in range(x.shape[0]) for top, left in boxes]  # image-major
    out_tile = scale * tile
    total = norm = weight = None
    for first in range(0, len(jobs), batch):
        chunk = jobs[first : first + batch]
        outputs = fn(torch.stack([x[image, :, top : top + tile, left : left + tile] for image, top, left in chunk]))
        if total is None:  # (B, C', s*H, s*W) on the outputs' device, float32 at least
            accumulate = torch.promote_types(outputs.dtype, torch.float32)
            total = outputs.new_zeros(x.shape[0], outputs.shape[1], scale * height, scale * width, dtype=accumulate)
            norm = outputs.new_zeros(1, 1, scale * height, scale * width, dtype=accumulate)
            ramp = blend_ramp(out_tile, scale * overlap, accumulate, outputs.device)
            weight = ramp[:, None] * ramp[None, :]  # (s*tile, s*tile)
        for output, (image, top, left) in zip(outputs, chunk):
            rows, cols = slice(scale * top, scale * top + out_tile), slice(scale * left, scale * left + out_tile)
            total[image, :, rows, cols] += output * weight
            if image == 0:
                norm[0, :, rows, cols] += weight
    return (total / norm).to(outputs.dtype)


_ENSEMBLE = [(flip, turns) for flip in (False, True) for turns in range(4)]  # the 8 symmetries of the square


def ensemble_x8(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The mean of ``fn`` over the 8 flips and quarter turns of ``x``, each output turned back (x8 self-ensemble)."""
    total = None
    for flip, turns in _ENSEMBLE:
        view = torch.rot90(x.flip(-1) if flip else x, turns, (-2, -1))
        out = torch.rot90(fn(view), -turns, (-2, -1))
        out = out.flip(-1) if flip else out
        total = out if total is None else total + out
    return total / len(_ENSEMBLE)


# ----------------------------------------------------------------------------------------------------------


class IPTPreTrainedModel(XcvPreTrainedModel):
    config_class = IPTConfig
    config: IPTConfig
    base_model_prefix = "ipt"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["IPTEncoderLayer", "IPTDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _task_head_modules = ("tails",)
    attention_requests = IPT_ATTENTION_REQUESTS
    attention_role = "IPT's encoder"

    def _initialize_weights(self, module: nn.Module, is_custom_code: bool = False) -> None:
        # transformers skips, for code outside its library, modules without parameters of their own (the mean
        # shifts' constants); every init here goes through transformers.initialization, which leaves loaded tensors
        super()._initialize_weights(module, is_custom_code=False)

    def _init_weights(self, module: nn.Module) -> None:
        """The official PyTorch code's: PyTorch's defaults (convolutions and linear layers Kaiming-uniform with
        a = sqrt(5) and a uniform bias, embeddings N(0, 1), LayerNorms 1 / 0), except the decoder's attention
        projections, Xavier-uniform over the fused (3C, C) input projection as ``nn.MultiheadAttention`` does."""
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
            if module.bias is not None:
                fan_in = module.weight[0].numel()
                init.uniform_(module.bias, -1.0 / math.sqrt(fan_in), 1.0 / math.sqrt(fan_in))
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, 0.0, 1.0)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, IPTMeanShift):
            module.reset(self.config)
        elif isinstance(module, IPTBody):
            for query in module.query_embeddings.values():  # N(0, 1) as the official nn.Embedding
                init.normal_(query, 0.0, 1.0)
        elif isinstance(module, IPTDecoderLayer):
            width = self.config.hidden_size
            bound = math.sqrt(6.0 / (width + 3 * width))  # Xavier-uniform of the fused (3C, C) projection
            for attn in (module.self_attn, module.encoder_attn):
                for projection in (attn.q_proj, attn.k_proj, attn.v_proj):
                    init.uniform_(projection.weight, -bound, bound)

    def check_pixels(self, pixel_values: torch.Tensor | None) -> torch.Tensor:
        """``pixel_values`` checked (3 channels, float, at least one tile) and cast to the weights' dtype."""
        if pixel_values is not None and isinstance(pixel_values, torch.Tensor):
            check_pixel_tensor(pixel_values, self.config.num_channels)
            if not pixel_values.is_floating_point():
                raise ValueError(
                    f"pixel_values are {pixel_values.dtype}: IPT takes float images in [0, rgb_range="
                    f"{self.config.rgb_range}] (IPTImageProcessor makes them)"
                )
            height, width = pixel_values.shape[-2:]
            size = self.config.image_size
            if height < size or width < size:
                raise ValueError(
                    f"the image ({height}x{width}) is smaller than one tile ({size}x{size}): IPT's body takes "
                    f"{size}x{size} inputs (learned positions per token); pad the image to at least that size"
                )
        return self.checked_pixels(pixel_values)

    def one_tile(self, pixel_values: torch.Tensor, asked: dict[str, bool]) -> bool:
        """Whether the input is a single tile; ValueError when per-tile outputs are asked of a larger image."""
        size = self.config.image_size
        single = tuple(pixel_values.shape[-2:]) == (size, size)
        wanted = sorted(name for name, value in asked.items() if value)
        if wanted and not single:
            raise ValueError(
                f"{wanted} are per-tile outputs: they need an input of one tile ({size}x{size}), got "
                f"{tuple(pixel_values.shape[-2:])}"
            )
        return single


class IPTModel(IPTPreTrainedModel):
    """The mean shift, the tasks' heads and the shared body, up to the tail's input: the body's output plus the
    head's features (B, n_feats, H, W); images larger than a tile are processed in blended tiles."""

    def __init__(self, config: IPTConfig):
        super().__init__(config)
        self.sub_mean = IPTMeanShift(config, -1.0)
        self.heads = nn.ModuleDict({name: IPTHead(config) for name in config.tasks})
        self.body = IPTBody(config)
        self.post_init()

    def features(self, pixel_values: torch.Tensor, task: str, output_attentions: bool = False):
        """(head + body features, the body's output) of tile-sized ``pixel_values``."""
        head = self.heads[task](self.sub_mean(pixel_values))
        body = self.body(head, task, output_attentions)
        return body.features + head, body

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        task: str | None = None,
        *,
        output_patch_features: bool = False,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> IPTModelOutput:
        r"""
        Args:
            pixel_values: (B, 3, H, W) images in [0, rgb_range], H, W >= image_size.
            task: one of ``config.tasks`` (may be left out when there is only one).
            output_patch_features: return the body's per-patch output (one-tile inputs).

        Returns:
            :class:`IPTModelOutput`.
        """
        self.take_kwargs(kwargs)
        output_attentions, output_hidden_states = self._resolve_outputs(output_attentions, output_hidden_states)
        task = self.config.tasks[self.config.task_index(task)]
        pixel_values = self.check_pixels(pixel_values)
        asked = {"output_patch_features": output_patch_features, "output_attentions": output_attentions,
                 "output_hidden_states": output_hidden_states}  # fmt: skip
        if not self.one_tile(pixel_values, asked):
            size, overlap = self.config.image_size, self.config.tile_overlap
            fn = lambda tiles: self.features(tiles, task)[0]  # noqa: E731
            return IPTModelOutput(last_hidden_state=tiled(fn, pixel_values, size, overlap, 1,
                                                          self.config.tile_batch_size))  # fmt: skip
        features, body = self.features(pixel_values, task, output_attentions)
        return IPTModelOutput(
            last_hidden_state=features,
            patch_features=body.tokens if output_patch_features else None,
            **(body.states if output_hidden_states else {}),
            **(body.attentions if output_attentions else {}),
        )


class IPTForImageRestoration(IPTPreTrainedModel):
    """IPT with its tails: restores images for one of its tasks (super-resolution, denoising, deraining, ...), any
    size (blended tiles beyond one), optionally with the x8 self-ensemble. ``labels`` (the clean images, in
    [0, rgb_range], ``scale`` times the input's size) give the L1 loss, plus ``config.contrastive_loss_weight``
    times the supervised contrastive loss on the body's per-patch features (one-tile inputs)."""

    _is_task_model = True
    _honoured_kwargs = frozenset({"num_items_in_batch"})  # Trainer's loss normalisation

    def __init__(self, config: IPTConfig):
        super().__init__(config)
        self.ipt = IPTModel(config)
        self.tails = nn.ModuleDict({t.name: IPTTail(config, t.scale) for t in config.restoration_tasks})
        self.add_mean = IPTMeanShift(config, 1.0)
        self.post_init()

    def scale(self, task: str | None = None) -> int:
        """The output scale of ``task``."""
        return self.config.restoration_tasks[self.config.task_index(task)].scale

    def restore_tiles(self, tiles: torch.Tensor, task: str) -> torch.Tensor:
        """Tile-sized inputs -> their restorations (no tiling, no checks)."""
        return self.add_mean(self.tails[task](self.ipt.features(tiles, task)[0]))

    def restore(self, pixel_values: torch.Tensor, task: str) -> torch.Tensor:
        """Inputs of any size >= one tile -> their restorations, in blended tiles beyond one."""
        size = self.config.image_size
        if tuple(pixel_values.shape[-2:]) == (size, size):
            return self.restore_tiles(pixel_values, task)
        fn = lambda tiles: self.restore_tiles(tiles, task)  # noqa: E731
        return tiled(fn, pixel_values, size, self.config.tile_overlap, self.scale(task), self.config.tile_batch_size)

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        task: str | None = None,
        labels: torch.Tensor | None = None,
        *,
        self_ensemble: bool = False,
        output_patch_features: bool = False,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> ImageRestorationOutput:
        r"""
        Args:
            pixel_values: (B, 3, H, W) images in [0, rgb_range], H, W >= image_size.
            task: one of ``config.tasks`` (may be left out when there is only one).
            labels: (B, 3, s*H, s*W) the clean images in [0, rgb_range].
            self_ensemble: average the outputs over the 8 flips / quarter turns of the input (the official
                ``forward_x8``; 8 times the compute).
            output_patch_features: return the body's per-patch output (one-tile inputs).
            kwargs: ``num_items_in_batch`` (from Trainer) normalises the loss over gradient accumulation.

        Returns:
            :class:`ImageRestorationOutput`: ``reconstruction`` (B, 3, s*H, s*W).
        """
        loss_kwargs = self.take_kwargs(kwargs)
        output_attentions, output_hidden_states = self._resolve_outputs(output_attentions, output_hidden_states)
        task = self.config.tasks[self.config.task_index(task)]
        pixel_values = self.check_pixels(pixel_values)
        want_features = output_patch_features or (labels is not None and self.config.contrastive_loss_weight > 0)
        asked = self.per_tile_requests(output_patch_features, want_features, output_attentions, output_hidden_states)
        single = self.one_tile(pixel_values, asked)
        if self_ensemble and any(asked.values()):
            raise ValueError(f"self_ensemble averages 8 passes: it returns no per-pass outputs ({asked})")
        outputs = IPTModelOutput()
        if self_ensemble:
            reconstruction = ensemble_x8(lambda x: self.restore(x, task), pixel_values)
        elif single:
            outputs = self.ipt(
                pixel_values,
                task,
                output_patch_features=want_features,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
            reconstruction = self.add_mean(self.tails[task](outputs.last_hidden_state))
        else:
            reconstruction = self.restore(pixel_values, task)
        loss = None
        if labels is not None:
            loss = self.loss(reconstruction, labels, outputs.patch_features, loss_kwargs)
        return ImageRestorationOutput(
            loss=loss,
            reconstruction=reconstruction,
            patch_features=outputs.patch_features if output_patch_features else None,
            **{name: getattr(outputs, name) for name in STATE_FIELDS + ATTENTION_FIELDS},
        )

    @staticmethod
    def per_tile_requests(
        asked_features: bool, want_features: bool, output_attentions: bool, output_hidden_states: bool
    ) -> dict[str, bool]:
        """The outputs of a call that exist per tile only, by the name an error would give them (features wanted
        for the contrastive loss but not asked for are named after it)."""
        features = "output_patch_features" if asked_features or not want_features else (
            "output_patch_features (the contrastive loss: contrastive_loss_weight > 0)")  # fmt: skip
        return {features: want_features, "output_attentions": output_attentions,
                "output_hidden_states": output_hidden_states}  # fmt: skip

    def loss(
        self, reconstruction: torch.Tensor, labels: torch.Tensor, features: torch.Tensor | None, kwargs: dict
    ) -> torch.Tensor:
        """L1 to ``labels`` (+ the weighted contrastive loss on ``features``)."""
        if not labels.is_floating_point():
            raise ValueError(f"labels are {labels.dtype}: the clean images as floats in [0, rgb_range]")
        if labels.shape != reconstruction.shape:
            raise ValueError(
                f"labels have shape {tuple(labels.shape)}; the restorations have {tuple(reconstruction.shape)} (the "
                "task's scale times the input's size)"
            )
        loss = reconstruction_loss(reconstruction, labels.to(reconstruction.dtype), **kwargs)
        if features is not None and self.config.contrastive_loss_weight > 0:
            weight, temperature = self.config.contrastive_loss_weight, self.config.contrastive_temperature
            loss = loss + weight * supervised_contrastive_loss(features, temperature=temperature)
        return loss
