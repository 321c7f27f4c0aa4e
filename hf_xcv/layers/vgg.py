"""VGG19's convolutional ``features``, defined here (no torchvision), with torchvision's module indices.

TTSR's texture extractor is VGG19 up to relu3_1 (``features[:12]``) and its perceptual loss VGG19 up to relu5_1
(``features[:30]``). Keeping torchvision's indices (conv at 0, 2, 5, 7, 10, ..., ReLU after each conv, 2x2 max
pooling at 4, 9, 18, 27, 36) means a torchvision-format state dict (``features.N.weight``) loads by name.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn

# torchvision's configuration "E" (VGG19): output widths of the 3x3 convolutions, "M" for a 2x2 max pooling.
VGG19_LAYOUT: tuple[int | str, ...] = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M",
)  # fmt: skip
RELU3_1 = 12  # features[:12] ends with relu3_1 (TTSR's texture extractor)
RELU5_1 = 30  # features[:30] ends with relu5_1 (TTSR's perceptual loss)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def vgg19_layers(num_layers: int, layout: Sequence[int | str] = VGG19_LAYOUT, in_channels: int = 3) -> list[nn.Module]:
    """The first ``num_layers`` modules of VGG19's ``features`` (torchvision's order: conv, ReLU, ..., max pool);
    ``layout`` may change the widths (same structure)."""
    layers: list[nn.Module] = []
    channels = in_channels
    for item in layout:
        if item == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers += [nn.Conv2d(channels, int(item), kernel_size=3, padding=1), nn.ReLU(inplace=False)]
            channels = int(item)
        if len(layers) >= num_layers:
            return layers[:num_layers]
    raise ValueError(f"VGG19 has {len(layers)} feature layers; asked for {num_layers}")


def indexed(layers: Sequence[nn.Module], start: int = 0) -> nn.Sequential:
    """An ``nn.Sequential`` whose children are named by their index in the whole feature stack (``"7"``, ...)."""
    return nn.Sequential(OrderedDict((str(start + i), layer) for i, layer in enumerate(layers)))


def normalization_constants(
    mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift), each (1, 3, 1, 1), with ``normalised = x * scale + shift`` for x in [0, 1]: the original TTSR
    ``MeanShift`` 1x1 convolution's weight (1 / std) and bias (-mean / std)."""
    std_t = torch.tensor(std, dtype=torch.float32)
    return (1.0 / std_t).view(1, -1, 1, 1), (-torch.tensor(mean, dtype=torch.float32) / std_t).view(1, -1, 1, 1)


class ImageNetNormalization(nn.Module):
    """Images in [-1, 1] -> ImageNet-normalised: ``(x + 1) / 2`` then ``x / std - mean / std`` (the original's
    ``MeanShift``). Constant buffers, not saved; a model built on the meta device refills them with
    :func:`normalization_constants` when it initialises its weights."""

    def __init__(self):
        super().__init__()
        scale, shift = normalization_constants()
        self.register_buffer("scale", scale, persistent=False)
        self.register_buffer("shift", shift, persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = (images + 1.0) / 2.0  # [-1, 1] -> [0, 1]
        return x * self.scale.to(x.dtype) + self.shift.to(x.dtype)


class VGG19Features(nn.Module):
    """VGG19 ``features[:num_layers]`` on images in [-1, 1] (ImageNet-normalised first), e.g. up to relu5_1 for the
    perceptual loss. ``features.N.*`` are torchvision's names: load ImageNet weights with
    :func:`hf_xcv.conversion.vgg.load_vgg19_features`."""

    def __init__(self, num_layers: int = RELU5_1):
        super().__init__()
        self.normalization = ImageNetNormalization()
        self.features = indexed(vgg19_layers(num_layers))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.features(self.normalization(images))


class TTSRTextureExtractor(nn.Module):
    """The learnable texture extractor (LTE): VGG19 up to relu3_1 with torchvision's indices (``slice1.0``,
    ``slice2.2``, ``slice2.5``, ``slice3.7``, ``slice3.10``), on ImageNet-normalised images; trained with the model.
    Gives relu1_1 (full resolution), relu2_1 (1/2) and relu3_1 (1/4); ``texture_channels`` are the three levels'
    widths (VGG19's: 64, 128, 256)."""

    def __init__(self, texture_channels: Sequence[int] = (64, 128, 256), num_channels: int = 3):
        super().__init__()
        c1, c2, c3 = texture_channels
        layers = vgg19_layers(RELU3_1, layout=(c1, c1, "M", c2, c2, "M", c3), in_channels=num_channels)
        self.normalization = ImageNetNormalization()
        self.slice1 = indexed(layers[0:2], 0)
        self.slice2 = indexed(layers[2:7], 2)
        self.slice3 = indexed(layers[7:12], 7)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lv1 = self.slice1(self.normalization(images))  # (B, C1, H, W)
        lv2 = self.slice2(lv1)  # (B, C2, H/2, W/2)
        return lv1, lv2, self.slice3(lv2)  # relu3_1: (B, C3, H/4, W/4)

    def frozen(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The same features with the weights detached: gradients reach ``images`` but not the extractor (the
        original's ``LTE_copy``, which the transferal perceptual loss reads)."""
        weights = {name: param.detach() for name, param in self.named_parameters()}
        return torch.func.functional_call(self, weights, (images,))


def find_texture_extractor(model: nn.Module) -> TTSRTextureExtractor:
    """The one TTSR texture extractor in ``model`` (a TTSR model, a wrapper around one, or the extractor)."""
    found = [module for module in model.modules() if isinstance(module, TTSRTextureExtractor)]
    if len(found) != 1:
        raise ValueError(f"{type(model).__name__} holds {len(found)} TTSR texture extractors; expected exactly one")
    return found[0]
