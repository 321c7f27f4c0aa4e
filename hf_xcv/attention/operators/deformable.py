"""Multi-scale deformable attention (Zhu et al. 2020, "Deformable DETR"), in pure PyTorch.

Each query looks at ``n_points`` sampled locations around its reference point on every level of a feature
pyramid, and sums the bilinearly interpolated values with softmax weights over all levels and points. It is
attention, but not a q/k/v core (there are no keys: the query predicts where to look and how much each place
counts), so it has its own interface rather than a registry entry:

``multi_scale_deformable_attention(value, spatial_shapes, sampling_locations, attention_weights)``
    value (B, N, heads, D): the flattened levels one after another (level l holds ``h_l * w_l`` rows, row-major);
    spatial_shapes: ``[(h_0, w_0), ...]`` (Python ints, or a (L, 2) tensor); sampling_locations
    (B, Q, heads, L, P, 2): (x, y) in [0, 1] of each level's map (``align_corners=False`` convention: 0 and 1
    are the outer edges of the border pixels; outside samples read zeros); attention_weights (B, Q, heads, L, P).
    Returns (B, Q, heads * D).

:class:`MultiScaleDeformableAttention` is the module around it (the original's ``MSDeformAttn``): offsets and
weights predicted from the query, reference points as (x, y) points or (cx, cy, w, h) boxes, padded pixels
zeroed in the value, and the original's initialisation.

How the operator is computed. The reference formulation (:func:`multi_scale_deformable_attention_reference`,
the original's "for debug and test only" PyTorch path and transformers' default) calls ``grid_sample`` per
level, stacks the (B*heads, D, Q, L*P) samples and multiplies them by the weights; its backward is dominated by
``grid_sample``'s scatter and the copies of those stacked samples. The default path never materialises samples:

- each level is zero-padded by one pixel on every side (to a common padded width), so that all four bilinear
  corners of a point with any corner inside the map are valid rows of one table, and the corners sit at fixed
  row offsets from the top-left one (0, 1, W, W+1: the table narrowed by that offset is the corner's table);
- the forward is four ``embedding_bag`` sums (one per corner) of the table rows at the top-left corners, with
  per-sample weights ``attention * bilinear``;
- the backward gives the weights' gradients from the sampled dot products ``<value row, output gradient>``
  (``torch.sparse.sampled_addmm``, no gathered copy) and the value's gradient as the transposed sum: the points
  are sorted once by their top-left row and four ``embedding_bag`` sums over the sorted points accumulate the
  output gradient into each corner's rows.

It equals the reference to float64 rounding, including points outside the map and padded regions (tests), runs
on CPU and CUDA, and needs no compiled extension. Under ``torch.compile`` the reference formulation is traced
instead (the compiler fuses it; it does not trace sparse tensors).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

Shapes = tuple[tuple[int, int], ...]


def spatial_shapes_tuple(spatial_shapes: torch.Tensor | Sequence[Sequence[int]]) -> Shapes:
    """``[(h, w), ...]`` as a tuple of int pairs (a (L, 2) tensor is read once, on the host)."""
    if isinstance(spatial_shapes, torch.Tensor):
        spatial_shapes = spatial_shapes.tolist()
    shapes = tuple((int(h), int(w)) for h, w in spatial_shapes)
    if not shapes or any(h < 1 or w < 1 for h, w in shapes):
        raise ValueError(f"spatial_shapes must be one (height, width) >= 1 per level, got {shapes}")
    return shapes


def level_start_index(spatial_shapes: Sequence[Sequence[int]]) -> list[int]:
    """Row of each level's first pixel in the flattened value: 0, h_0*w_0, h_0*w_0 + h_1*w_1, ..."""
    starts, total = [], 0
    for h, w in spatial_shapes:
        starts.append(total)
        total += h * w
    return starts


def _check_operands(value: torch.Tensor, shapes: Shapes, locations: torch.Tensor, weights: torch.Tensor) -> None:
    if value.dim() != 4:
        raise ValueError(f"value must be (batch, rows, heads, head_dim), got {tuple(value.shape)}")
    batch, rows, heads, _ = value.shape
    if rows != sum(h * w for h, w in shapes):
        raise ValueError(
            f"value has {rows} rows but spatial_shapes {list(shapes)} hold {sum(h * w for h, w in shapes)}"
        )
    if locations.dim() != 6 or locations.shape[-1] != 2 or locations.shape[3] != len(shapes):
        raise ValueError(
            f"sampling_locations must be (batch, queries, heads, {len(shapes)} levels, points, 2), "
            f"got {tuple(locations.shape)}"
        )
    if (locations.shape[0], locations.shape[2]) != (batch, heads):
        raise ValueError(f"sampling_locations {tuple(locations.shape)} do not match value {tuple(value.shape)}")
    if tuple(weights.shape) != tuple(locations.shape[:-1]):
        raise ValueError(
            f"attention_weights must be {tuple(locations.shape[:-1])} (one per sampling location), "
            f"got {tuple(weights.shape)}"
        )


def multi_scale_deformable_attention_reference(
    value: torch.Tensor,
    spatial_shapes: torch.Tensor | Sequence[Sequence[int]],
    sampling_locations: torch.Tensor,
    attention_weights: torch.Tensor,
) -> torch.Tensor:
    """The grid-sample formulation (the original's PyTorch path): per level ``grid_sample(bilinear, zeros,
    align_corners=False)`` of the (B*heads, D, h, w) map at the level's locations, weighted and summed."""
    shapes = spatial_shapes_tuple(spatial_shapes)
    _check_operands(value, shapes, sampling_locations, attention_weights)
    batch, _, heads, dim = value.shape
    queries, points = sampling_locations.shape[1], sampling_locations.shape[4]
    grids = 2 * sampling_locations - 1  # grid_sample's [-1, 1]
    levels = value.split([h * w for h, w in shapes], dim=1)
    total = None
    for index, (h, w) in enumerate(shapes):
        level = levels[index].permute(0, 2, 3, 1).reshape(batch * heads, dim, h, w)
        grid = grids[:, :, :, index].transpose(1, 2).flatten(0, 1)  # (B*heads, Q, P, 2)
        sampled = F.grid_sample(level, grid.to(level.dtype), mode="bilinear", padding_mode="zeros", align_corners=False)
        weight = attention_weights[:, :, :, index].transpose(1, 2).reshape(batch * heads, 1, queries, points)
        part = (sampled * weight.to(sampled.dtype)).sum(-1)  # (B*heads, D, Q)
        total = part if total is None else total + part
    return total.view(batch, heads, dim, queries).permute(0, 3, 1, 2).reshape(batch, queries, heads * dim)


# ----------------------------------------------------------------------------------------------------------
# the gather formulation
# ----------------------------------------------------------------------------------------------------------


class _Layout:
    """Where each level sits in the zero-padded table: level l is a (h_l + 2, W) block (W = widest level + 2)
    starting at padded cell ``starts[l]``, its pixel (y, x) at cell ``starts[l] + (y + 1) * W + (x + 1)``."""

    def __init__(self, shapes: Shapes):
        self.shapes = shapes
        self.width = max(w for _, w in shapes) + 2
        self.heights = [h + 2 for h, _ in shapes]
        self.starts = level_start_index([(h, self.width) for h in self.heights])
        self.cells = sum(self.heights) * self.width

    def corner_offsets(self, heads: int) -> tuple[int, int, int, int]:
        """Table-row offsets of the (y, x), (y, x+1), (y+1, x), (y+1, x+1) corners from the top-left one."""
        return (0, heads, self.width * heads, (self.width + 1) * heads)

    def pad(self, value: torch.Tensor) -> torch.Tensor:
        """(B, N, heads, D) -> (B, cells, heads, D) with a zero border around every level."""
        batch, _, heads, dim = value.shape
        padded = value.new_zeros(batch, self.cells, heads, dim)
        offset = 0
        for (h, w), start, height in zip(self.shapes, self.starts, self.heights):
            block = padded[:, start : start + height * self.width].view(batch, height, self.width, heads, dim)
            block[:, 1 : h + 1, 1 : w + 1] = value[:, offset : offset + h * w].view(batch, h, w, heads, dim)
            offset += h * w
        return padded

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`pad`: the levels' pixels, flattened again."""
        batch, _, heads, dim = padded.shape
        parts = []
        for (h, w), start, height in zip(self.shapes, self.starts, self.heights):
            block = padded[:, start : start + height * self.width].view(batch, height, self.width, heads, dim)
            parts.append(block[:, 1 : h + 1, 1 : w + 1].reshape(batch, h * w, heads, dim))
        return torch.cat(parts, dim=1)

    def geometry(self, locations: torch.Tensor, weights: torch.Tensor, heads: int) -> tuple[torch.Tensor, ...]:
        """Top-left table rows (B*Q*heads, L*P), the four corner weights ``attention * bilinear`` (same shape
        each), the fractional parts (fx, fy) and the inside mask (points with at least one corner on the map;
        the others read nothing)."""
        batch, queries, _, levels, points, _ = locations.shape
        device, dtype = locations.device, locations.dtype
        size = torch.tensor(self.shapes, device=device, dtype=dtype)  # (L, 2): h, w
        height, width = size[:, 0].view(levels, 1), size[:, 1].view(levels, 1)
        x = locations[..., 0] * width - 0.5  # pixel coordinates, centres at integers
        y = locations[..., 1] * height - 0.5
        x0, y0 = x.floor(), y.floor()
        fx, fy = x - x0, y - y0
        inside = (x0 >= -1) & (x0 <= width - 1) & (y0 >= -1) & (y0 <= height - 1)
        exact = dtype if self.cells < 2**24 or dtype == torch.float64 else torch.float64  # integers held exactly
        start = torch.tensor(self.starts, device=device, dtype=exact).view(levels, 1)
        row = (y0 + 1).clamp(0).minimum(height).to(exact)
        cell = start + row * self.width + (x0 + 1).clamp(0).minimum(width).to(exact)
        rows_per_image = self.cells * heads
        head = torch.arange(heads, device=device).view(1, 1, heads, 1, 1)
        image = torch.arange(batch, device=device).view(batch, 1, 1, 1, 1) * rows_per_image
        rows = (cell.long() * heads + head + image).view(batch * queries * heads, levels * points)
        a = weights * inside
        a_y1 = a * fy
        a_y0 = a - a_y1
        corner_weights = torch.empty((4, *a.shape), dtype=a.dtype, device=device)  # one tensor: one gather later
        torch.mul(a_y0, fx, out=corner_weights[1])
        torch.sub(a_y0, corner_weights[1], out=corner_weights[0])
        torch.mul(a_y1, fx, out=corner_weights[3])
        torch.sub(a_y1, corner_weights[3], out=corner_weights[2])
        return rows, corner_weights, fx, fy, inside

    def sample(self, table: torch.Tensor, rows: torch.Tensor, corner_weights: Sequence[torch.Tensor], heads: int):
        """Sum over corners of ``embedding_bag(rows + offset, table, weights)``: (B*Q*heads, D)."""
        total = None
        for offset, weight in zip(self.corner_offsets(heads), corner_weights):
            corner_table = table.narrow(0, offset, table.shape[0] - offset)
            part = F.embedding_bag(
                rows, corner_table, per_sample_weights=weight.reshape(rows.shape).to(table.dtype), mode="sum"
            )
            total = part if total is None else total.add_(part)
        return total

    def attend(self, value: torch.Tensor, locations: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The forward: (B, Q, heads * D), and what the backward needs (the table, the rows, the fractional
        parts, the inside mask and the corner weights)."""
        batch, _, heads, dim = value.shape
        table = self.pad(value).view(-1, dim)
        rows, corner_weights, fx, fy, inside = self.geometry(locations, weights, heads)
        output = self.sample(table, rows, corner_weights, heads).view(batch, locations.shape[1], heads * dim)
        return output, table, rows, fx, fy, inside, corner_weights


class _DeformableSampling(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, locations, weights, layout):
        output, table, rows, fx, fy, inside, corner_weights = layout.attend(value, locations, weights)
        ctx.layout, ctx.value_shape = layout, value.shape
        ctx.save_for_backward(table, rows, fx, fy, inside, weights, corner_weights)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        table, rows, fx, fy, inside, weights, corner_weights = ctx.saved_tensors
        layout: _Layout = ctx.layout
        batch, _, heads, dim = ctx.value_shape
        bags, samples = rows.shape
        grad = grad_output.reshape(bags, dim).to(table.dtype).contiguous()  # (an expanded gradient: x2 slower)
        offsets = layout.corner_offsets(heads)
        grad_value = grad_locations = grad_weights = None
        need_value, need_locations, need_weights = ctx.needs_input_grad[:3]
        if need_locations or need_weights:
            # <table row of each corner, output gradient of its query>, without gathering the rows.
            index_dtype = torch.int32 if table.shape[0] < 2**31 else torch.int64
            crow = torch.arange(0, bags * samples + 1, samples, device=grad.device, dtype=index_dtype)
            col = rows.view(-1).to(index_dtype)
            zeros = grad.new_zeros(bags * samples)
            dots = []
            for offset in offsets:
                corner_table = table.narrow(0, offset, table.shape[0] - offset)
                with warnings.catch_warnings():  # "sparse CSR support is in beta": a warning per process
                    warnings.simplefilter("ignore", UserWarning)
                    pattern = torch.sparse_csr_tensor(
                        crow, col, zeros, size=(bags, corner_table.shape[0]), check_invariants=False
                    )
                dots.append(torch.sparse.sampled_addmm(pattern, grad, corner_table.t()).values().view(fx.shape))
            d00, d01, d10, d11 = (d.to(fx.dtype) for d in dots)
            if need_weights:
                top = d00 + fx * (d01 - d00)
                bottom = d10 + fx * (d11 - d10)
                grad_weights = (top + fy * (bottom - top)) * inside
            if need_locations:
                a = weights * inside
                size = torch.tensor(layout.shapes, device=fx.device, dtype=fx.dtype)
                levels = size.shape[0]
                cross = d11 - d10 - d01 + d00
                grad_x = (d01 - d00 + fy * cross) * a * size[:, 1].view(levels, 1)
                grad_y = (d10 - d00 + fx * cross) * a * size[:, 0].view(levels, 1)
                grad_locations = torch.stack((grad_x, grad_y), dim=-1)
        if need_value:
            # The transposed sum: points sorted by their top-left row, each corner's weighted output gradients
            # summed per row (embedding_bag over the sorted points) and added at the corner's offset.
            keys = rows.view(-1)
            order = torch.argsort(keys.int() if table.shape[0] < 2**31 else keys)
            counts = torch.bincount(keys, minlength=table.shape[0])
            starts = torch.cumsum(counts, 0) - counts
            bag_of_point = torch.div(order, samples, rounding_mode="floor")
            sorted_weights = corner_weights.view(4, -1)[:, order].to(grad.dtype)  # (4, points), in one gather
            grad_table = torch.zeros_like(table)
            for offset, weight in zip(offsets, sorted_weights):
                summed = F.embedding_bag(bag_of_point, grad, starts, per_sample_weights=weight, mode="sum")
                grad_table[offset:].add_(summed[: table.shape[0] - offset])
            grad_value = layout.unpad(grad_table.view(batch, -1, heads, dim))
        return grad_value, grad_locations, grad_weights, None


def multi_scale_deformable_attention(
    value: torch.Tensor,
    spatial_shapes: torch.Tensor | Sequence[Sequence[int]],
    sampling_locations: torch.Tensor,
    attention_weights: torch.Tensor,
) -> torch.Tensor:
    """The deformable attention operator (see the module docstring for the shapes): the gather formulation,
    or the grid-sample one under ``torch.compile``. Sampling geometry is computed in the locations' dtype
    (float32 or float64); the sums in the value's."""
    shapes = spatial_shapes_tuple(spatial_shapes)
    if torch.compiler.is_compiling():
        return multi_scale_deformable_attention_reference(value, shapes, sampling_locations, attention_weights)
    _check_operands(value, shapes, sampling_locations, attention_weights)
    layout = _Layout(shapes)
    if torch.is_grad_enabled() and (
        value.requires_grad or sampling_locations.requires_grad or attention_weights.requires_grad
    ):
        return _DeformableSampling.apply(value, sampling_locations, attention_weights, layout)
    return layout.attend(value, sampling_locations, attention_weights)[0]


# ----------------------------------------------------------------------------------------------------------
# the module
# ----------------------------------------------------------------------------------------------------------


class MultiScaleDeformableAttention(nn.Module):
    """Deformable attention over a multi-level feature map (the original's ``MSDeformAttn``).

    ``sampling_offsets`` (Linear d -> heads*levels*points*2) and ``attention_weights`` (Linear d ->
    heads*levels*points, softmax over levels x points per head) are predicted from the query; ``value_proj``
    and ``output_proj`` are the usual value and output projections.

    Args:
        d_model: width of queries and values; n_levels, n_heads, n_points: the pyramid's levels, heads and
            sampling points per head and level (the original: 4, 8, 4).
    """

    def __init__(self, d_model: int = 256, n_levels: int = 4, n_heads: int = 8, n_points: int = 4):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
        self.d_model, self.n_levels, self.n_heads, self.n_points = d_model, n_levels, n_heads, n_points
        self.sampling_offsets = nn.Linear(d_model, n_heads * n_levels * n_points * 2)
        self.attention_weights = nn.Linear(d_model, n_heads * n_levels * n_points)
        self.value_proj = nn.Linear(d_model, d_model)
        self.output_proj = nn.Linear(d_model, d_model)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The original initialisation: offsets start on 8 (per head) unit directions, the k-th point k times
        further out (weights zero, so every query starts with the same pattern); attention weights zero
        (uniform over levels and points); Xavier-uniform value and output projections with zero biases. Through
        transformers' init functions, which leave tensors loaded from a checkpoint alone."""
        from transformers import initialization as init

        init.zeros_(self.sampling_offsets.weight)
        bias = self.sampling_offsets.bias
        init.copy_(bias, deformable_offset_bias(self.n_heads, self.n_levels, self.n_points, bias.dtype).to(bias.device))
        init.zeros_(self.attention_weights.weight)
        init.zeros_(self.attention_weights.bias)
        for layer in (self.value_proj, self.output_proj):
            init.xavier_uniform_(layer.weight)
            init.zeros_(layer.bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        reference_points: torch.Tensor,
        value: torch.Tensor,
        spatial_shapes: torch.Tensor | Sequence[Sequence[int]],
        valid_ratios: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        position_embeddings: torch.Tensor | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""
        hidden_states (B, Q, d): the queries; ``position_embeddings`` (B, Q, d), when given, are added to them
            (offsets and weights are predicted from ``hidden_states + position_embeddings``).
        reference_points: (B, Q, 2) points (x, y) or (B, Q, 4) boxes (cx, cy, w, h), normalised to the valid
            (unpadded) part of the image, scaled onto each level by ``valid_ratios`` (B, L, 2) (the valid fraction
            (w, h) of each level's map; None: no padding); or already per level, (B, Q, L, 2|4), used as given.
            Points sample at ``reference + offset / (w_l, h_l)``; boxes at ``centre + offset / n_points * size / 2``.
        value (B, N, d): the flattened levels (``spatial_shapes`` [(h, w), ...]); ``padding_mask`` (B, N), True at
            padded pixels, zeroes them in the value.

        Returns the output (B, Q, d) and, when ``output_attentions``, the attention weights (B, Q, heads, L, P),
        summing to 1 over levels and points together: transformers' layout, the very tensor the sampling reads.
        """
        shapes = spatial_shapes_tuple(spatial_shapes)
        batch, queries, _ = hidden_states.shape
        heads, levels, points = self.n_heads, self.n_levels, self.n_points
        if len(shapes) != levels:
            raise ValueError(f"this attention reads {levels} levels, got spatial_shapes for {len(shapes)}")
        values = self.value_proj(value)
        if padding_mask is not None:
            values = values.masked_fill(padding_mask[..., None], 0.0)
        values = values.view(batch, value.shape[1], heads, self.d_model // heads)
        query = hidden_states if position_embeddings is None else hidden_states + position_embeddings
        offsets = self.sampling_offsets(query).view(batch, queries, heads, levels, points, 2)
        weights = self.attention_weights(query).view(batch, queries, heads, levels * points)
        geometry = torch.promote_types(query.dtype, torch.float32)  # locations and softmax in float32 at least
        weights = weights.to(geometry).softmax(-1)  # (B, Q, heads, L * P)
        weights = weights.unflatten(-1, (levels, points))  # (B, Q, heads, L, P)
        # The map returned is the one the sampling reads, so it is on the autograd graph (attribution reads it).
        maps = weights if output_attentions else None
        reference = per_level_reference_points(reference_points, valid_ratios, levels).to(geometry)  # (B, Q, L, 2|4)
        offsets = offsets.to(geometry)
        if reference.shape[-1] == 2:
            size = torch.tensor([[w, h] for h, w in shapes], dtype=offsets.dtype, device=offsets.device)
            locations = reference[:, :, None, :, None, :] + offsets / size[None, None, None, :, None, :]
        elif reference.shape[-1] == 4:
            centre, extent = reference[:, :, None, :, None, :2], reference[:, :, None, :, None, 2:]
            locations = centre + offsets / points * extent * 0.5
        else:
            raise ValueError(f"reference_points must end in 2 (x, y) or 4 (cx, cy, w, h), got {tuple(reference.shape)}")
        output = multi_scale_deformable_attention(values, shapes, locations, weights)
        output = self.output_proj(output.to(values.dtype))
        return output, maps


def per_level_reference_points(reference: torch.Tensor, valid_ratios: torch.Tensor | None, levels: int) -> torch.Tensor:
    """(B, Q, 2|4) references in unpadded-image coordinates -> (B, Q, L, 2|4) on each level's padded map (x, y
    and w, h scaled by the level's valid ratios); (B, Q, L, 2|4) are returned as given."""
    if reference.dim() == 4:
        if reference.shape[2] != levels:
            raise ValueError(f"per-level reference_points must have {levels} levels, got {tuple(reference.shape)}")
        return reference
    if reference.dim() != 3:
        raise ValueError(f"reference_points must be (batch, queries, 2|4) or per level, got {tuple(reference.shape)}")
    if valid_ratios is None:
        return reference[:, :, None].expand(-1, -1, levels, -1)
    ratios = valid_ratios if reference.shape[-1] == 2 else torch.cat([valid_ratios, valid_ratios], dim=-1)
    return reference[:, :, None] * ratios[:, None]


def deformable_offset_bias(heads: int, levels: int, points: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The original's sampling-offset bias: head h points along the angle 2*pi*h/heads, scaled so the larger of
    |cos|, |sin| is 1, and point k at (k + 1) times that, the same on every level; flattened as
    (heads, levels, points, 2)."""
    angles = torch.arange(heads, dtype=torch.float64) * (2.0 * math.pi / heads)
    grid = torch.stack([angles.cos(), angles.sin()], -1)
    grid = grid / grid.abs().max(-1, keepdim=True).values
    grid = grid.view(heads, 1, 1, 2).repeat(1, levels, points, 1)
    grid = grid * torch.arange(1, points + 1, dtype=torch.float64).view(1, 1, points, 1)
    return grid.flatten().to(dtype)
