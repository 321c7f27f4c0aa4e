"""TTSR (Yang et al. 2020): a texture transformer for reference-based x4 super-resolution.

Reads top to bottom: TextureExtractor (LTE) -> TextureTransformer (relevance, hard and soft attention) ->
ResBlock -> cross-scale feature integration (CSFI2, CSFI3) -> MainNetwork -> Model -> ForReferenceSuperResolution.

The four inputs are what the original's data pipeline makes (and :class:`TTSRImageProcessor` makes), all in the
original value range [-1, 1]: the low-resolution image (LR, h x w), LR bicubically upsampled x4 (LR↑, the
queries' image), the reference (Ref, a high-resolution image of similar content, sides multiples of 4) and the
reference bicubically down- and upsampled x4 (Ref↓↑, the keys' image: as blurred as LR↑, so that both are
compared at the same quality). Values are Ref's own textures at three scales.

The texture transfer is :mod:`hf_xcv.attention.operators.texture`: relevances in bounded-memory blocks, the hard
attention's copy as nine displaced gathers per level. ``config.attention_type`` replaces the hard attention by a
registry core's softmax-weighted transfer (an ablation; see :class:`TTSRConfig`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple

from ...attention import build_attention
from ...attention.operators.texture import (
    best_matches,
    fold_level,
    matched_relevance,
    patch_vectors,
    transfer_textures,
    unfold_level,
)
from ...layers import check_pixel_tensor
from ...layers.vgg import ImageNetNormalization, TTSRTextureExtractor, normalization_constants
from ...losses.reconstruction import reconstruction_loss
from ...modeling_utils import XcvPreTrainedModel
from ...processing.restoration import SCALE
from ...utils.checks import check_batch_not_empty
from .configuration_ttsr import TTSR_ATTENTION_REQUESTS, TTSRConfig

LEVEL_SCALES = (1, 2, 4)  # the texture levels' resolutions relative to the relevance's (relu3_1, relu2_1, relu1_1)
MIN_INPUT_SIDE = 3  # one 3x3 patch of the relevance embedding (at the input's resolution)


@dataclass
class TTSRModelOutput(ModelOutput):
    """``last_hidden_state`` (B, n_feats, 4h, 4w): the merged main-network features before the reconstruction
    convolutions; ``soft_attention`` (B, 1, h, w): S, each position's relevance to its best reference patch (a
    cosine in [-1, 1]); ``transferred_textures``: T per stage, (B, C3, h, w), (B, C2, 2h, 2w), (B, C1, 4h, 4w);
    ``hidden_states``: the shallow features and each stage's output at its new scale (x1, x2, x4);
    ``attentions``: the texture attention (B, 1, h * w, reference positions) per stage (one-hot rows for the hard
    attention; one map, computed once at the input's scale and used by all three stages)."""

    last_hidden_state: torch.Tensor | None = None
    soft_attention: torch.Tensor | None = None
    transferred_textures: tuple[torch.Tensor, ...] | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class ReferenceSuperResolutionOutput(ModelOutput):
    """``loss`` (when labels are given), ``reconstruction`` (B, 3, 4h, 4w) in [-1, 1], and the texture transfer
    and features as :class:`TTSRModelOutput`."""

    loss: torch.Tensor | None = None
    reconstruction: torch.Tensor | None = None
    soft_attention: torch.Tensor | None = None
    transferred_textures: tuple[torch.Tensor, ...] | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1)


def conv1x1(in_channels: int, out_channels: int) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=1)


def upsample(x: torch.Tensor, factor: int) -> torch.Tensor:
    """Bicubic x``factor``, as the original (``F.interpolate(..., scale_factor, mode="bicubic")``)."""
    return F.interpolate(x, scale_factor=factor, mode="bicubic")


class TTSRTextureTransformer(nn.Module):
    """Relevance embedding, hard attention and soft attention (or, with ``attention_type``, a registry core's
    weighted transfer): queries from LR↑'s relu3_1, keys from Ref↓↑'s, values Ref's three levels."""

    def __init__(self, config: TTSRConfig):
        super().__init__()
        self.chunk_size = config.relevance_chunk_size
        self.scaling = 1.0 / config.transfer_temperature
        self.core = None
        if config.attention_type is not None:
            heads, patch_dim = config.weighted_transfer_heads()
            self.core = build_attention(config.attention_type, heads, patch_dim, **config.attention_kwargs)

    def forward(
        self,
        query_features: torch.Tensor,
        key_features: torch.Tensor,
        values: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], torch.Tensor | None]:
        """
        Args:
            query_features: (B, C3, h, w) relu3_1 of LR↑; key_features: (B, C3, hr, wr) relu3_1 of Ref↓↑.
            values: Ref's relu1_1, relu2_1, relu3_1 ((B, C1, 4hr, 4wr), (B, C2, 2hr, 2wr), (B, C3, hr, wr)).

        Returns:
            S (B, 1, h, w), the textures (T3 (B, C3, h, w), T2 (B, C2, 2h, 2w), T1 (B, C1, 4h, 4w)) and, when asked,
            the attention (B, 1, h * w, hr * wr).
        """
        grid, reference_grid = tuple(query_features.shape[-2:]), tuple(key_features.shape[-2:])
        queries, keys = patch_vectors(query_features), patch_vectors(key_features)  # (B, L, C3 * 9)
        index = best_matches(queries, keys, self.chunk_size)  # (B, h * w)
        soft = matched_relevance(queries, keys, index).view(queries.shape[0], 1, *grid)  # S (B, 1, h, w)
        levels = dict(zip(LEVEL_SCALES, reversed(values)))  # scale -> Ref features at that scale
        if self.core is not None:
            return (soft, *self._weighted(queries, keys, levels, grid, output_attentions))
        textures = tuple(transfer_textures(levels[s], index, grid, reference_grid, s) for s in LEVEL_SCALES)
        weights = None
        if output_attentions:  # one-hot rows: the hard attention as a map (memory (h * w) x (hr * wr))
            weights = F.one_hot(index, keys.shape[1]).to(queries.dtype).unsqueeze(1)
        return soft, textures, weights

    def _weighted(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        levels: dict[int, torch.Tensor],
        grid: tuple[int, int],
        output_attentions: bool,
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        """The core's softmax(relevance / temperature)-weighted sum of Ref's unfolded patches, folded back."""
        patches = [unfold_level(levels[s], s) for s in LEVEL_SCALES]  # (B, C_s * 9 s^2, hr * wr) each
        widths = [p.shape[1] for p in patches]
        heads, dim = self.core.num_heads, queries.shape[-1]
        values = torch.cat(patches, dim=1).transpose(1, 2)  # (B, hr * wr, sum of widths)
        values = F.pad(values, (0, heads * dim - sum(widths)))  # to whole heads of the queries' width
        batch, num_keys = values.shape[:2]
        out = self.core(
            queries.unsqueeze(1).expand(-1, heads, -1, -1),  # (B, heads, h * w, C3 * 9): the same in every head
            keys.unsqueeze(1).expand(-1, heads, -1, -1),
            values.view(batch, num_keys, heads, dim).transpose(1, 2),  # (B, heads, hr * wr, C3 * 9)
            cross_attention=True,
            scaling=self.scaling,
            output_weights=output_attentions,
            module=self,
        )
        mixed = out.values.transpose(1, 2).reshape(batch, -1, heads * dim)[..., : sum(widths)]  # (B, h * w, widths)
        mixed = mixed.transpose(1, 2).split(widths, dim=1)
        return tuple(fold_level(m, grid, s) for m, s in zip(mixed, LEVEL_SCALES)), out.weights


class TTSRResBlock(GradientCheckpointingLayer):
    """conv3x3 -> ReLU -> conv3x3, scaled by ``res_scale``, plus the input (no normalisation, as EDSR's)."""

    def __init__(self, n_feats: int, res_scale: float):
        super().__init__()
        self.res_scale = res_scale
        self.conv1 = conv3x3(n_feats, n_feats)
        self.conv2 = conv3x3(n_feats, n_feats)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(F.relu(self.conv1(x))) * self.res_scale + x


def res_blocks(count: int, config: TTSRConfig) -> nn.ModuleList:
    return nn.ModuleList(TTSRResBlock(config.n_feats, config.res_scale) for _ in range(count))


def through(blocks: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    for block in blocks:
        x = block(x)
    return x


def run_blocks(blocks: nn.ModuleList, tail: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A stage's residual body: the blocks, the tail convolution, and the stage's own skip connection."""
    return x + tail(through(blocks, x))


class TTSRShallowFeatures(nn.Module):
    """SFE: conv3x3 + ReLU, residual blocks, conv3x3, plus a skip from after the first convolution."""

    def __init__(self, config: TTSRConfig):
        super().__init__()
        self.conv_head = conv3x3(config.num_channels, config.n_feats)
        self.blocks = res_blocks(config.res_blocks[0], config)
        self.conv_tail = conv3x3(config.n_feats, config.n_feats)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return run_blocks(self.blocks, self.conv_tail, F.relu(self.conv_head(pixel_values)))


class TTSRCrossScale2(nn.Module):
    """CSFI2: the x1 and x2 branches exchange features (bicubic x2 + 1x1 conv up, strided 3x3 conv down) and each
    merges the other's into its own with a 3x3 conv."""

    def __init__(self, n_feats: int):
        super().__init__()
        self.conv12 = conv1x1(n_feats, n_feats)
        self.conv21 = conv3x3(n_feats, n_feats, 2)
        self.conv_merge1 = conv3x3(n_feats * 2, n_feats)
        self.conv_merge2 = conv3x3(n_feats * 2, n_feats)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x12 = F.relu(self.conv12(upsample(x1, 2)))
        x21 = F.relu(self.conv21(x2))
        x1 = F.relu(self.conv_merge1(torch.cat((x1, x21), dim=1)))
        return x1, F.relu(self.conv_merge2(torch.cat((x2, x12), dim=1)))


class TTSRCrossScale3(nn.Module):
    """CSFI3: the x1, x2 and x4 branches exchange features (bicubic up + 1x1 conv; one or two strided 3x3 convs
    down) and each merges the other two into its own."""

    def __init__(self, n_feats: int):
        super().__init__()
        self.conv12, self.conv13 = conv1x1(n_feats, n_feats), conv1x1(n_feats, n_feats)
        self.conv21, self.conv23 = conv3x3(n_feats, n_feats, 2), conv1x1(n_feats, n_feats)
        self.conv31_1, self.conv31_2 = conv3x3(n_feats, n_feats, 2), conv3x3(n_feats, n_feats, 2)
        self.conv32 = conv3x3(n_feats, n_feats, 2)
        self.conv_merge1, self.conv_merge2, self.conv_merge3 = (conv3x3(n_feats * 3, n_feats) for _ in range(3))

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x12 = F.relu(self.conv12(upsample(x1, 2)))
        x13 = F.relu(self.conv13(upsample(x1, 4)))
        x21 = F.relu(self.conv21(x2))
        x23 = F.relu(self.conv23(upsample(x2, 2)))
        x31 = F.relu(self.conv31_2(F.relu(self.conv31_1(x3))))
        x32 = F.relu(self.conv32(x3))
        return (
            F.relu(self.conv_merge1(torch.cat((x1, x21, x31), dim=1))),
            F.relu(self.conv_merge2(torch.cat((x2, x12, x32), dim=1))),
            F.relu(self.conv_merge3(torch.cat((x3, x13, x23), dim=1))),
        )


class TTSRMergeTail(nn.Module):
    """The three branches upsampled to x4 (bicubic + 1x1 conv) and merged by a 3x3 conv: the base model's output;
    the reconstruction convolutions are the task head's."""

    def __init__(self, n_feats: int):
        super().__init__()
        self.conv13 = conv1x1(n_feats, n_feats)
        self.conv23 = conv1x1(n_feats, n_feats)
        self.conv_merge = conv3x3(n_feats * 3, n_feats)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor) -> torch.Tensor:
        x13 = F.relu(self.conv13(upsample(x1, 4)))
        x23 = F.relu(self.conv23(upsample(x2, 2)))
        return F.relu(self.conv_merge(torch.cat((x3, x13, x23), dim=1)))  # (B, n_feats, 4h, 4w)


class TTSRMainNetwork(nn.Module):
    """The main network: shallow features of LR, then three stages (x1, x2, x4), each fusing the transferred
    textures of its scale weighted by the soft attention (``x + conv(cat(x, T)) * S``), exchanging features across
    scales (CSFI) and refining every branch with residual blocks; sub-pixel convolutions go from one scale to the
    next."""

    def __init__(self, config: TTSRConfig):
        super().__init__()
        n, (c1, c2, c3), blocks = config.n_feats, config.texture_channels, config.res_blocks
        self.sfe = TTSRShallowFeatures(config)
        self.conv11_head, self.conv11_tail = conv3x3(c3 + n, n), conv3x3(n, n)
        self.blocks11 = res_blocks(blocks[1], config)
        self.conv12 = conv3x3(n, n * 4)  # sub-pixel x2
        self.conv22_head = conv3x3(c2 + n, n)
        self.ex12 = TTSRCrossScale2(n)
        self.blocks21, self.blocks22 = res_blocks(blocks[2], config), res_blocks(blocks[2], config)
        self.conv21_tail, self.conv22_tail = conv3x3(n, n), conv3x3(n, n)
        self.conv23 = conv3x3(n, n * 4)  # sub-pixel x2
        self.conv33_head = conv3x3(c1 + n, n)
        self.ex123 = TTSRCrossScale3(n)
        self.blocks31, self.blocks32, self.blocks33 = (res_blocks(blocks[3], config) for _ in range(3))
        self.conv31_tail, self.conv32_tail, self.conv33_tail = (conv3x3(n, n) for _ in range(3))
        self.merge_tail = TTSRMergeTail(n)

    @staticmethod
    def fuse(x: torch.Tensor, head: nn.Conv2d, texture: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        """The soft-attention fusion: ``x + head(cat(x, T)) * S`` (no activation on the head, as the original)."""
        return x + head(torch.cat((x, texture), dim=1)) * soft

    def forward(
        self, pixel_values: torch.Tensor, soft: torch.Tensor, textures: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """LR (B, 3, h, w), S (B, 1, h, w), T (x1, x2, x4) -> merged features (B, n_feats, 4h, 4w) and the hidden
        states (shallow features, then each stage's new-scale branch)."""
        x = self.sfe(pixel_values)  # (B, n, h, w)
        x11 = run_blocks(self.blocks11, self.conv11_tail, self.fuse(x, self.conv11_head, textures[0], soft))
        x22 = F.relu(F.pixel_shuffle(self.conv12(x11), 2))  # (B, n, 2h, 2w)
        x22 = self.fuse(x22, self.conv22_head, textures[1], upsample(soft, 2))
        tails = (self.conv21_tail, self.conv22_tail)
        x21, x22 = self._stage((x11, x22), self.ex12, (self.blocks21, self.blocks22), tails)
        x33 = F.relu(F.pixel_shuffle(self.conv23(x22), 2))  # (B, n, 4h, 4w)
        x33 = self.fuse(x33, self.conv33_head, textures[2], upsample(soft, 4))
        tails = (self.conv31_tail, self.conv32_tail, self.conv33_tail)
        x31, x32, x33 = self._stage((x21, x22, x33), self.ex123, (self.blocks31, self.blocks32, self.blocks33), tails)
        return self.merge_tail(x31, x32, x33), (x, x11, x22, x33)

    @staticmethod
    def _stage(
        branches: tuple[torch.Tensor, ...], exchange: nn.Module, blocks: tuple[nn.ModuleList, ...], tails: tuple
    ) -> tuple[torch.Tensor, ...]:
        """A multi-branch stage: exchange across scales, then each branch's residual body with a skip from the
        branch as it entered the stage."""
        mixed = exchange(*branches)
        return tuple(x + tail(through(body, y)) for x, y, body, tail in zip(branches, mixed, blocks, tails))


class TTSRPreTrainedModel(XcvPreTrainedModel):
    config_class = TTSRConfig
    config: TTSRConfig
    base_model_prefix = "ttsr"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["TTSRResBlock"]
    _supports_sdpa = True
    _supports_attention_backend = True
    _task_head_modules = ("head",)
    attention_requests = TTSR_ATTENTION_REQUESTS
    attention_role = "TTSR's texture transfer"

    def _initialize_weights(self, module: nn.Module, is_custom_code: bool = False) -> None:
        # transformers skips, for code outside its library, every module without parameters of its own (the
        # normalisation's constants); every init here goes through transformers.initialization, which leaves loaded
        # tensors alone.
        super()._initialize_weights(module, is_custom_code=False)

    def _init_weights(self, module: nn.Module) -> None:
        """The original's: PyTorch's default convolution initialisation (Kaiming-uniform, a = sqrt(5), and a uniform
        bias of bound 1 / sqrt(fan_in)) everywhere, the texture extractor included (VGG19 ImageNet weights load
        over it: :func:`hf_xcv.conversion.vgg.load_texture_extractor`)."""
        if isinstance(module, nn.Conv2d):
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
            if module.bias is not None:
                fan_in = module.weight.shape[1] * module.weight[0, 0].numel()
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                init.uniform_(module.bias, -bound, bound)
        elif isinstance(module, ImageNetNormalization):
            scale, shift = normalization_constants()
            init.copy_(module.scale, scale)
            init.copy_(module.shift, shift)

    def check_inputs(
        self,
        pixel_values: torch.Tensor | None,
        upsampled: torch.Tensor | None,
        reference: torch.Tensor | None,
        degraded_reference: torch.Tensor | None,
    ) -> None:
        """ValueError naming the input when one is missing or of the wrong shape (shapes only: this traces)."""
        inputs = {
            "pixel_values": pixel_values,
            "upsampled_pixel_values": upsampled,
            "reference_pixel_values": reference,
            "degraded_reference_pixel_values": degraded_reference,
        }
        missing = [name for name, value in inputs.items() if value is None]
        if missing:
            raise ValueError(f"{missing} missing: TTSR takes all four inputs, as TTSRImageProcessor makes them")
        for name, value in inputs.items():
            try:
                check_pixel_tensor(value, self.config.num_channels)
            except ValueError as err:
                raise ValueError(str(err).replace("pixel_values", name, 1)) from None
            check_batch_not_empty(name, value)
            if not value.is_floating_point():
                raise ValueError(
                    f"{name} are {value.dtype}: TTSR takes float images in [-1, 1] (TTSRImageProcessor makes them)"
                )
        (batch, _, height, width), (ref_h, ref_w) = pixel_values.shape, reference.shape[-2:]
        if any(value.shape[0] != batch for value in inputs.values()):
            raise ValueError(f"the inputs hold different batch sizes: {[v.shape[0] for v in inputs.values()]}")
        if min(height, width) < MIN_INPUT_SIDE or min(ref_h, ref_w) < SCALE * MIN_INPUT_SIDE:
            raise ValueError(
                f"the input ({height}x{width}) and the reference ({ref_h}x{ref_w}) must be at least 3x3 and 12x12: one "
                "3x3 patch of the relevance embedding, which compares them at the input's resolution"
            )
        if tuple(upsampled.shape[-2:]) != (SCALE * height, SCALE * width):
            raise ValueError(
                f"upsampled_pixel_values are {tuple(upsampled.shape[-2:])}, not 4x the input's {(height, width)}: "
                "they are the low-resolution input bicubically upsampled x4 (pixel_values and upsampled_pixel_values "
                "swapped?)"
            )
        if ref_h % SCALE or ref_w % SCALE or tuple(degraded_reference.shape[-2:]) != (ref_h, ref_w):
            raise ValueError(
                f"the reference ({ref_h}x{ref_w}) must have sides that are multiples of 4 and its degraded copy "
                f"({tuple(degraded_reference.shape[-2:])}) the same size (TTSRImageProcessor crops them)"
            )
        if height * width > ref_h * ref_w:
            raise ValueError(
                f"the low-resolution input ({height}x{width}) is larger than the reference ({ref_h}x{ref_w}): the "
                "reference is a high-resolution image of similar content (are the images and references swapped?)"
            )


class TTSRModel(TTSRPreTrainedModel):
    """The texture extractor, the texture transformer and the main network up to the merged x4 features."""

    def __init__(self, config: TTSRConfig):
        super().__init__(config)
        self.texture_extractor = TTSRTextureExtractor(config.texture_channels, config.num_channels)
        self.texture_transformer = TTSRTextureTransformer(config)
        self.main_network = TTSRMainNetwork(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        upsampled_pixel_values: torch.Tensor | None = None,
        reference_pixel_values: torch.Tensor | None = None,
        degraded_reference_pixel_values: torch.Tensor | None = None,
        *,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> TTSRModelOutput:
        r"""
        Args:
            pixel_values: (B, 3, h, w) the low-resolution images in [-1, 1].
            upsampled_pixel_values: (B, 3, 4h, 4w) the same, bicubically upsampled x4.
            reference_pixel_values: (B, 3, H_r, W_r) references in [-1, 1], sides multiples of 4.
            degraded_reference_pixel_values: (B, 3, H_r, W_r) the references bicubically down- and upsampled x4.

        Returns:
            :class:`TTSRModelOutput`.
        """
        self.take_kwargs(kwargs)
        output_attentions, output_hidden_states = self._resolve_outputs(output_attentions, output_hidden_states)
        inputs = (pixel_values, upsampled_pixel_values, reference_pixel_values, degraded_reference_pixel_values)
        self.check_inputs(*inputs)
        lr, lr_up, ref, ref_degraded = (self.checked_pixels(x) for x in inputs)
        query_features = self.texture_extractor(lr_up)[2]  # relu3_1 of LR↑: (B, C3, h, w)
        key_features = self.texture_extractor(ref_degraded)[2]  # relu3_1 of Ref↓↑: (B, C3, H_r/4, W_r/4)
        values = self.texture_extractor(ref)  # Ref's relu1_1, relu2_1, relu3_1
        soft, textures, weights = self.texture_transformer(query_features, key_features, values, output_attentions)
        features, hidden = self.main_network(lr, soft, textures)
        return TTSRModelOutput(
            last_hidden_state=features,
            soft_attention=soft,
            transferred_textures=textures,
            hidden_states=hidden if output_hidden_states else None,
            attentions=(weights,) * self.config.num_stages if output_attentions else None,
        )


class TTSRReconstructionHead(nn.Module):
    """The last two convolutions (3x3 to n_feats / 2, 1x1 to RGB) and the clamp to [-1, 1]."""

    def __init__(self, config: TTSRConfig):
        super().__init__()
        self.conv_tail1 = conv3x3(config.n_feats, config.n_feats // 2)
        self.conv_tail2 = conv1x1(config.n_feats // 2, config.num_channels)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.clamp(self.conv_tail2(self.conv_tail1(features)), -1.0, 1.0)


class TTSRForReferenceSuperResolution(TTSRPreTrainedModel):
    """TTSR: x4 super-resolution of an image with the textures of a reference image. ``labels`` (the
    high-resolution images, in [-1, 1]) give the L1 reconstruction loss (``config.reconstruction_loss_weight``);
    the perceptual, transferal perceptual and adversarial losses of the full recipe are in
    :mod:`hf_xcv.losses` and the training script."""

    _is_task_model = True
    _honoured_kwargs = frozenset({"num_items_in_batch"})  # Trainer's loss normalisation

    def __init__(self, config: TTSRConfig):
        super().__init__(config)
        self.ttsr = TTSRModel(config)
        self.head = TTSRReconstructionHead(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        upsampled_pixel_values: torch.Tensor | None = None,
        reference_pixel_values: torch.Tensor | None = None,
        degraded_reference_pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> ReferenceSuperResolutionOutput:
        r"""
        Args:
            pixel_values, upsampled_pixel_values, reference_pixel_values, degraded_reference_pixel_values: as
                :meth:`TTSRModel.forward`.
            labels: (B, 3, 4h, 4w) the high-resolution images in [-1, 1].
            kwargs: ``num_items_in_batch`` (from Trainer) normalises the loss over gradient accumulation; any other
                key is refused.

        Returns:
            :class:`ReferenceSuperResolutionOutput`: ``reconstruction`` (B, 3, 4h, 4w) in [-1, 1].
        """
        loss_kwargs = self.take_kwargs(kwargs)
        outputs = self.ttsr(
            pixel_values,
            upsampled_pixel_values,
            reference_pixel_values,
            degraded_reference_pixel_values,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        reconstruction = self.head(outputs.last_hidden_state)  # (B, 3, 4h, 4w)
        loss = None
        if labels is not None:
            if not labels.is_floating_point():
                raise ValueError(f"labels are {labels.dtype}: the high-resolution images as floats in [-1, 1]")
            loss = self.config.reconstruction_loss_weight * reconstruction_loss(reconstruction, labels, **loss_kwargs)
        return ReferenceSuperResolutionOutput(
            loss=loss,
            reconstruction=reconstruction,
            soft_attention=outputs.soft_attention,
            transferred_textures=outputs.transferred_textures,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
