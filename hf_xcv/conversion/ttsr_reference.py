"""A functional reference of the official TTSR forward pass, computed straight from an official state dict
(``LTE.*``, ``MainNet.*`` keys) with ``F.conv2d`` and friends: the independent implementation that the converter's
``--verify`` and the tests compare hf_xcv's model with.

It follows the published structure (Yang et al. 2020 and researchmm/TTSR), not hf_xcv's modules, and keeps the
original's dense formulation where hf_xcv computes differently: the whole relevance matrix between every 3x3 patch
of LR↑'s and Ref↓↑'s relu3_1 at once (hf_xcv: blocks and a running arg-max), the MeanShift as the checkpoint's own
1x1 convolution (hf_xcv: built-in constants), the transfer as unfold / gather / fold (hf_xcv: displaced gathers).
Memory grows with (input area) x (reference area): meant for small inputs.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

# (kernel, stride, padding) of the unfold / fold of Ref's features at relu3_1, relu2_1 and relu1_1: 3s x 3s patches
# at stride s around each of the relevance grid's positions, s = 1, 2, 4.
TRANSFER_LEVELS = ((3, 1, 1), (6, 2, 2), (12, 4, 4))
OVERLAP = 9.0  # the 3 x 3 neighbouring patches summed into each position by the fold
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _conv(weights: dict[str, torch.Tensor], name: str, x: torch.Tensor, stride: int = 1) -> torch.Tensor:
    """The convolution ``name`` of the checkpoint ("same" padding: 1 for 3x3, 0 for 1x1), in the input's dtype."""
    kernel, bias = weights[f"{name}.weight"].to(x.dtype), weights[f"{name}.bias"].to(x.dtype)
    return F.conv2d(x, kernel, bias, stride=stride, padding=kernel.shape[-1] // 2)


def _bicubic(x: torch.Tensor, factor: int) -> torch.Tensor:
    return F.interpolate(x, scale_factor=factor, mode="bicubic")


def _res_stack(weights: dict[str, torch.Tensor], prefix: str, x: torch.Tensor, res_scale: float) -> torch.Tensor:
    """The residual blocks ``prefix.0``, ``prefix.1``, ... (as many as the checkpoint holds): each adds
    ``conv2(relu(conv1(x))) * res_scale`` to its input."""
    index = 0
    while f"{prefix}.{index}.conv1.weight" in weights:
        branch = _conv(weights, f"{prefix}.{index}.conv2", F.relu(_conv(weights, f"{prefix}.{index}.conv1", x)))
        x = branch * res_scale + x
        index += 1
    return x


def texture_features(
    weights: dict[str, torch.Tensor], images: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LTE: images in [-1, 1] -> (relu1_1, relu2_1, relu3_1) of the checkpoint's VGG19 convolutions, after its
    MeanShift 1x1 convolution on the images mapped to [0, 1]."""
    shift = weights["LTE.sub_mean.weight"].to(images.dtype), weights["LTE.sub_mean.bias"].to(images.dtype)
    x = F.conv2d((images + 1.0) / 2.0, *shift)
    lv1 = F.relu(_conv(weights, "LTE.slice1.0", x))  # conv1_1
    x = F.max_pool2d(F.relu(_conv(weights, "LTE.slice2.2", lv1)), 2)  # conv1_2, pool
    lv2 = F.relu(_conv(weights, "LTE.slice2.5", x))  # conv2_1
    x = F.max_pool2d(F.relu(_conv(weights, "LTE.slice3.7", lv2)), 2)  # conv2_2, pool
    return lv1, lv2, F.relu(_conv(weights, "LTE.slice3.10", x))  # conv3_1


def search_and_transfer(
    query_features: torch.Tensor, key_features: torch.Tensor, reference_levels: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Relevance of every LR↑ patch to every Ref↓↑ patch (cosines of unfolded 3x3 relu3_1 patches), hard attention
    (the arg-max over the reference), soft attention S (that maximum) and the textures T_lv3, T_lv2, T_lv1
    (Ref's unfolded patches at the arg-max, folded back and divided by 9)."""
    batch, _, height, width = query_features.shape
    queries = F.normalize(F.unfold(query_features, 3, padding=1), dim=1)  # (B, C3 * 9, h * w)
    keys = F.normalize(F.unfold(key_features, 3, padding=1), dim=1)  # (B, C3 * 9, hr * wr)
    relevance = torch.bmm(keys.transpose(1, 2), queries)  # (B, hr * wr, h * w)
    best, index = relevance.max(dim=1)  # (B, h * w): over the reference positions
    textures = []
    for values, (kernel, stride, padding) in zip(reversed(reference_levels), TRANSFER_LEVELS):
        patches = F.unfold(values, kernel, padding=padding, stride=stride)  # (B, C * kernel^2, hr * wr)
        if patches.shape[-1] != keys.shape[-1]:
            raise ValueError(f"the reference's features give {patches.shape[-1]} patches, its keys {keys.shape[-1]}")
        taken = patches.gather(2, index.unsqueeze(1).expand(-1, patches.shape[1], -1))  # (B, C * kernel^2, h * w)
        size = (stride * height, stride * width)
        textures.append(F.fold(taken, size, kernel, padding=padding, stride=stride) / OVERLAP)
    return best.view(batch, 1, height, width), (textures[0], textures[1], textures[2])


def _fuse(
    weights: dict[str, torch.Tensor], head: str, x: torch.Tensor, texture: torch.Tensor, soft: torch.Tensor
) -> torch.Tensor:
    """Soft-attention fusion: x + conv(cat(x, T)) * S (no activation on the convolution)."""
    return x + _conv(weights, head, torch.cat((x, texture), dim=1)) * soft


def main_network(
    weights: dict[str, torch.Tensor],
    lr: torch.Tensor,
    soft: torch.Tensor,
    textures: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    res_scale: float = 1.0,
) -> torch.Tensor:
    """MainNet: shallow features, the x1 stage, sub-pixel x2 and the two-branch stage (CSFI2), sub-pixel x2 and the
    three-branch stage (CSFI3), the merge tail and the clamp to [-1, 1]."""
    w, m = weights, "MainNet."
    t3, t2, t1 = textures

    def stack(name: str, x: torch.Tensor) -> torch.Tensor:
        return _res_stack(w, m + name, x, res_scale)

    def up_relu(name: str, x: torch.Tensor, factor: int) -> torch.Tensor:  # bicubic up, 1x1 conv, ReLU
        return F.relu(_conv(w, m + name, _bicubic(x, factor)))

    def down_relu(name: str, x: torch.Tensor) -> torch.Tensor:  # strided 3x3 conv, ReLU
        return F.relu(_conv(w, m + name, x, stride=2))

    def merge(name: str, *parts: torch.Tensor) -> torch.Tensor:
        return F.relu(_conv(w, m + name, torch.cat(parts, dim=1)))

    shallow = F.relu(_conv(w, m + "SFE.conv_head", lr))
    x1 = shallow + _conv(w, m + "SFE.conv_tail", stack("SFE.RBs", shallow))  # (B, n, h, w)
    x1 = _fuse(w, m + "conv11_head", x1, t3, soft)
    x1 = x1 + _conv(w, m + "conv11_tail", stack("RB11", x1))

    x2 = F.relu(F.pixel_shuffle(_conv(w, m + "conv12", x1), 2))  # (B, n, 2h, 2w)
    x2 = _fuse(w, m + "conv22_head", x2, t2, _bicubic(soft, 2))
    y1 = merge("ex12.conv_merge1", x1, down_relu("ex12.conv21", x2))
    y2 = merge("ex12.conv_merge2", x2, up_relu("ex12.conv12", x1, 2))
    x1 = x1 + _conv(w, m + "conv21_tail", stack("RB21", y1))
    x2 = x2 + _conv(w, m + "conv22_tail", stack("RB22", y2))

    x3 = F.relu(F.pixel_shuffle(_conv(w, m + "conv23", x2), 2))  # (B, n, 4h, 4w)
    x3 = _fuse(w, m + "conv33_head", x3, t1, _bicubic(soft, 4))
    x31 = down_relu("ex123.conv31_2", down_relu("ex123.conv31_1", x3))
    y1 = merge("ex123.conv_merge1", x1, down_relu("ex123.conv21", x2), x31)
    y2 = merge("ex123.conv_merge2", x2, up_relu("ex123.conv12", x1, 2), down_relu("ex123.conv32", x3))
    y3 = merge("ex123.conv_merge3", x3, up_relu("ex123.conv13", x1, 4), up_relu("ex123.conv23", x2, 2))
    x1 = x1 + _conv(w, m + "conv31_tail", stack("RB31", y1))
    x2 = x2 + _conv(w, m + "conv32_tail", stack("RB32", y2))
    x3 = x3 + _conv(w, m + "conv33_tail", stack("RB33", y3))

    merged = merge(
        "merge_tail.conv_merge", x3, up_relu("merge_tail.conv13", x1, 4), up_relu("merge_tail.conv23", x2, 2)
    )
    out = _conv(w, m + "merge_tail.conv_tail2", _conv(w, m + "merge_tail.conv_tail1", merged))
    return out.clamp(-1.0, 1.0)


def original_forward(
    state_dict: dict[str, torch.Tensor],
    lr: torch.Tensor,
    lr_up: torch.Tensor,
    ref: torch.Tensor,
    ref_degraded: torch.Tensor,
    res_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The official TTSR's inference on an official state dict (``module.`` already stripped; other keys such as
    ``LTE_copy`` are not read), in the inputs' dtype.

    Args:
        lr: (B, 3, h, w) in [-1, 1]; lr_up: (B, 3, 4h, 4w), LR bicubically upsampled x4.
        ref: (B, 3, H, W) with sides multiples of 4; ref_degraded: the same size, Ref bicubically down and up x4.

    Returns:
        (sr (B, 3, 4h, 4w), S (B, 1, h, w), T_lv3 (B, C3, h, w), T_lv2 (B, C2, 2h, 2w), T_lv1 (B, C1, 4h, 4w)).
    """
    query_features = texture_features(state_dict, lr_up)[2]
    key_features = texture_features(state_dict, ref_degraded)[2]
    soft, textures = search_and_transfer(query_features, key_features, texture_features(state_dict, ref))
    return main_network(state_dict, lr, soft, textures, res_scale), soft, *textures


def random_inputs(
    batch: int = 2,
    lr_size: tuple[int, int] = (10, 12),
    ref_size: tuple[int, int] = (48, 40),
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> dict[str, torch.Tensor]:
    """Seeded random LR and Ref in [-1, 1] with their bicubic companions (LR↑: x4; Ref↓↑: antialiased bicubic down
    x4, then up x4; both clamped to [-1, 1] as images are), under the model's argument names."""
    generator = torch.Generator().manual_seed(seed)
    lr = torch.rand(batch, 3, *lr_size, generator=generator, dtype=torch.float64) * 2 - 1
    ref = torch.rand(batch, 3, *ref_size, generator=generator, dtype=torch.float64) * 2 - 1
    small = F.interpolate(ref, size=(ref_size[0] // 4, ref_size[1] // 4), mode="bicubic", antialias=True)
    inputs = {
        "pixel_values": lr,
        "upsampled_pixel_values": _bicubic(lr, 4).clamp(-1, 1),
        "reference_pixel_values": ref,
        "degraded_reference_pixel_values": F.interpolate(small, size=ref_size, mode="bicubic").clamp(-1, 1),
    }
    return {name: value.to(dtype) for name, value in inputs.items()}


def compare_with_original(
    model: torch.nn.Module, state_dict: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]
) -> dict[str, float]:
    """Largest |difference| between hf_xcv's ``TTSRForReferenceSuperResolution`` and :func:`original_forward` on
    ``inputs`` (as :func:`random_inputs` names them), per output: reconstruction, S, T_lv3, T_lv2, T_lv1. Both run
    in the inputs' dtype (cast the model to match)."""
    with torch.no_grad():
        ours = model(**inputs)
        theirs = original_forward(
            state_dict,
            inputs["pixel_values"],
            inputs["upsampled_pixel_values"],
            inputs["reference_pixel_values"],
            inputs["degraded_reference_pixel_values"],
            res_scale=model.config.res_scale,
        )
    mine = (ours.reconstruction, ours.soft_attention, *ours.transferred_textures)
    names = ("reconstruction", "S", "T_lv3", "T_lv2", "T_lv1")
    return {name: (a - b).abs().max().item() for name, a, b in zip(names, mine, theirs)}


# ---------------------------------------------------------------------------------------------------------------
# official-layout state dicts, built from the official module structure (model/MainNet.py, model/LTE.py)


def official_convolutions(n_feats: int, blocks: tuple[int, ...], channels: tuple[int, ...]) -> dict[str, tuple]:
    """Official module name -> (out, in, kernel) of every convolution of researchmm/TTSR's model (LTE_copy aside)."""
    n, (c1, c2, c3) = n_feats, channels
    convs: dict[str, tuple] = {}

    def res_blocks(prefix: str, count: int) -> None:
        for i in range(count):
            convs[f"{prefix}.{i}.conv1"] = convs[f"{prefix}.{i}.conv2"] = (n, n, 3)

    convs["MainNet.SFE.conv_head"] = (n, 3, 3)
    res_blocks("MainNet.SFE.RBs", blocks[0])
    convs["MainNet.SFE.conv_tail"] = (n, n, 3)
    convs["MainNet.conv11_head"] = (n, c3 + n, 3)  # 256 + n_feats in the original
    res_blocks("MainNet.RB11", blocks[1])
    convs["MainNet.conv11_tail"] = (n, n, 3)
    convs["MainNet.conv12"] = (4 * n, n, 3)
    convs["MainNet.conv22_head"] = (n, c2 + n, 3)
    convs.update({"MainNet.ex12.conv12": (n, n, 1), "MainNet.ex12.conv21": (n, n, 3)})
    convs["MainNet.ex12.conv_merge1"] = convs["MainNet.ex12.conv_merge2"] = (n, 2 * n, 3)
    for branch in ("RB21", "RB22"):
        res_blocks(f"MainNet.{branch}", blocks[2])
    convs["MainNet.conv21_tail"] = convs["MainNet.conv22_tail"] = (n, n, 3)
    convs["MainNet.conv23"] = (4 * n, n, 3)
    convs["MainNet.conv33_head"] = (n, c1 + n, 3)
    for name, kernel in (("conv12", 1), ("conv13", 1), ("conv21", 3), ("conv23", 1), ("conv31_1", 3), ("conv31_2", 3),
                         ("conv32", 3)):  # fmt: skip
        convs[f"MainNet.ex123.{name}"] = (n, n, kernel)
    for i in (1, 2, 3):
        convs[f"MainNet.ex123.conv_merge{i}"] = (n, 3 * n, 3)
    for branch in ("RB31", "RB32", "RB33"):
        res_blocks(f"MainNet.{branch}", blocks[3])
    for i in (1, 2, 3):
        convs[f"MainNet.conv3{i}_tail"] = (n, n, 3)
    convs["MainNet.merge_tail.conv13"] = convs["MainNet.merge_tail.conv23"] = (n, n, 1)
    convs["MainNet.merge_tail.conv_merge"] = (n, 3 * n, 3)
    convs["MainNet.merge_tail.conv_tail1"] = (n // 2, n, 3)
    convs["MainNet.merge_tail.conv_tail2"] = (3, n // 2, 1)
    # VGG19 features[:12] under torchvision's indices: conv1_1, conv1_2, conv2_1, conv2_2, conv3_1
    convs.update({"LTE.slice1.0": (c1, 3, 3), "LTE.slice2.2": (c1, c1, 3), "LTE.slice2.5": (c2, c1, 3)})
    convs.update({"LTE.slice3.7": (c2, c2, 3), "LTE.slice3.10": (c3, c2, 3)})
    return convs


def mean_shift() -> dict[str, torch.Tensor]:
    """The original MeanShift (rgb_range 1, sign -1): a 1x1 convolution with weight I / std and bias -mean / std."""
    std, mean = torch.tensor(IMAGENET_STD), torch.tensor(IMAGENET_MEAN)
    return {"sub_mean.weight": torch.eye(3).view(3, 3, 1, 1) / std.view(3, 1, 1, 1), "sub_mean.bias": -mean / std}


def official_state_dict(n_feats=8, blocks=(2, 1, 1, 1), channels=(4, 8, 16), seed=0) -> dict[str, torch.Tensor]:
    """A random state dict in the layout of TTSR.pt, with PyTorch's default convolution bounds (1 / sqrt(fan_in)),
    so that features neither vanish nor saturate the final clamp."""
    generator = torch.Generator().manual_seed(seed)
    state_dict = {}
    for name, (out, inp, kernel) in official_convolutions(n_feats, blocks, channels).items():
        bound = 1.0 / math.sqrt(inp * kernel * kernel)
        state_dict[f"{name}.weight"] = (torch.rand(out, inp, kernel, kernel, generator=generator) * 2 - 1) * bound
        state_dict[f"{name}.bias"] = (torch.rand(out, generator=generator) * 2 - 1) * bound
    state_dict.update({f"LTE.{k}": v for k, v in mean_shift().items()})
    return state_dict
