"""Reversible layers and chunked feed-forward: reversible backward equals plain autograd, stores nothing per layer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hf_xcv.layers import ChunkedFeedForward, Mlp, ReversibleBlock, ReversibleSequence, chunked_feed_forward

B, L, C, HEADS, DROPOUT = 2, 5, 8, 2, 0.3


class TinyAttention(nn.Module):
    """Pre-norm self-attention with dropout on the weights and the output: the f sublayer of the tests."""

    def __init__(self, dim: int = C, heads: int = HEADS, dropout: float = DROPOUT):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.heads, self.dropout = heads, dropout

    def forward(self, x: torch.Tensor, attention_bias: torch.Tensor | None = None, scale: float = 1.0):
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = scale * (q @ k.transpose(-1, -2)) * (c // self.heads) ** -0.5  # (B, H, L, L)
        if attention_bias is not None:
            scores = scores + attention_bias
        weights = F.dropout(scores.softmax(-1), self.dropout, self.training)
        out = (weights @ v).transpose(1, 2).reshape(b, n, c)  # (B, L, C)
        return F.dropout(self.out(out), self.dropout, self.training)


def feed_forward(dim: int = C) -> nn.Module:
    return nn.Sequential(nn.LayerNorm(dim), Mlp(dim, 2 * dim, dropout=DROPOUT))


def make_sequence(depth: int, dtype: torch.dtype = torch.float64, **kwargs) -> ReversibleSequence:
    torch.manual_seed(0)
    blocks = [(TinyAttention(), feed_forward()) for _ in range(depth)]
    return ReversibleSequence(blocks, **kwargs).to(dtype).train()


def run(model: ReversibleSequence, x: torch.Tensor, reversible: bool, seed: int = 1, **f_kwargs):
    """Output and gradients of (x, f_kwargs that need them, parameters) under a fixed dropout seed."""
    model.reversible = reversible
    torch.manual_seed(seed)
    out = model(x, **f_kwargs)
    weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)  # a non-uniform upstream gradient
    leaves = [x, *(v for v in f_kwargs.values() if isinstance(v, torch.Tensor) and v.requires_grad)]
    grads = torch.autograd.grad((out * weight).sum(), leaves + list(model.parameters()))
    return out.detach(), grads


def max_diff(a, b) -> float:
    return max((u - v).abs().max().item() for u, v in zip(a, b))


def test_reversible_equals_plain_with_dropout():
    model = make_sequence(3)
    x = torch.randn(B, L, C, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(B, 1, L, L, dtype=torch.float64)  # a mask-like keyword tensor without gradient
    out_plain, grads_plain = run(model, x, reversible=False, attention_bias=bias, scale=0.5)
    out_rev, grads_rev = run(model, x, reversible=True, attention_bias=bias, scale=0.5)
    assert (out_plain - out_rev).abs().max().item() <= 1e-12
    assert len(grads_rev) == 1 + len(list(model.parameters()))
    assert max_diff(grads_plain, grads_rev) <= 1e-10
    assert max(g.abs().max().item() for g in grads_plain) > 1e-3  # the comparison is not between zeros


def test_without_rng_replay_the_gradients_differ():
    """The check above detects a backward that draws fresh dropout masks."""
    model = make_sequence(3, preserve_rng_state=False)
    x = torch.randn(B, L, C, dtype=torch.float64, requires_grad=True)
    out_plain, grads_plain = run(model, x, reversible=False)
    out_rev, grads_rev = run(model, x, reversible=True)
    assert (out_plain - out_rev).abs().max().item() <= 1e-12  # the forward is the same ...
    assert max_diff(grads_plain, grads_rev) > 1e-3  # ... but the backward is not


def test_keyword_tensor_gets_its_gradient():
    model = make_sequence(3)
    x = torch.randn(B, L, C, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(1, HEADS, L, L, dtype=torch.float64, requires_grad=True)  # e.g. a learned position bias
    _, grads_plain = run(model, x, reversible=False, attention_bias=bias)
    _, grads_rev = run(model, x, reversible=True, attention_bias=bias)
    assert max_diff(grads_plain[:2], grads_rev[:2]) <= 1e-10


def test_backward_accumulates_into_grad_and_leaves_rng_alone():
    model = make_sequence(3)
    x = torch.randn(B, L, C, dtype=torch.float64, requires_grad=True)
    grads = {}
    for reversible in (False, True):
        model.zero_grad(set_to_none=True)
        model.reversible = reversible
        torch.manual_seed(1)
        loss = model(x).pow(2).sum()
        state = torch.get_rng_state()
        loss.backward()
        assert torch.equal(torch.get_rng_state(), state)  # the replay is forked off the caller's generator
        grads[reversible] = [p.grad.clone() for p in model.parameters()]
    assert max_diff(grads[False], grads[True]) <= 1e-10


def test_tied_sublayers_and_frozen_parameters():
    torch.manual_seed(0)
    f, g = TinyAttention(), feed_forward()
    model = ReversibleSequence([(f, g), (f, g), (TinyAttention(), g)]).double().train()
    model.blocks[2].f.qkv.weight.requires_grad_(False)
    x = torch.randn(B, L, C, dtype=torch.float64, requires_grad=True)
    for reversible in (False, True):
        model.zero_grad(set_to_none=True)
        model.reversible = reversible
        torch.manual_seed(1)
        model(x).pow(2).sum().backward()
        if not reversible:
            expected = [p.grad.clone() for p in model.parameters() if p.requires_grad]
    assert max_diff(expected, [p.grad for p in model.parameters() if p.requires_grad]) <= 1e-10
    assert model.blocks[2].f.qkv.weight.grad is None


def test_block_inverse_reconstructs_inputs():
    torch.manual_seed(0)
    block = ReversibleBlock(TinyAttention(), feed_forward()).double().eval()
    x1, x2 = torch.randn(2, B, L, C, dtype=torch.float64)
    bias = torch.randn(B, 1, L, L, dtype=torch.float64)
    with torch.no_grad():
        r1, r2 = block.inverse(*block(x1, x2, attention_bias=bias), attention_bias=bias)
    assert max_diff((x1, x2), (r1, r2)) <= 1e-12


def saved_bytes(model: ReversibleSequence, x: torch.Tensor) -> int:
    """Bytes of the tensors autograd saves for backward during the model's forward."""
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(x)
    return total


def test_saved_tensors_do_not_grow_with_depth():
    x = torch.randn(B, L, C, dtype=torch.float64, requires_grad=True)
    reversible = {depth: saved_bytes(make_sequence(depth), x) for depth in (2, 8)}
    plain = {depth: saved_bytes(make_sequence(depth, reversible=False), x) for depth in (2, 8)}
    assert reversible[2] == reversible[8] == 2 * x.numel() * x.element_size()  # the two last streams only
    assert plain[8] > 3 * plain[2] > 0


def test_no_grad_runs_plain_and_matches():
    model = make_sequence(3)
    x = torch.randn(B, L, C, dtype=torch.float64)
    expected, _ = run(model, x.requires_grad_(), reversible=False)
    torch.manual_seed(1)
    with torch.no_grad():
        out = model(x)
    assert out.grad_fn is None and torch.equal(out, expected)


def test_float32_matches_plain():
    model = make_sequence(3, dtype=torch.float32)
    x = torch.randn(B, L, C, requires_grad=True)
    out_plain, grads_plain = run(model, x, reversible=False)
    out_rev, grads_rev = run(model, x, reversible=True)
    assert (out_plain - out_rev).abs().max().item() <= 1e-6
    assert max_diff(grads_plain, grads_rev) <= 1e-4


def test_gradcheck_in_eval_mode():
    model = make_sequence(2).eval()
    x = torch.randn(1, 3, C, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: model(t), (x,))


def test_forward_streams_and_empty_sequence():
    model = make_sequence(2).eval()
    x1, x2 = torch.randn(2, B, L, C, dtype=torch.float64, requires_grad=True)
    y1, y2 = model.forward_streams(x1, x2)
    with torch.no_grad():
        for block in reversed(model.blocks):
            y1, y2 = block.inverse(y1, y2)
    assert max_diff((x1, x2), (y1, y2)) <= 1e-12
    assert torch.equal(ReversibleSequence([])(x1), x1)


def test_chunked_feed_forward_equals_unchunked():
    torch.manual_seed(0)
    ff = Mlp(C, 3 * C).double()
    x = torch.randn(B, 7, C, dtype=torch.float64, requires_grad=True)
    expected = ff(x)
    grad_expected = torch.autograd.grad(expected.sum(), [x, *ff.parameters()])
    for chunk_size in (0, 1, 3, 7, 9):
        out = chunked_feed_forward(ff, x, chunk_size)
        assert (out - expected).abs().max().item() <= 1e-14
        assert max_diff(grad_expected, torch.autograd.grad(out.sum(), [x, *ff.parameters()])) <= 1e-14
    transposed = x.transpose(0, 1)  # (L, B, C): chunk along dim 0 == -3
    assert torch.allclose(ChunkedFeedForward(ff, 2, dim=-3)(transposed), expected.transpose(0, 1), atol=1e-14)


def test_chunked_feed_forward_sees_one_chunk_at_a_time():
    lengths = []
    ff = nn.Identity()
    ff.register_forward_hook(lambda module, args, out: lengths.append(args[0].shape[1]))
    chunked_feed_forward(ff, torch.randn(B, 7, C), 3)
    assert lengths == [3, 3, 1]


def test_chunked_feed_forward_inside_reversible_layers():
    torch.manual_seed(0)
    blocks = [(TinyAttention(), ChunkedFeedForward(feed_forward(), chunk_size=2)) for _ in range(2)]
    model = ReversibleSequence(blocks).double().train()
    x = torch.randn(B, L, C, dtype=torch.float64, requires_grad=True)
    out_plain, grads_plain = run(model, x, reversible=False)
    out_rev, grads_rev = run(model, x, reversible=True)
    assert (out_plain - out_rev).abs().max().item() <= 1e-12
    assert max_diff(grads_plain, grads_rev) <= 1e-10


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: chunked_feed_forward(nn.Identity(), torch.zeros(1, 4, 2), -1), "chunk_size"),
        (lambda: chunked_feed_forward(nn.Identity(), torch.zeros(1, 4, 2), 1.5), "chunk_size"),
        (lambda: chunked_feed_forward(nn.Identity(), torch.zeros(1, 4, 2), True), "chunk_size"),
        (lambda: chunked_feed_forward(nn.Identity(), torch.zeros(1, 4, 2), 2, dim=3), "dim"),
        (lambda: chunked_feed_forward(nn.Identity(), torch.zeros(1, 4, 2), 2, dim="1"), "dim"),
        (lambda: chunked_feed_forward(nn.Identity(), [1, 2], 2), "hidden_states"),
        (lambda: chunked_feed_forward(None, torch.zeros(1, 4, 2), 2), "module"),
        (lambda: ChunkedFeedForward(lambda t: t, 2), "ff"),
        (lambda: ChunkedFeedForward(nn.Identity(), -2), "chunk_size"),
        (lambda: ChunkedFeedForward(nn.Identity(), 2, dim=None), "dim"),
        (lambda: ReversibleSequence([nn.Identity()]), "blocks[0]"),
        (lambda: ReversibleSequence([(nn.Identity(), nn.Identity(), nn.Identity())]), "blocks[0]"),
        (lambda: ReversibleSequence([(nn.Identity(), lambda t: t)]), "blocks[0] g"),
        (lambda: make_sequence(1)([1.0]), "x1"),
    ],
)
def test_bad_arguments_name_themselves(call, name):
    with pytest.raises(ValueError, match=name.replace("[", r"\[").replace("]", r"\]")):
        call()
