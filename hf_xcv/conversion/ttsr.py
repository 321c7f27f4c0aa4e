"""Official TTSR checkpoints (researchmm/TTSR's ``TTSR.pt`` and ``TTSR-rec.pt``) -> hf_xcv TTSR (``xcv_ttsr``).

The released files are plain state dicts: no config, no wrapper (the official trainer saves
``model.state_dict()`` as it is, less the ``LTE_copy`` and ``SearchNet`` keys and a DataParallel ``module.`` prefix).
At the paper's settings they hold 316 keys:

* ``LTE.slice1.0``, ``LTE.slice2.{2,5}``, ``LTE.slice3.{7,10}``: the texture extractor's five convolutions, under
  torchvision's VGG19 indices, as hf_xcv's ``ttsr.texture_extractor``;
* ``LTE.sub_mean``: a 1x1 convolution holding the ImageNet normalisation (weight ``diag(1 / std)``, bias
  ``-mean / std``), never trained. hf_xcv normalises with the same constants, built in, so these two weights are
  checked to be those (to float32 rounding) and dropped (anything else is refused: the result would compute something
  else);
* ``MainNet.*``: the main network, as ``ttsr.main_network.*`` (``SFE.RBs`` -> ``sfe.blocks``, ``RB11`` ->
  ``blocks11``, ...), except the two reconstruction convolutions ``MainNet.merge_tail.conv_tail{1,2}``, which are
  the task head's ``head.conv_tail{1,2}``.

What the weights cannot tell: ``res_scale`` (1 in every script of the official repository, the config's default).
Every key is renamed or explicitly dropped; any other key is an error that names it. The strict conversion, which also
checks the result against the model (a missing key, a wrong shape), is :mod:`hf_xcv.models.ttsr.conversion_ttsr`'s.
"""

from __future__ import annotations

import os
import re
from functools import partial
from typing import Any

import torch

from ..layers.vgg import normalization_constants
from .checkpoint_io import load_official_state_dict
from .rules import Rule, numbered, precision_rtol, rename_keys, required_shape

TARGET_MODEL_TYPE = "xcv_ttsr"
PROCESSOR_TYPE = "TTSRImageProcessor"
ARCHITECTURE = "TTSRForReferenceSuperResolution"
DATA_PARALLEL_PREFIX = "module."
MEAN_SHIFT_KEYS = ("LTE.sub_mean.weight", "LTE.sub_mean.bias")
# The residual stacks whose lengths make ``num_res_blocks`` ("SFE+RB11+RB21+RB31"), and those that must match them.
RES_BLOCK_STAGES = ("MainNet.SFE.RBs", "MainNet.RB11", "MainNet.RB21", "MainNet.RB31")
SAME_DEPTH = {"MainNet.RB22": "MainNet.RB21", "MainNet.RB32": "MainNet.RB31", "MainNet.RB33": "MainNet.RB31"}
# The extractor's last convolution of each level (relu1_1, relu2_1, relu3_1): their widths are texture_channels.
LEVEL_CONVOLUTIONS = ("LTE.slice1.0.weight", "LTE.slice2.5.weight", "LTE.slice3.10.weight")

_WB = r"(weight|bias)"
_MAIN = "ttsr.main_network."
RULES: list[Rule] = [
    (r"LTE\.(slice1\.0|slice2\.[25]|slice3\.(?:7|10))\." + _WB, r"ttsr.texture_extractor.\1.\2"),
    (r"MainNet\.SFE\.(conv_head|conv_tail)\." + _WB, _MAIN + r"sfe.\1.\2"),
    (r"MainNet\.SFE\.RBs\.(\d+)\.(conv[12])\." + _WB, _MAIN + r"sfe.blocks.\1.\2.\3"),
    (r"MainNet\.RB(11|21|22|31|32|33)\.(\d+)\.(conv[12])\." + _WB, _MAIN + r"blocks\1.\2.\3.\4"),
    (
        r"MainNet\.(conv11_head|conv11_tail|conv12|conv22_head|conv2[12]_tail|conv23|conv33_head|conv3[123]_tail)\."
        + _WB,
        _MAIN + r"\1.\2",
    ),
    (r"MainNet\.ex12\.(conv12|conv21|conv_merge[12])\." + _WB, _MAIN + r"ex12.\1.\2"),
    (r"MainNet\.ex123\.(conv1[23]|conv2[13]|conv31_[12]|conv32|conv_merge[123])\." + _WB, _MAIN + r"ex123.\1.\2"),
    (r"MainNet\.merge_tail\.(conv[12]3|conv_merge)\." + _WB, _MAIN + r"merge_tail.\1.\2"),
    (r"MainNet\.merge_tail\.(conv_tail[12])\." + _WB, r"head.\1.\2"),
]
# What the official trainer leaves out of the files it saves and a raw ``model.state_dict()`` still holds: the frozen
# copy of the extractor that the transferal perceptual loss reads (hf_xcv computes it from the extractor's own
# weights), and ``SearchNet`` entries (the trainer drops any key naming it). The MeanShift is dropped after its check.
DROP = [r"LTE_copy\..*", r"(.*\.)?SearchNet\..*", *(re.escape(key) for key in MEAN_SHIFT_KEYS)]


def load_original(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The state dict of an official ``.pt`` file (see :func:`.checkpoint_io.load_official_state_dict`)."""
    return load_official_state_dict(path, "the official TTSR.pt / TTSR-rec.pt")


def strip_data_parallel(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The keys without DataParallel's ``module.`` prefix (a file saved from a wrapped model has it on every key)."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        name = key.removeprefix(DATA_PARALLEL_PREFIX)
        if name in out:
            raise ValueError(
                f"the checkpoint holds {name!r} twice, with and without the {DATA_PARALLEL_PREFIX!r} prefix"
            )
        out[name] = tensor
    return out


def check_mean_shift(state_dict: dict[str, torch.Tensor]) -> None:
    """ValueError unless ``LTE.sub_mean`` is the ImageNet normalisation that hf_xcv's extractor builds in (weight
    ``diag(1 / std)`` as a 1x1 convolution, bias ``-mean / std``), to float32 rounding."""
    missing = [key for key in MEAN_SHIFT_KEYS if key not in state_dict]
    if missing:
        raise ValueError(
            f"the checkpoint lacks {missing}: the official texture extractor saves its ImageNet normalisation (a "
            "frozen 1x1 convolution), which tells that it normalises as hf_xcv's does"
        )
    scale, shift = normalization_constants()
    expected = {MEAN_SHIFT_KEYS[0]: torch.diag(scale.flatten()).view(3, 3, 1, 1), MEAN_SHIFT_KEYS[1]: shift.flatten()}
    for key, constant in expected.items():
        value = state_dict[key]
        rtol = precision_rtol(value)  # a half-precision checkpoint holds them to ~1e-3
        same = tuple(value.shape) == tuple(constant.shape) and torch.allclose(
            value.double(), constant.double(), rtol=rtol, atol=1e-7
        )
        if not same:
            raise ValueError(
                f"{key} {list(value.shape)} = {value.flatten().tolist()} is not the ImageNet normalisation "
                f"{constant.flatten().tolist()} (weight diag(1 / std), bias -mean / std, mean "
                "(0.485, 0.456, 0.406), std (0.229, 0.224, 0.225)): hf_xcv's texture extractor normalises with those "
                "constants, so these weights would compute something else"
            )


_shape = partial(required_shape, checkpoint="an official TTSR checkpoint")


def _depth(state_dict: dict[str, torch.Tensor], prefix: str) -> int:
    """The number of residual blocks ``prefix.0`` .. ``prefix.N-1``; ValueError when the numbering has gaps."""
    return numbered(state_dict, prefix + ".", "residual blocks")


def convert_config(state_dict: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The hf_xcv TTSRConfig dict of an official state dict, read from its shapes: ``n_feats`` from the shallow
    extractor's first convolution, ``num_res_blocks`` ("16+16+8+4") from the residual stacks of the shallow extractor
    and the x1, x2 and x4 stages, ``texture_channels`` from the texture extractor's three levels."""
    state_dict = strip_data_parallel(state_dict)
    n_feats = _shape(state_dict, "MainNet.SFE.conv_head.weight")[0]
    depths = {prefix: _depth(state_dict, prefix) for prefix in (*RES_BLOCK_STAGES, *SAME_DEPTH)}
    for prefix, twin in SAME_DEPTH.items():
        if depths[prefix] != depths[twin]:
            raise ValueError(
                f"{prefix} has {depths[prefix]} residual blocks and {twin} {depths[twin]}: the branches of one stage "
                "have the same depth in TTSR"
            )
    return {
        "model_type": TARGET_MODEL_TYPE,
        "architectures": [ARCHITECTURE],
        "n_feats": n_feats,
        "num_res_blocks": "+".join(str(depths[prefix]) for prefix in RES_BLOCK_STAGES),
        "texture_channels": [_shape(state_dict, key)[0] for key in LEVEL_CONVOLUTIONS],
    }


def convert_state_dict(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """An official state dict -> hf_xcv's names, and the keys deliberately dropped (``LTE_copy``, ``SearchNet``,
    the checked MeanShift), named without a ``module.`` prefix. Any other unknown key is a ValueError."""
    state_dict = strip_data_parallel(state_dict)
    check_mean_shift(state_dict)
    return rename_keys(state_dict, RULES, DROP)
