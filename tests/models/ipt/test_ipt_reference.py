"""The functional reference of the official IPT (``hf_xcv.conversion.ipt_reference``), checked against an independent
module build of the published structure (``nn.MultiheadAttention(bias=False)``, ``nn.LayerNorm``, ``nn.Linear``,
``nn.Conv2d``, ``nn.PixelShuffle``, named as the official modules so that the official state dict loads strictly),
the official key layout and parameter counts at the paper's size, and the official tiled inference (forward_chop):
its one-tile case, its shapes on odd sizes, and which tiles each output pixel averages."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from hf_xcv.conversion.ipt_reference import (
    DIV2K_MEAN,
    mean_shift,
    official_chop,
    official_forward,
    official_forward_chop,
    official_geometry,
    official_shapes,
    official_state_dict,
    random_input,
    upsampler_factors,
)

TINY = dict(n_feats=8, patch_size=12, patch_dim=3, num_layers=2)
HEADS = 2
PRETRAIN_SCALES = (2, 3, 4, 1, 1, 1)  # x2, x3, x4, denoise 30, denoise 50, derain
TOL64 = 1e-12  # relative to the output's scale; float64 rounding measured ~1e-15


def _float64(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: value.double() if value.is_floating_point() else value for name, value in state_dict.items()}


# ---------------------------------------------------------------------------------------------------------------
# the published structure as torch modules, named like model/ipt.py and model/common.py


def _conv(inp: int, out: int, kernel: int) -> nn.Conv2d:
    return nn.Conv2d(inp, out, kernel, padding=kernel // 2)


class ResBlock(nn.Module):
    def __init__(self, n_feats: int):
        super().__init__()
        self.body = nn.Sequential(_conv(n_feats, n_feats, 5), nn.ReLU(), _conv(n_feats, n_feats, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads, bias=False)
        self.linear1, self.linear2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (L, B, D), nn.MultiheadAttention's sequence-first layout
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h)[0]
        return x + self.linear2(F.relu(self.linear1(self.norm2(x))))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads, bias=False)
        self.multihead_attn = nn.MultiheadAttention(dim, heads, bias=False)
        self.linear1, self.linear2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, query_pos: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.self_attn(h + query_pos, h + query_pos, h)[0]
        x = x + self.multihead_attn(self.norm2(x) + query_pos, memory, memory)[0]
        return x + self.linear2(F.relu(self.linear1(self.norm3(x))))


class Stack(nn.Module):
    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)


class PositionEncoding(nn.Module):
    def __init__(self, seq: int, dim: int):
        super().__init__()
        self.pe = nn.Embedding(seq, dim)
        self.register_buffer("position_ids", torch.arange(seq).view(1, seq))


class Body(nn.Module):
    def __init__(self, n_feats, patch_size, patch_dim, heads, num_layers, num_queries):
        super().__init__()
        dim, self.patch_dim, self.size = n_feats * patch_dim**2, patch_dim, patch_size
        seq = (patch_size // patch_dim) ** 2
        self.linear_encoding = nn.Linear(dim, dim)
        self.mlp_head = nn.Sequential(nn.Linear(dim, 4 * dim), nn.Dropout(0), nn.ReLU(), nn.Linear(4 * dim, dim))
        self.query_embed = nn.Embedding(num_queries, dim * seq)
        self.encoder = Stack([EncoderLayer(dim, heads) for _ in range(num_layers)])
        self.decoder = Stack([DecoderLayer(dim, heads) for _ in range(num_layers)])
        self.position_encoding = PositionEncoding(seq, dim)

    def forward(self, x: torch.Tensor, task: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = F.unfold(x, self.patch_dim, stride=self.patch_dim).permute(2, 0, 1)  # (L, B, D)
        tokens = tokens + self.linear_encoding(tokens)
        seq, _, dim = tokens.shape
        query_pos = self.query_embed.weight[task].view(seq, 1, dim)
        positions = self.position_encoding.pe(self.position_encoding.position_ids).transpose(0, 1)  # (L, 1, D)
        memory = tokens + positions
        for layer in self.encoder.layers:
            memory = layer(memory)
        out = memory
        for layer in self.decoder.layers:
            out = layer(out, memory, query_pos)
        patches = (out + self.mlp_head(out)).transpose(0, 1)  # (B, L, D)
        return F.fold(patches.transpose(1, 2), self.size, self.patch_dim, stride=self.patch_dim), patches


class OfficialIPT(nn.Module):
    def __init__(self, scales, n_feats, patch_size, patch_dim, num_layers, heads=HEADS, num_queries=None):
        super().__init__()
        self.sub_mean, self.add_mean = nn.Conv2d(3, 3, 1), nn.Conv2d(3, 3, 1)
        self.head = nn.ModuleList(
            nn.Sequential(_conv(3, n_feats, 3), ResBlock(n_feats), ResBlock(n_feats)) for _ in scales
        )
        queries = len(scales) if num_queries is None else num_queries
        self.body = Body(n_feats, patch_size, patch_dim, heads, num_layers, queries)
        self.tail = nn.ModuleList(self._tail(scale, n_feats) for scale in scales)

    @staticmethod
    def _tail(scale: int, n_feats: int) -> nn.Sequential:
        stages = []
        if scale == 3:
            stages = [_conv(n_feats, 9 * n_feats, 3), nn.PixelShuffle(3)]
        else:
            for _ in range(round(math.log2(scale))):
                stages += [_conv(n_feats, 4 * n_feats, 3), nn.PixelShuffle(2)]
        return nn.Sequential(nn.Sequential(*stages), _conv(n_feats, 3, 3))

    def forward(self, x: torch.Tensor, task: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.head[task](self.sub_mean(x))
        body, patches = self.body(features, task)
        return self.add_mean(self.tail[task](body + features)), patches


def _module(scales, out_proj_bias=False, **config) -> OfficialIPT:
    model = OfficialIPT(scales, **config)
    if out_proj_bias:
        for attention in (m for m in model.modules() if isinstance(m, nn.MultiheadAttention)):
            attention.out_proj.bias = nn.Parameter(torch.zeros(attention.embed_dim))
    return model


# ---------------------------------------------------------------------------------------------------------------
# layout


LAYOUTS = [((2,), False), ((3,), False), ((4,), False), ((1,), False), (PRETRAIN_SCALES, False), ((2,), True)]


@pytest.mark.parametrize(("scales", "out_proj_bias"), LAYOUTS)
def test_layout_is_the_module_structure(scales, out_proj_bias):
    model = _module(scales, out_proj_bias, **TINY)
    table = official_shapes(scales, out_proj_bias=out_proj_bias, **TINY)
    assert [(k, tuple(v.shape)) for k, v in model.state_dict().items()] == list(table.items())
    state_dict = official_state_dict(scales, num_heads=HEADS, out_proj_bias=out_proj_bias, **TINY)
    assert list(state_dict) == list(table)
    model.load_state_dict(state_dict, strict=True)


def test_mean_shift_is_exact():
    state_dict = official_state_dict()
    assert torch.equal(state_dict["sub_mean.weight"], torch.eye(3).view(3, 3, 1, 1))
    assert torch.equal(state_dict["add_mean.weight"], torch.eye(3).view(3, 3, 1, 1))
    mean = 255 * torch.tensor(DIV2K_MEAN)
    assert torch.equal(state_dict["sub_mean.bias"], -mean) and torch.equal(state_dict["add_mean.bias"], mean)
    assert torch.allclose(mean_shift(1.0, -1)[1], -torch.tensor([0.4488, 0.4371, 0.4040]))


def test_upsampler_factors():
    assert [upsampler_factors(s) for s in (1, 2, 3, 4, 8)] == [[], [2], [3], [2, 2], [2, 2, 2]]
    for bad in (0, 5, 6):
        with pytest.raises(ValueError, match="power of two or 3"):
            upsampler_factors(bad)


def _parameters(table: dict[str, tuple[int, ...]]) -> int:
    return sum(math.prod(shape) for name, shape in table.items() if not name.endswith("position_ids"))


PAPER = dict(n_feats=64, patch_size=48, patch_dim=3, num_layers=12)


@pytest.mark.parametrize(
    ("scales", "num_queries", "keys", "parameters", "millions"),
    [
        ((2,), 1, 315, 115_460_443, 115.46),
        ((3,), 1, 315, 115_645_083, 115.65),
        ((4,), 1, 317, 115_608_155, 115.61),
        ((1,), 1, 313, 115_312_731, 115.31),
        (PRETRAIN_SCALES, 6, 381, 118_892_394, 118.89),
    ],
)
def test_paper_size_counts(scales, num_queries, keys, parameters, millions):
    """Parameters = every float tensor of the state dict, the two frozen MeanShifts (24 numbers) included and the
    position_ids buffer excluded; the research notes' rounded counts are these."""
    table = official_shapes(scales, num_queries=num_queries, **PAPER)
    assert len(table) == keys
    assert _parameters(table) == parameters and round(parameters / 1e6, 2) == millions
    assert table["body.query_embed.weight"] == (num_queries, 576 * 256)
    assert table["body.encoder.layers.11.self_attn.in_proj_weight"] == (1728, 576)


def test_paper_size_layout_is_the_module_structure():
    with torch.device("meta"):
        model = OfficialIPT((2,), heads=12, **PAPER)
    table = official_shapes((2,), **PAPER)
    assert [(k, tuple(v.shape)) for k, v in model.state_dict().items()] == list(table.items())
    assert sum(p.numel() for p in model.parameters()) == 115_460_443
    body = sum(p.numel() for name, p in model.named_parameters() if name.startswith("body."))
    assert body == 114_899_328  # research notes: body 114.90M
    # PyTorch releases whose out_proj always had a bias: 36 attentions x (1 key, 576 numbers) more
    old = official_shapes((2,), out_proj_bias=True, **PAPER)
    assert len(old) == 315 + 36 and _parameters(old) == 115_460_443 + 36 * 576


# ---------------------------------------------------------------------------------------------------------------
# forward


FORWARD_CASES = [((2,), 0, False), ((3,), 0, False), ((4,), 0, False), ((1,), 0, False)]
FORWARD_CASES += [(PRETRAIN_SCALES, 2, False), (PRETRAIN_SCALES, 5, False), ((2,), 0, True)]


@pytest.mark.parametrize(("scales", "task", "out_proj_bias"), FORWARD_CASES)
def test_forward_matches_module(scales, task, out_proj_bias):
    state_dict = _float64(official_state_dict(scales, num_heads=HEADS, out_proj_bias=out_proj_bias, seed=3, **TINY))
    if out_proj_bias:  # nonzero, so that the check sees them
        for name in [n for n in state_dict if n.endswith("out_proj.bias")]:
            state_dict[name] = 0.1 * torch.randn(state_dict[name].shape, dtype=torch.float64)
    model = _module(scales, out_proj_bias, **TINY).double().eval()
    model.load_state_dict(state_dict, strict=True)
    x = random_input(2, 12, seed=task, dtype=torch.float64)
    with torch.no_grad():
        expected, expected_patches = model(x, task)
    out, patches = official_forward(state_dict, x, task, num_heads=HEADS, con=True)
    scale = scales[task]
    assert out.shape == (2, 3, 12 * scale, 12 * scale) and patches.shape == (2, 16, 72)
    assert (out - expected).abs().max() <= TOL64 * expected.abs().max()
    assert (patches - expected_patches).abs().max() <= TOL64 * expected_patches.abs().max()
    assert torch.equal(official_forward(state_dict, x, task, num_heads=HEADS), out)
    assert 10 < out.std() < 60  # well-conditioned: varies on the scale of the pixel range, far from constant


def test_forward_is_not_blind_to_the_task_or_the_body():
    state_dict = _float64(official_state_dict(PRETRAIN_SCALES, num_heads=HEADS, **TINY))
    x = random_input(1, 12, dtype=torch.float64)
    denoise30, denoise50 = (official_forward(state_dict, x, task, num_heads=HEADS) for task in (3, 4))
    assert (denoise30 - denoise50).abs().max() > 1.0
    changed = dict(state_dict)
    changed["body.query_embed.weight"] = state_dict["body.query_embed.weight"].flip(0)
    assert (official_forward(changed, x, 3, num_heads=HEADS) - denoise30).abs().max() > 0.1


def test_forward_rejects_other_sizes_and_tasks():
    state_dict = official_state_dict()
    with pytest.raises(ValueError, match=r"\(B, 3, 12, 12\)"):
        official_forward(state_dict, random_input(1, 13), num_heads=HEADS)
    with pytest.raises(ValueError, match="task_index"):
        official_forward(state_dict, random_input(1, 12), 1, num_heads=HEADS)
    assert official_geometry(official_state_dict(PRETRAIN_SCALES), 2) == dict(
        n_feats=8, patch_dim=3, patch_size=12, num_tasks=6, scale=4
    )


# ---------------------------------------------------------------------------------------------------------------
# forward_chop


def test_chop_of_one_tile_is_the_forward():
    state_dict = _float64(official_state_dict((3,)))
    x = random_input(2, 12, dtype=torch.float64)
    chopped = official_forward_chop(state_dict, x, num_heads=HEADS, scale=3, patch_size=12)
    assert torch.equal(chopped, official_forward(state_dict, x, num_heads=HEADS))


def test_chop_of_odd_sizes_is_per_image():
    state_dict = official_state_dict((2,))
    x = random_input(2, (30, 41), seed=1)
    chopped = official_forward_chop(state_dict, x, num_heads=HEADS, tile_batch_size=16)
    assert chopped.shape == (2, 3, 60, 82) and torch.isfinite(chopped).all()
    for i in range(2):
        alone = official_forward_chop(state_dict, x[i : i + 1], num_heads=HEADS)
        assert torch.allclose(chopped[i : i + 1], alone, rtol=0, atol=1e-4)


@pytest.mark.parametrize("scale", [1, 2, 3, 4])
@pytest.mark.parametrize("size", [(12, 12), (13, 20), (30, 41), (25, 12)])
def test_chop_weights_are_partitions_of_unity(scale, size):
    """With a translation-equivariant ``predict`` (a per-pixel map, then nearest upsampling) every tile agrees with
    every other on their overlaps, so the chop equals the whole-image prediction exactly where every kept output
    pixel is a weighted mean of tile predictions (weights summing to 1)."""
    mix = torch.randn(3, 3, 1, 1, dtype=torch.float64)

    def predict(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(F.conv2d(x, mix) ** 2, scale_factor=scale, mode="nearest")

    x = random_input(1, size, dtype=torch.float64)
    chopped = official_chop(predict, x, scale, 12, tile_batch_size=7)
    assert torch.allclose(chopped, predict(x), rtol=1e-13, atol=0)


def test_chop_averages_the_tiles_the_original_does():
    """Each tile predicts a constant map of its own origin (the input holds row / column indices and predict reads
    its top-left pixel), so an output pixel shows the mean origin of the tiles blended into it. Hand-derived for
    P = 12 (shave 6, stride 3, margin 3, inner part [3, 9) of a tile) on a 30 x 41 image: regular grid 30 x 39
    (w_cut = 2) with tiles at rows 0..18 and columns 0..27 step 3; bottom strip at row 18 (seam: grid rows < 24),
    right strip at column 29 (seam: grid columns < 34)."""
    rows, cols = torch.meshgrid(torch.arange(30.0), torch.arange(41.0), indexing="ij")
    x = torch.stack((rows, cols, torch.zeros_like(rows)))[None].double()

    def predict(tiles: torch.Tensor) -> torch.Tensor:
        return tiles[:, :, :1, :1].expand(-1, -1, 12, 12)

    out = official_chop(predict, x, 1, 12)
    expected = {
        (10, 10): (4.5, 4.5),  # interior: inner parts of tiles 3 and 6 on both axes
        (4, 10): (0.0, 4.5),  # row 4: only tile row 0's inner part [3, 9) covers it
        (1, 20): (0.0, 13.5),  # top margin: tile row 0 alone, columns blended (tiles 12 and 15)
        (10, 1): (4.5, 0.0),  # left margin: tile column 0 alone, rows blended
        (1, 7): (0.0, 0.0),  # top margin within the first tile: the left strip pasted last, tile (0, 0) alone
        (23, 10): (16.5, 4.5),  # last grid row kept: tiles at rows 15 and 18
        (27, 10): (18.0, 4.5),  # bottom strip (tiles at row 18), columns blended
        (10, 33): (4.5, 27.0),  # last grid column kept: only the inner part of the tile at column 27
        (10, 36): (4.5, 29.0),  # right strip (tiles at column 29), rows blended
        (1, 36): (0.0, 29.0),  # right strip's top margin: its first tile alone
        (28, 38): (18.0, 29.0),  # bottom-right corner tile
        (0, 0): (0.0, 0.0),
    }
    for (row, col), origin in expected.items():
        assert tuple(out[0, :2, row, col].tolist()) == origin, (row, col)


def test_chop_rejects_what_the_original_cannot_tile():
    state_dict = official_state_dict((2,))
    with pytest.raises(ValueError, match="at least 12 x 12"):
        official_forward_chop(state_dict, random_input(1, (11, 30)), num_heads=HEADS)
    with pytest.raises(ValueError, match="scale=4 disagrees"):
        official_forward_chop(state_dict, random_input(1, 12), num_heads=HEADS, scale=4)
    with pytest.raises(ValueError, match="must be even"):
        official_chop(lambda t: t, random_input(1, 12), 1, 6)


def test_random_input():
    x = random_input(2, (5, 7), rgb_range=1, seed=4)
    assert x.shape == (2, 3, 5, 7) and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
    assert torch.equal(x, random_input(2, (5, 7), rgb_range=1, seed=4))
