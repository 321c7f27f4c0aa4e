"""``bigbird``: BigBird's block-sparse attention (Zaheer et al. 2020), the ITC variant.

The tokens after the prefix are cut into blocks of ``block_size`` b (the last one padded). Query block m
attends, under one softmax, to

* the window: blocks m - 1, m, m + 1;
* the global blocks: the first and the last block, which also attend to every key;
* ``num_random_blocks`` r random blocks, drawn per head and per query block among the blocks that are
  neither in its window nor global (fewer when fewer are left: short sequences).

Prefix tokens (ViT's [CLS]) are global too: they attend to every key and every query attends to them. A key
that two of these sets share is counted once (global first, then window, then random: the random draw
already excludes the others).

Randomness: the random blocks are drawn on every call, on the CPU, from a ``torch.Generator`` seeded with
the persistent buffer ``random_seed``: the ``seed`` kwarg, or, when it is None, a number drawn from torch's
global generator at construction. So the pattern is fixed for a given model and sequence length (as in
google-research/bigbird, where it is drawn once per layer), differs from layer to layer unless a seed is
given, is saved with the model's state dict, and is the same in training and evaluation (transformers
redraws it in training and uses block 0 for every random block in evaluation). :meth:`random_blocks` shows
it for a number of blocks.

Cost: O(L (3 + 2 + r) b) scores plus O(2 b L) for the global rows: linear in L for a fixed block size.
Not supported: causal attention (BigBird's pattern has no causal form; the paper's decoders use full
attention) and the ETC variant's extra global tokens (use ``prefix_tokens`` or the ``etc`` entry).
"""

from __future__ import annotations

from typing import Any

import torch

from ..utils.checks import check_int
from ._patterns import KeySet, SparsePattern, SparsePatternAttention, make_pattern
from ._positions import block_positions, neighbour_positions, positions_after_prefix, shift_body, with_prefix
from .registry import Capabilities, register_attention


@register_attention
class BigBirdAttention(SparsePatternAttention):
    """BigBird block-sparse attention (window + global + random blocks); see the module docstring.

    Args:
        block_size: b, tokens per block (paper and transformers: 64).
        num_random_blocks: r, random key blocks per query block and head (paper and transformers: 3).
        seed: seeds the random blocks; None draws one at construction from torch's generator. Either way it
            is kept in the ``random_seed`` buffer.

    Exact: ``block_size >= length`` (one block, which is global).
    """

    name = "bigbird"
    capabilities = Capabilities(
        padding_mask=True,
        returns_weights=True,
        attention_bias=True,
        length_constraint="self-attention (kv_len == q_len); any length, padded internally to a multiple of block_size",
    )
    small_kwargs = {"block_size": 2, "num_random_blocks": 1}

    def __init__(
        self, num_heads: int, head_dim: int, block_size: int = 64, num_random_blocks: int = 3, seed: int | None = None
    ):
        super().__init__(num_heads, head_dim)
        self.block_size = check_int("block_size", block_size, 1, owner=self.owner)
        self.num_random_blocks = check_int("num_random_blocks", num_random_blocks, 0, owner=self.owner)
        if seed is None:
            # On the CPU explicitly: models may be built under a meta-device context (from_pretrained).
            seed = int(torch.randint(0, 2**62, (), device="cpu"))
        check_int("seed", seed, 0, owner=self.owner)
        self.register_buffer("random_seed", torch.tensor(seed, dtype=torch.long))

    @classmethod
    def exact_kwargs(cls, length: int, grid: tuple[int, int] | None = None) -> dict[str, Any]:
        return {"block_size": max(1, length), "num_random_blocks": 0}

    def random_blocks(self, num_blocks: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The random key blocks of every head and query block for a sequence of ``num_blocks`` blocks.

        Returns ``blocks`` (H, N, r) long and ``valid`` (H, N, r) bool: False where fewer than r blocks were
        left to draw from, and for the two global query blocks (which see everything anyway).
        """
        generator = torch.Generator().manual_seed(int(self.random_seed))
        scores = torch.rand(self.num_heads, num_blocks, num_blocks, generator=generator)  # (H, N, N) in [0, 1)
        block = torch.arange(num_blocks)
        row, column = block[:, None], block[None, :]
        global_block = (column == 0) | (column == num_blocks - 1)
        forbidden = ((row - column).abs() <= 1) | global_block | (row == 0) | (row == num_blocks - 1)
        # The r highest scores among the allowed blocks: r distinct blocks, uniformly at random.
        values, blocks = scores.masked_fill(forbidden, -1.0).topk(min(self.num_random_blocks, num_blocks), dim=-1)
        return blocks.to(device), (values >= 0).to(device)

    def global_positions(self, length: int, prefix_tokens: int, device) -> torch.Tensor:
        """(R,) sorted positions of the prefix tokens and of the first and last block after them."""
        body, block = length - prefix_tokens, self.block_size
        first_end = prefix_tokens + min(block, body)  # the prefix and the first block
        last_start = prefix_tokens + max((-(-body // block) - 1) * block, min(block, body))  # the last block
        return torch.cat([torch.arange(first_end, device=device), torch.arange(last_start, length, device=device)])

    def pattern(self, length: int, causal: bool, prefix_tokens: int, device) -> SparsePattern:
        body, block = length - prefix_tokens, self.block_size
        blocks = -(-body // block)
        global_positions = self.global_positions(length, prefix_tokens, device)
        queries = block_positions(blocks, block, device)  # (N, b)
        window = neighbour_positions(blocks, block, 1, 1, device)  # (N, 3b)
        picks, valid = self.random_blocks(blocks, device)  # (H, N, r)
        random = picks[..., None] * block + torch.arange(block, device=device)  # (H, N, r, b)
        random = torch.where(valid[..., None], random, -1).flatten(2)  # (H, N, r*b)
        anything = torch.ones(1, 1, 1, dtype=torch.bool, device=device)
        key_sets = [
            KeySet(shift_body(window, body, prefix_tokens), anything),
            KeySet(shift_body(random, body, prefix_tokens), anything[None]),  # per head
        ]
        return make_pattern(queries + prefix_tokens, key_sets, global_positions, length, False)

    def dense_mask(self, q, k, causal=False, grid=None, prefix_tokens=0) -> torch.Tensor:
        if causal:
            raise ValueError(f"attention_type={self.name!r} does not support causal (autoregressive) masking")
        length = q.shape[2]
        i, j = positions_after_prefix(length, prefix_tokens, q.device)
        blocks = -(-(length - prefix_tokens) // self.block_size)
        row = torch.div(i, self.block_size, rounding_mode="floor")  # (L, 1) query block (< 0: prefix)
        column = torch.div(j, self.block_size, rounding_mode="floor")  # (1, L) key block
        picks, valid = self.random_blocks(blocks, q.device)
        chosen = torch.zeros(self.num_heads, blocks + 1, blocks + 1, dtype=torch.bool, device=q.device)
        chosen[:, :blocks, :blocks].scatter_(2, picks, valid)  # chosen[h, m, n]: query block m sees key block n
        random = chosen[:, row.clamp(min=0, max=blocks), column.clamp(min=0, max=blocks)]  # (H, L, L)
        rule = ((row - column).abs() <= 1) | random
        rule = rule | (row == 0) | (row == blocks - 1) | (column == 0) | (column == blocks - 1)
        return with_prefix(rule & (row >= 0) & (column >= 0), prefix_tokens, False)
