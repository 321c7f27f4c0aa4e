"""VGG19 ImageNet weights from a file the user supplies (never downloaded): torchvision's ``vgg19-dcbb9e9d.pth``
or a safetensors file with the same ``features.N.*`` names (timm's ``vgg19.tv_in1k`` holds torchvision's weights
under them, and :func:`save_vgg19_features` writes one).

TTSR needs them twice, never at inference: the perceptual loss's frozen VGG19 up to relu5_1 (``features[:30]``,
:func:`load_perceptual_vgg`) and the texture extractor's initialisation before training (VGG19 up to relu3_1,
``features[:12]``, :func:`load_texture_extractor`). Only ``features[:num_layers]``'s convolutions are read; every
one must be there with VGG19's shape.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from ..layers.vgg import RELU3_1, RELU5_1, VGG19Features, find_texture_extractor, vgg19_layers
from .checkpoint_io import CheckpointMismatchError, CorruptCheckpointError, save_safetensors

# The texture extractor's slices of ``features``: its parameter ``sliceK.N.*`` is VGG19's ``features.N.*``.
TEXTURE_EXTRACTOR_SLICES = {"slice1": range(0, 2), "slice2": range(2, 7), "slice3": range(7, RELU3_1)}
LEVEL_CONVOLUTIONS = ("slice1.0", "slice2.5", "slice3.10")  # conv1_1, conv2_1, conv3_1: the three levels' widths
_FEATURE_KEY = re.compile(r"features\.(\d+)\.(weight|bias)")
_SOURCES = "torchvision's vgg19-dcbb9e9d.pth, or timm's vgg19.tv_in1k model.safetensors"


def vgg19_feature_shapes(num_layers: int = RELU5_1) -> dict[str, tuple[int, ...]]:
    """``features.N.weight`` / ``features.N.bias`` -> shape, for every convolution of VGG19's ``features[:num_layers]``
    (built on the meta device from :data:`hf_xcv.layers.vgg.VGG19_LAYOUT`: no second table to keep in step)."""
    with torch.device("meta"):
        layers = vgg19_layers(num_layers)
    return {
        f"features.{index}.{name}": tuple(param.shape)
        for index, layer in enumerate(layers)
        for name, param in layer.named_parameters()
    }


def _read_tensors(path: str, names: list[str]) -> dict[str, torch.Tensor]:
    """The tensors of ``names`` that the file holds (a safetensors file reads only those); CorruptCheckpointError
    naming the file when it cannot be read or holds no state dict."""
    try:
        if path.endswith(".safetensors"):
            with safe_open(path, framework="pt", device="cpu") as handle:
                present = set(handle.keys())
                return {name: handle.get_tensor(name) for name in names if name in present}
        state_dict = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated zip, foreign pickle, bad header...: say so by name
        raise CorruptCheckpointError(
            f"VGG19 weights file {path} is corrupt, truncated or not a weights file: {err}"
        ) from err
    if not isinstance(state_dict, Mapping):
        raise CorruptCheckpointError(f"VGG19 weights file {path} holds a {type(state_dict).__name__}, not a state dict")
    return {name: state_dict[name] for name in names if isinstance(state_dict.get(name), torch.Tensor)}


def load_vgg19_features(path: str | os.PathLike, num_layers: int = RELU5_1) -> dict[str, torch.Tensor]:
    """The convolutions of VGG19's ``features[:num_layers]`` from a torchvision-format file, by torchvision's names
    (``features.0.weight``, ...; 30: up to relu5_1, 12: up to relu3_1).

    Strict: FileNotFoundError for a missing file, CorruptCheckpointError for one that does not read, ValueError
    naming the missing keys, CheckpointMismatchError naming the keys whose shapes are not VGG19's. Other keys
    (``classifier.*``, deeper layers) are ignored.
    """
    path = str(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no VGG19 weights file at {path}: give the path of {_SOURCES}")
    expected = vgg19_feature_shapes(num_layers)
    tensors = _read_tensors(path, list(expected))
    missing = [name for name in expected if name not in tensors]
    if missing:
        raise ValueError(
            f"{path} lacks {len(missing)} of VGG19's features[:{num_layers}] weights: {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''} (is it {_SOURCES}?)"
        )
    wrong = [
        f"{name} (file {list(tensors[name].shape)}, VGG19 {list(shape)})"
        for name, shape in expected.items()
        if tuple(tensors[name].shape) != shape
    ]
    if wrong:
        raise CheckpointMismatchError(f"{path} is not VGG19: {len(wrong)} weights of another shape: {wrong[:8]}")
    return tensors


def load_perceptual_vgg(path: str | os.PathLike, num_layers: int = RELU5_1) -> VGG19Features:
    """TTSR's perceptual-loss network: VGG19 up to relu5_1 with the file's ImageNet weights, frozen (no parameter
    requires a gradient) and in eval mode. Move it to the training device with ``.to(device)``."""
    vgg = VGG19Features(num_layers)
    vgg.load_state_dict(load_vgg19_features(path, num_layers))  # strict: the normalisation's buffers are not saved
    return vgg.requires_grad_(False).eval()


def texture_extractor_state_dict(features: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Pure rename of VGG19's ``features.N.*`` (N < 12) to the texture extractor's ``sliceK.N.*``; deeper layers
    are left out."""
    slice_of = {index: name for name, indices in TEXTURE_EXTRACTOR_SLICES.items() for index in indices}
    renamed = {}
    for key, tensor in features.items():
        match = _FEATURE_KEY.fullmatch(key)
        if match and int(match[1]) in slice_of:
            renamed[f"{slice_of[int(match[1])]}.{match[1]}.{match[2]}"] = tensor
    return renamed


def load_texture_extractor(model: nn.Module, path: str | os.PathLike) -> None:
    """Initialise a TTSR model's texture extractor with VGG19's ImageNet conv1_1 ... conv3_1 (``features`` 0, 2,
    5, 7, 10 -> ``slice1.0``, ``slice2.2``, ``slice2.5``, ``slice3.7``, ``slice3.10``), in place, before training
    (the original builds its extractor from torchvision's pretrained VGG19).

    A model whose ``texture_channels`` are not VGG19's (64, 128, 256), or whose images are not RGB, is refused by
    name: the weights would not fit.
    """
    extractor = find_texture_extractor(model)
    weights = texture_extractor_state_dict(load_vgg19_features(path, RELU3_1))
    ours = {name: tuple(param.shape) for name, param in extractor.state_dict().items()}
    if ours != {name: tuple(tensor.shape) for name, tensor in weights.items()}:
        widths = [ours[f"{conv}.weight"][0] for conv in LEVEL_CONVOLUTIONS]
        channels = ours["slice1.0.weight"][1]
        raise ValueError(
            f"{type(model).__name__}'s texture extractor has texture_channels={widths} and num_channels={channels}; "
            "VGG19's ImageNet weights fit only texture_channels=[64, 128, 256] and num_channels=3"
        )
    extractor.load_state_dict(weights)


def save_vgg19_features(source: str | os.PathLike, output: str | os.PathLike, num_layers: int = RELU5_1) -> Path:
    """Write VGG19's ``features[:num_layers]`` (relu5_1 by default: 12.9M parameters, about 49 MiB in float32) from
    a torchvision-format file to a safetensors file with the same names, atomically; returns its path. The result
    loads with every function here (a tenth of the full 548 MB file)."""
    output = Path(output)
    tensors = load_vgg19_features(source, num_layers)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = output.with_name(f".{output.name}.tmp")
    try:
        save_safetensors(tensors, staging)
        os.replace(staging, output)
    finally:
        staging.unlink(missing_ok=True)
    return output


__all__ = [
    "TEXTURE_EXTRACTOR_SLICES",
    "load_perceptual_vgg",
    "load_texture_extractor",
    "load_vgg19_features",
    "save_vgg19_features",
    "texture_extractor_state_dict",
    "vgg19_feature_shapes",
]
