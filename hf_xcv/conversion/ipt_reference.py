"""A functional reference of the official IPT (Chen et al., CVPR 2021; huawei-noah/Pretrained-IPT): the forward pass
of ``model/ipt.py`` and the tiled inference of ``Model.forward_chop`` (``model/__init__.py``), computed straight from
a state dict in the official layout (``sub_mean.*``, ``head.{i}.*``, ``body.*``, ``tail.{i}.*``) with ``F.conv2d``,
``F.linear`` and an attention written out from its formula. It is the independent implementation that conversion
parity tests and the tiled-inference benchmark compare hf_xcv's model with.

It follows the published structure, not hf_xcv's modules: MeanShift as the checkpoint's own 1x1 convolutions, one
convolutional head and tail per task, and the shared transformer body on the fixed ``patch_size`` square: unfold
into ``patch_dim`` x ``patch_dim`` patches, a residual linear encoding, learned positions added once to the encoder
input, pre-LayerNorm encoder and decoder layers whose attention has no biases (``nn.MultiheadAttention(bias=False)``),
the task's query embedding added to the decoder's queries (and self-attention keys), a residual MLP head, fold back,
and a global residual around the body.

Which attention modules carry ``out_proj.bias`` depends on the PyTorch that saved a checkpoint: from 1.9 on,
``bias=False`` drops it, which is the layout :func:`official_shapes` describes by default (315 keys and 115,460,443
parameters for single-task x2 at the paper's size). If a state dict holds ``out_proj.bias`` keys (PyTorch releases
whose ``out_proj`` always had a bias), :func:`official_forward` adds them, as that PyTorch would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch.nn import functional as F

DIV2K_MEAN = (0.4488, 0.4371, 0.4040)  # common.MeanShift's default rgb_mean; its rgb_std is 1
HEAD_BLOCK_KERNEL = 5  # the heads' two ResBlocks use 5x5 convolutions; every other convolution is 3x3
FFN_RATIO = 4  # hidden_dim = 4 * embedding_dim
LAYER_NORM_EPS = 1e-5

# ---------------------------------------------------------------------------------------------------------------
# the official layout


def upsampler_factors(scale: int) -> list[int]:
    """The pixel-shuffle factors of ``common.Upsampler(scale)``: one 2 per doubling for a power of two (none for
    scale 1: the Upsampler is an empty Sequential and the tail is its final convolution alone), a single 3 for
    scale 3; any other scale raises, as the original's NotImplementedError."""
    if scale >= 1 and scale & (scale - 1) == 0:
        return [2] * (scale.bit_length() - 1)
    if scale == 3:
        return [3]
    raise ValueError(f"scale must be a power of two or 3 (the official Upsampler's cases), got {scale}")


def official_shapes(
    scales: Sequence[int] = (2,),
    n_feats: int = 64,
    patch_size: int = 48,
    patch_dim: int = 3,
    num_layers: int = 12,
    num_queries: int | None = None,
    out_proj_bias: bool = False,
) -> dict[str, tuple[int, ...]]:
    """Key -> shape of the official ``ipt`` state dict, in its order (``body.position_encoding.position_ids`` is the
    persistent int64 buffer of positions; everything else is a float parameter).

    Args:
        scales: one task per entry (1 for denoising / deraining), as ``--scale 2+3+4+1+1+1``.
        num_queries: rows of ``body.query_embed``; None gives one per task (single-task checkpoints have 1, the
            6-task pretrained one 6).
        out_proj_bias: add ``out_proj.bias`` to every attention (the layout of PyTorch releases that ignored
            ``bias=False`` there).
    """
    if patch_size % patch_dim:
        raise ValueError(f"patch_size ({patch_size}) must be a multiple of patch_dim ({patch_dim})")
    dim = n_feats * patch_dim * patch_dim  # embedding_dim = flatten_dim
    seq = (patch_size // patch_dim) ** 2
    hidden = FFN_RATIO * dim
    shapes: dict[str, tuple[int, ...]] = {}

    def conv(name: str, out: int, inp: int, kernel: int) -> None:
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (out, inp, kernel, kernel), (out,)

    def linear(name: str, out: int, inp: int, bias: bool = True) -> None:
        shapes[f"{name}.weight"] = (out, inp)
        if bias:
            shapes[f"{name}.bias"] = (out,)

    def attention(name: str) -> None:
        shapes[f"{name}.in_proj_weight"] = (3 * dim, dim)  # q, k, v stacked
        linear(f"{name}.out_proj", dim, dim, bias=out_proj_bias)

    def feed_forward_and_norms(prefix: str, norms: int) -> None:
        linear(f"{prefix}.linear1", hidden, dim)
        linear(f"{prefix}.linear2", dim, hidden)
        for k in range(1, norms + 1):
            shapes[f"{prefix}.norm{k}.weight"] = shapes[f"{prefix}.norm{k}.bias"] = (dim,)

    conv("sub_mean", 3, 3, 1)
    conv("add_mean", 3, 3, 1)
    for i in range(len(scales)):
        conv(f"head.{i}.0", n_feats, 3, 3)
        for block in (1, 2):
            for j in (0, 2):  # ResBlock.body = (conv, ReLU, conv)
                conv(f"head.{i}.{block}.body.{j}", n_feats, n_feats, HEAD_BLOCK_KERNEL)
    linear("body.linear_encoding", dim, dim)
    linear("body.mlp_head.0", hidden, dim)  # mlp_head = (Linear, Dropout, ReLU, Linear, Dropout)
    linear("body.mlp_head.3", dim, hidden)
    shapes["body.query_embed.weight"] = (len(scales) if num_queries is None else num_queries, dim * seq)
    for n in range(num_layers):
        attention(f"body.encoder.layers.{n}.self_attn")
        feed_forward_and_norms(f"body.encoder.layers.{n}", 2)
    for n in range(num_layers):
        attention(f"body.decoder.layers.{n}.self_attn")
        attention(f"body.decoder.layers.{n}.multihead_attn")
        feed_forward_and_norms(f"body.decoder.layers.{n}", 3)
    shapes["body.position_encoding.position_ids"] = (1, seq)  # the module's own buffer precedes its child ``pe``
    shapes["body.position_encoding.pe.weight"] = (seq, dim)
    for i, scale in enumerate(scales):
        for j, factor in enumerate(upsampler_factors(scale)):  # Upsampler = (conv, PixelShuffle) per stage
            conv(f"tail.{i}.0.{2 * j}", factor * factor * n_feats, n_feats, 3)
        conv(f"tail.{i}.1", 3, n_feats, 3)
    return shapes


def mean_shift(rgb_range: float, sign: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``common.MeanShift(rgb_range, sign=sign)`` with its defaults (DIV2K mean, std 1): weight the 3x3 identity as
    a (3, 3, 1, 1) kernel, bias ``sign * rgb_range * mean`` (sign -1: ``sub_mean``, +1: ``add_mean``)."""
    weight = torch.eye(3).view(3, 3, 1, 1)
    return weight, sign * rgb_range * torch.tensor(DIV2K_MEAN)


def official_state_dict(
    scales: Sequence[int] = (2,),
    n_feats: int = 8,
    patch_size: int = 12,
    patch_dim: int = 3,
    num_heads: int = 2,
    num_layers: int = 2,
    num_queries: int | None = None,
    rgb_range: float = 255,
    seed: int = 0,
    out_proj_bias: bool = False,
) -> dict[str, torch.Tensor]:
    """A random float32 state dict in the official layout (:func:`official_shapes`), with the exact MeanShifts.

    Values keep every stage in play: uniform(+-1/sqrt(fan_in)) convolutions and linears (the first head convolution
    divided by ``rgb_range`` and the last tail convolution multiplied by ``rgb_range / 4``, so the features are O(1)
    and the output varies by about a tenth of the pixel range around the mean), LayerNorm weights 1 + N(0, 0.1^2)
    and biases N(0, 0.1^2), positions and task queries N(0, 0.5^2) (the body's output outweighs the head features
    it is added to), and attention projections twice PyTorch's bound, so the softmax is far from uniform.
    """
    if (n_feats * patch_dim * patch_dim) % num_heads:
        raise ValueError(f"n_feats * patch_dim^2 ({n_feats * patch_dim**2}) must be divisible by num_heads")
    generator = torch.Generator().manual_seed(seed)
    shapes = official_shapes(scales, n_feats, patch_size, patch_dim, num_layers, num_queries, out_proj_bias)
    state_dict = {}
    for name, shape in shapes.items():
        if name.endswith("position_ids"):
            state_dict[name] = torch.arange(shape[1]).view(shape)
        elif ".norm" in name:
            noise = 0.1 * torch.randn(shape, generator=generator)
            state_dict[name] = noise + 1.0 if name.endswith("weight") else noise
        elif name.endswith(("pe.weight", "query_embed.weight")):
            state_dict[name] = 0.5 * torch.randn(shape, generator=generator)
        else:
            fan_in = shapes[name.rsplit(".", 1)[0] + ".weight"][1:] if name.endswith("bias") else shape[1:]
            bound = 1.0 / math.sqrt(math.prod(fan_in))
            if name.endswith("in_proj_weight"):
                bound *= 2.0  # sharper attention than PyTorch's default init
            state_dict[name] = (torch.rand(shape, generator=generator) * 2 - 1) * bound
    for i in range(len(scales)):
        state_dict[f"head.{i}.0.weight"] /= rgb_range
        state_dict[f"tail.{i}.1.weight"] *= rgb_range / 4
        state_dict[f"tail.{i}.1.bias"] *= rgb_range / 4
    for name, sign in (("sub_mean", -1), ("add_mean", 1)):
        state_dict[f"{name}.weight"], state_dict[f"{name}.bias"] = mean_shift(rgb_range, sign)
    return state_dict


def random_input(
    batch: int = 1, size: int | tuple[int, int] = 12, rgb_range: float = 255, seed: int = 0, dtype=torch.float32
) -> torch.Tensor:
    """Seeded uniform images (batch, 3, height, width) in [0, rgb_range]; ``size`` is a side or (height, width)."""
    height, width = (size, size) if isinstance(size, int) else size
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(batch, 3, height, width, generator=generator, dtype=torch.float64) * rgb_range).to(dtype)


# ---------------------------------------------------------------------------------------------------------------
# the forward pass of model/ipt.py


def _weight(weights: dict[str, torch.Tensor], name: str, like: torch.Tensor) -> torch.Tensor:
    return weights[name].to(like.dtype)


def _conv(weights: dict[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
    """The convolution ``name`` ("same" padding, as common.default_conv), in the input's dtype."""
    kernel = _weight(weights, f"{name}.weight", x)
    return F.conv2d(x, kernel, _weight(weights, f"{name}.bias", x), padding=kernel.shape[-1] // 2)


def _linear(weights: dict[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
    bias = weights.get(f"{name}.bias")
    return F.linear(x, _weight(weights, f"{name}.weight", x), None if bias is None else bias.to(x.dtype))


def _layer_norm(weights: dict[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
    gamma, beta = _weight(weights, f"{name}.weight", x), _weight(weights, f"{name}.bias", x)
    return F.layer_norm(x, gamma.shape, gamma, beta, LAYER_NORM_EPS)


def _attention(
    weights: dict[str, torch.Tensor],
    name: str,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    num_heads: int,
) -> torch.Tensor:
    """Multi-head attention without input biases: q, k, v from the thirds of ``in_proj_weight``, per head
    softmax(q k^T / sqrt(head_dim)) v, heads concatenated, then ``out_proj`` (its bias only if the checkpoint has
    one). query (B, Lq, D), key and value (B, Lk, D) -> (B, Lq, D)."""
    w_q, w_k, w_v = _weight(weights, f"{name}.in_proj_weight", query).chunk(3)
    batch, length, dim = query.shape
    head_dim = dim // num_heads

    def heads(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w.T).view(batch, -1, num_heads, head_dim).transpose(1, 2)  # (B, H, L, hd)

    q, k, v = heads(query, w_q), heads(key, w_k), heads(value, w_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)  # (B, H, Lq, Lk)
    attended = scores.softmax(dim=-1) @ v  # (B, H, Lq, hd)
    attended = attended.transpose(1, 2).reshape(batch, length, dim)  # (B, Lq, H * hd)
    return _linear(weights, f"{name}.out_proj", attended)


def _feed_forward(weights: dict[str, torch.Tensor], prefix: str, x: torch.Tensor) -> torch.Tensor:
    return _linear(weights, f"{prefix}.linear2", F.relu(_linear(weights, f"{prefix}.linear1", x)))


def _encoder_layer(w: dict[str, torch.Tensor], prefix: str, x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Pre-LN: x + SelfAttn(LN1(x)) with q = k = v = LN1(x) (no positions inside), then x + FFN(LN2(x))."""
    normed = _layer_norm(w, f"{prefix}.norm1", x)
    x = x + _attention(w, f"{prefix}.self_attn", normed, normed, normed, num_heads)
    return x + _feed_forward(w, prefix, _layer_norm(w, f"{prefix}.norm2", x))


def _decoder_layer(
    w: dict[str, torch.Tensor], prefix: str, x: torch.Tensor, memory: torch.Tensor, query: torch.Tensor, num_heads: int
) -> torch.Tensor:
    """Pre-LN: self-attention with q = k = LN1(x) + query, v = LN1(x); cross-attention with q = LN2(x) + query and
    k = v = memory (the encoder output, no positions); then the FFN on LN3(x); each a residual."""
    normed = _layer_norm(w, f"{prefix}.norm1", x)
    with_query = normed + query
    x = x + _attention(w, f"{prefix}.self_attn", with_query, with_query, normed, num_heads)
    normed = _layer_norm(w, f"{prefix}.norm2", x)
    x = x + _attention(w, f"{prefix}.multihead_attn", normed + query, memory, memory, num_heads)
    return x + _feed_forward(w, prefix, _layer_norm(w, f"{prefix}.norm3", x))


def _count_layers(weights: dict[str, torch.Tensor], stack: str) -> int:
    count = 0
    while f"body.{stack}.layers.{count}.linear1.weight" in weights:
        count += 1
    return count


def _body(
    w: dict[str, torch.Tensor], x: torch.Tensor, task_index: int, patch_dim: int, num_heads: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """VisionTransformer.forward: (B, C, P, P) -> (the folded (B, C, P, P) output, the per-patch (B, L, D) features
    before the fold, the official ``con_x``)."""
    size = x.shape[-1]
    tokens = F.unfold(x, patch_dim, stride=patch_dim).transpose(1, 2)  # (B, L, C * pd * pd), row-major patches
    length, dim = tokens.shape[1:]
    tokens = tokens + _linear(w, "body.linear_encoding", tokens)
    positions = _weight(w, "body.position_encoding.pe.weight", x)[w["body.position_encoding.position_ids"][0]]
    query = _weight(w, "body.query_embed.weight", x)[task_index].view(length, dim)  # (L, D), one row per task
    memory = tokens + positions  # positions enter once, at the encoder input
    for n in range(_count_layers(w, "encoder")):
        memory = _encoder_layer(w, f"body.encoder.layers.{n}", memory, num_heads)
    out = memory
    for n in range(_count_layers(w, "decoder")):
        out = _decoder_layer(w, f"body.decoder.layers.{n}", out, memory, query, num_heads)
    out = out + _linear(w, "body.mlp_head.3", F.relu(_linear(w, "body.mlp_head.0", out)))  # (B, L, D)
    return F.fold(out.transpose(1, 2), size, patch_dim, stride=patch_dim), out


def _head(w: dict[str, torch.Tensor], prefix: str, x: torch.Tensor) -> torch.Tensor:
    x = _conv(w, f"{prefix}.0", x)
    for block in (1, 2):  # ResBlock: x + conv(relu(conv(x))), res_scale 1
        x = x + _conv(w, f"{prefix}.{block}.body.2", F.relu(_conv(w, f"{prefix}.{block}.body.0", x)))
    return x


def _tail(w: dict[str, torch.Tensor], prefix: str, x: torch.Tensor) -> torch.Tensor:
    stage = 0
    while f"{prefix}.0.{stage}.weight" in w:  # Upsampler stages at 0, 2, ...: conv to f^2 C, PixelShuffle(f)
        factor = math.isqrt(w[f"{prefix}.0.{stage}.weight"].shape[0] // x.shape[1])
        x = F.pixel_shuffle(_conv(w, f"{prefix}.0.{stage}", x), factor)
        stage += 2
    return _conv(w, f"{prefix}.1", x)


def official_geometry(state_dict: dict[str, torch.Tensor], task_index: int = 0) -> dict[str, int]:
    """What the state dict fixes: ``n_feats``, ``patch_dim``, ``patch_size`` (the only input side the body takes),
    ``num_tasks`` and the task's ``scale`` (the product of its Upsampler's factors; 1 without any)."""
    num_tasks = 0
    while f"head.{num_tasks}.0.weight" in state_dict:
        num_tasks += 1
    if not 0 <= task_index < num_tasks:
        raise ValueError(f"task_index must be in [0, {num_tasks}) for this state dict, got {task_index}")
    n_feats = state_dict[f"head.{task_index}.0.weight"].shape[0]
    dim = state_dict["body.linear_encoding.weight"].shape[0]
    patch_dim = math.isqrt(dim // n_feats)
    grid = math.isqrt(state_dict["body.position_encoding.pe.weight"].shape[0])
    scale, stage = 1, 0
    while f"tail.{task_index}.0.{stage}.weight" in state_dict:
        scale *= math.isqrt(state_dict[f"tail.{task_index}.0.{stage}.weight"].shape[0] // n_feats)
        stage += 2
    return {
        "n_feats": n_feats,
        "patch_dim": patch_dim,
        "patch_size": grid * patch_dim,
        "num_tasks": num_tasks,
        "scale": scale,
    }


def official_forward(
    state_dict: dict[str, torch.Tensor],
    x: torch.Tensor,
    task_index: int = 0,
    *,
    num_heads: int,
    patch_dim: int | None = None,
    con: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``ipt.forward`` after ``set_scale(task_index)``, in the input's dtype.

    Args:
        state_dict: official keys (``module.`` stripped); any float dtype, cast to ``x``'s.
        x: (B, 3, P, P) in [0, rgb_range] with P the checkpoint's ``patch_size`` (48 in the paper), the only size the
            official body accepts.
        task_index: the head, tail and query row to use (the official ``scale_idx``).
        num_heads: attention heads (12 in the paper); not recorded in the state dict.
        patch_dim: patch side (3 in the paper); None reads it from the shapes.
        con: also return the per-patch body features before the fold, (B, (P / patch_dim)^2, C * patch_dim^2), the
            official ``con_x`` that the contrastive loss uses.

    Returns:
        The (B, 3, scale * P, scale * P) restoration, or (it, con_x) when ``con``. Not clamped, as the original.
    """
    geometry = official_geometry(state_dict, task_index)
    patch_dim = patch_dim or geometry["patch_dim"]
    size = geometry["patch_size"]
    if x.ndim != 4 or x.shape[1] != 3 or tuple(x.shape[-2:]) != (size, size):
        raise ValueError(f"the official IPT takes (B, 3, {size}, {size}) inputs, got {tuple(x.shape)}")
    x = _conv(state_dict, "sub_mean", x)
    features = _head(state_dict, f"head.{task_index}", x)
    body, patches = _body(state_dict, features, task_index, patch_dim, num_heads)
    out = _conv(state_dict, "add_mean", _tail(state_dict, f"tail.{task_index}", body + features))
    return (out, patches) if con else out


# ---------------------------------------------------------------------------------------------------------------
# Model.forward_chop of model/__init__.py


def _axis_weights(count: int, stride: int, tile: int, margin: int | None = None) -> torch.Tensor:
    """(count, length) weights of ``count`` tiles of ``tile`` pixels at ``stride`` along one axis.

    margin None: 1 wherever a tile covers (a plain fold sum). Otherwise the official blend: each position in
    [margin, length - margin) is the mean of the tiles whose inner part [margin, tile - margin) covers it; the
    first and last ``margin`` positions keep the plain sum (there one tile alone covers them)."""
    length = (count - 1) * stride + tile
    position = torch.arange(length)
    start = torch.arange(count)[:, None] * stride
    covers = ((position >= start) & (position < start + tile)).double()
    if margin is None:
        return covers
    inner = ((position >= start + margin) & (position < start + tile - margin)).double()
    mean = inner / inner.sum(0).clamp(min=1)
    edge = (position < margin) | (position >= length - margin)
    return torch.where(edge, covers, mean)


def _blend(predictions: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, stride: int) -> torch.Tensor:
    """Sum of the tile predictions (B, ni, nj, C, T, T) at their places on a stride grid, tile (i, j) weighted by
    rows[i] x cols[j] (separable weights, (ni, Lr) and (nj, Lc)) -> (B, C, Lr, Lc)."""
    batch, ni, nj, channels, tile, _ = predictions.shape
    offsets = torch.arange(tile)
    local_rows = rows.gather(1, torch.arange(ni)[:, None] * stride + offsets)  # (ni, T): each tile's own rows
    local_cols = cols.gather(1, torch.arange(nj)[:, None] * stride + offsets)  # (nj, T)
    local = local_rows[:, None, :, None] * local_cols[None, :, None, :]  # (ni, nj, T, T)
    weighted = predictions * local[None, :, :, None].to(predictions.dtype)  # (B, ni, nj, C, T, T)
    blocks = weighted.permute(0, 3, 4, 5, 1, 2).reshape(batch, channels * tile * tile, ni * nj)  # row-major tiles
    return F.fold(blocks, (rows.shape[1], cols.shape[1]), tile, stride=stride)


def _tiles(x: torch.Tensor, size: int, stride: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, ni, nj, C, size, size): the size x size windows at multiples of ``stride`` that fit."""
    return x.unfold(2, size, stride).unfold(3, size, stride).permute(0, 2, 3, 1, 4, 5)


def _predict_tiles(predict: Callable, tiles: torch.Tensor, tile_batch_size: int) -> torch.Tensor:
    batch, ni, nj = tiles.shape[:3]
    flat = tiles.reshape(batch * ni * nj, *tiles.shape[3:])
    outputs = torch.cat([predict(chunk) for chunk in flat.split(tile_batch_size)])
    return outputs.view(batch, ni, nj, *outputs.shape[1:])


def _regular_region(predictions: torch.Tensor, stride: int, margin: int) -> torch.Tensor:
    """The part covered by the regular tile grid, assembled as the original does, in its order: the fold sum of
    every tile, overwritten by the top strip (tile row 0, blended along the columns), then by the left strip (tile
    column 0, blended along the rows; it wins over the top strip in their tile-sized corner), then, away from the
    outer ``margin``, by the blend of every tile along both axes."""
    _, ni, nj, _, tile, _ = predictions.shape
    single = torch.ones(1, tile, dtype=torch.float64)
    rows, cols = _axis_weights(ni, stride, tile, margin), _axis_weights(nj, stride, tile, margin)
    out = _blend(predictions, _axis_weights(ni, stride, tile), _axis_weights(nj, stride, tile), stride)
    out[..., :tile, :] = _blend(predictions[:, :1], single, cols, stride)
    out[..., :, :tile] = _blend(predictions[:, :, :1], rows, single, stride)
    inner = _blend(predictions, rows, cols, stride)
    out[..., margin:-margin, margin:-margin] = inner[..., margin:-margin, margin:-margin]
    return out


def _seam(overlap: int) -> tuple[int, int]:
    """Where the original joins the grid to the last strip that overlaps it by ``overlap`` output pixels: it drops
    the grid's last floor(overlap / 2) and the strip's first ceil(overlap / 2)."""
    return overlap // 2, (overlap + 1) // 2


def official_chop(
    predict: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    scale: int,
    patch_size: int,
    tile_batch_size: int = 64,
) -> torch.Tensor:
    """``Model.forward_chop`` for any ``predict``: (N, C, P, P) tiles -> (N, C', scale P, scale P).

    The algorithm, for an (h, w) image, P = patch_size (48 in the paper; h, w >= P) and r = scale:

    - shave = P // 2 (the official ``shave`` argument is overwritten with this; 24) and stride s = shave // 2 (12):
      the LR tiles are P x P windows at multiples of s, overlapping by 3/4 of their side. In output pixels the
      stride and the blend margin are both m = r * s and a tile is T = r * P.
    - The regular grid covers the top-left (h - h_cut, w - w_cut), h_cut = (h - P) mod s (same for w). Its output
      (r (h - h_cut), r (w - w_cut)) is assembled as in :func:`_regular_region`: a pixel at least m from the grid's
      top and left edges is the plain mean, over the tiles whose inner part (the tile without its outer m on every
      side, r * shave wide) covers it, of their predictions (1, 2 or 4 tiles at the paper's ratios); a pixel
      within m of the top or left edge blends along the other axis only, taking the first tile row / column's
      prediction along its own axis. In the top-left tile's top m rows, columns m..T-1 come from tile (0, 0) alone
      (the left strip, pasted after the top strip, overwrites them). The grid's bottom and right margins are
      discarded below.
    - The bottom strip (the P rows ending at h, tiles at the same column offsets), the right strip (the P columns
      ending at w, tiles at the same row offsets) and the bottom-right P x P corner are predicted separately; the
      strips are blended along their length as the grid is, the corner is one prediction.
    - The output rows are the grid's first r (h - h_cut) - floor(r (P - h_cut) / 2), then the bottom strip's rows
      from ceil(r (P - h_cut) / 2) on (a seam halfway through their overlap); columns likewise with w_cut, the
      right strip and the corner.

    No output pixel sums more than one tile without dividing: the kept parts are partitions of unity, so a
    translation-equivariant ``predict`` gives exactly its whole-image result. The original takes one image at a
    time (its reshape of the unfolded tiles is only valid for a batch of one: with more it hands the model 3B
    channels); here each image is chopped independently, so a batch gives what the original gives for each image.
    ``tile_batch_size`` (``--crop_batch_size``, 64) only splits the calls to ``predict``.
    """
    shave = patch_size // 2
    stride = shave // 2
    if shave % 2 or stride < 1:
        raise ValueError(f"patch_size // 2 must be even and >= 2 for the official chop to tile, got {patch_size}")
    height, width = x.shape[-2:]
    if height < patch_size or width < patch_size:
        raise ValueError(f"images must be at least {patch_size} x {patch_size}, got {height} x {width}")
    out_stride = scale * stride  # also the blend margin
    tile = scale * patch_size

    def predicted(part: torch.Tensor) -> torch.Tensor:  # (B, ni, nj, C, T, T)
        return _predict_tiles(predict, _tiles(part, patch_size, stride), tile_batch_size)

    def blended(count: int) -> torch.Tensor:
        return _axis_weights(count, out_stride, tile, out_stride)

    single = torch.ones(1, tile, dtype=torch.float64)
    bottom, right = x[..., height - patch_size :, :], x[..., width - patch_size :]
    grid = _regular_region(predicted(x), out_stride, out_stride)  # (B, C, r (h - h_cut), r (w - w_cut))
    bottom_strip = predicted(bottom)  # one tile row
    bottom_strip = _blend(bottom_strip, single, blended(bottom_strip.shape[2]), out_stride)  # (B, C, T, grid W)
    right_strip = predicted(right)  # one tile column
    right_strip = _blend(right_strip, blended(right_strip.shape[1]), single, out_stride)  # (B, C, grid H, T)
    corner = predicted(bottom[..., width - patch_size :])[:, 0, 0]  # (B, C, T, T)

    # seams halfway through the overlap of the grid and the last strip: (grid pixels dropped, strip pixels skipped)
    drop_h, skip_h = _seam(scale * (patch_size - (height - patch_size) % stride))
    drop_w, skip_w = _seam(scale * (patch_size - (width - patch_size) % stride))
    keep_h, keep_w = grid.shape[-2] - drop_h, grid.shape[-1] - drop_w
    upper = torch.cat((grid[..., :keep_h, :keep_w], right_strip[..., :keep_h, skip_w:]), dim=-1)
    lower = torch.cat((bottom_strip[..., skip_h:, :keep_w], corner[..., skip_h:, skip_w:]), dim=-1)
    return torch.cat((upper, lower), dim=-2)


def official_forward_chop(
    state_dict: dict[str, torch.Tensor],
    x: torch.Tensor,
    task_index: int = 0,
    *,
    num_heads: int,
    scale: int | None = None,
    patch_size: int | None = None,
    tile_batch_size: int = 64,
) -> torch.Tensor:
    """The official test-time inference (``Model.forward`` in eval mode without self-ensemble): :func:`official_chop`
    over :func:`official_forward`, for (B, 3, h, w) images in [0, rgb_range] with h, w >= patch_size. ``scale`` and
    ``patch_size`` default to what the state dict fixes and must agree with it when given."""
    geometry = official_geometry(state_dict, task_index)
    for name, value in (("scale", scale), ("patch_size", patch_size)):
        if value is not None and value != geometry[name]:
            raise ValueError(f"{name}={value} disagrees with the state dict's {geometry[name]}")

    def predict(tiles: torch.Tensor) -> torch.Tensor:
        return official_forward(state_dict, tiles, task_index, num_heads=num_heads)

    return official_chop(predict, x, geometry["scale"], geometry["patch_size"], tile_batch_size)
