"""Low-rank, kernel, synthesized and set attentions: linformer, linear, performer, synthesizer_*, isab, PMA.

Each entry against its defining property (spec sheet sections 2.3, 2.12-2.15), in float64 on tiny shapes.
The registry-wide checks (padding, causal leak, seeds, state dicts) live in test_attention_entries.py.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from attention_testing import TOL64, build, max_diff, padding_keep, qkv, reference

from hf_xcv.attention import MultiHeadAttention, build_attention, causal_keep_mask, dense_attention
from hf_xcv.attention.isab import PoolingByMultiheadAttention

# ---------------------------------------------------------------------------------------------- linformer


def linformer_reference(q, k, v, e, f, keep=None):
    """softmax(Q (E K)^T / sqrt(d)) (F V) with padded keys and values zeroed, E, F: (P, k, L)."""
    if keep is not None:
        real = keep[:, :, 0, :, None].to(k.dtype)  # (B, 1, Lk, 1)
        k, v = k * real, v * real
    return reference(q, e @ k, f @ v)


@pytest.mark.parametrize("case", ["plain", "padding", "cross"])
def test_linformer_with_identity_projections_is_softmax_attention(case):
    q_len, kv_len = (5, 12) if case == "cross" else (12, 12)
    q, k, v = qkv(q_len=q_len, kv_len=kv_len)
    core = build("linformer", seq_len=kv_len, k=kv_len)
    core.make_exact_()
    keep = padding_keep(2, kv_len, [kv_len, 7]) if case == "padding" else None
    out = core(q, k, v, attention_mask=keep).values
    assert max_diff(out, reference(q, k, v, keep)) < TOL64  # padded slots drop out: exact masked attention


def test_linformer_with_a_shared_permutation_is_softmax_attention():
    q, k, v = qkv(q_len=10)
    core = build("linformer", seq_len=10, k=10, sharing="kv")
    with torch.no_grad():
        core.key_projection.copy_(torch.eye(10, dtype=torch.float64)[torch.randperm(10)][None])
    assert max_diff(core(q, k, v).values, reference(q, k, v)) < TOL64


def test_linformer_with_mean_pooling_attends_over_pooled_keys_and_values():
    q, k, v = qkv(q_len=12)
    core = build("linformer", seq_len=12, k=3)
    pool = torch.kron(torch.eye(3, dtype=torch.float64), torch.full((1, 4), 0.25))  # (3, 12): mean of 4
    with torch.no_grad():
        core.key_projection.copy_(pool[None])
        core.value_projection.copy_(pool[None])
    pooled = [t.unflatten(2, (3, 4)).mean(3) for t in (k, v)]  # (B, H, 3, D)
    assert max_diff(core(q, k, v).values, reference(q, *pooled)) < TOL64


@pytest.mark.parametrize("sharing", ["none", "headwise", "kv", "layerwise"])
def test_linformer_matches_its_formula_for_every_sharing_and_shorter_inputs(sharing):
    q, k, v = qkv(heads=3, q_len=9)  # shorter than seq_len: the first 9 columns are used
    core = build("linformer", heads=3, seq_len=16, k=4, sharing=sharing)
    keep = padding_keep(2, 9, [9, 6])
    e, f = core.length_projections(9)
    assert e.shape == (3 if sharing == "none" else 1, 4, 9)
    assert (core.value_projection is None) == (sharing in ("kv", "layerwise"))  # F is E
    assert max_diff(core(q, k, v, attention_mask=keep).values, linformer_reference(q, k, v, e, f, keep)) < TOL64
    expected_parameters = {"none": 2 * 3 * 4 * 16, "headwise": 2 * 4 * 16, "kv": 4 * 16, "layerwise": 4 * 16}
    assert sum(p.numel() for p in core.parameters()) == expected_parameters[sharing]


def test_linformer_context_has_rank_at_most_k():
    q, k, v = qkv(batch=1, heads=1, q_len=16, dim=8)
    out = build("linformer", heads=1, seq_len=16, k=3)(q, k, v).values[0, 0]  # (16, 8)
    assert torch.linalg.matrix_rank(out).item() == 3


def test_linformer_refuses_causal_long_inputs_and_bad_settings_by_name():
    q, k, v = qkv(q_len=8)
    core = build("linformer", seq_len=8, k=4)
    with pytest.raises(ValueError, match="causal"):
        core(q, k, v, causal=True)
    with pytest.raises(ValueError, match="seq_len=6"):
        build("linformer", seq_len=6, k=4)(q, k, v)
    layer = MultiHeadAttention(16, 2, attention_type="linformer", attention_kwargs={"seq_len": 6, "k": 2})
    with pytest.raises(ValueError, match="causal.*exceed seq_len=6"):
        layer(torch.randn(1, 8, 16), causal=True)
    with pytest.raises(ValueError, match="sharing"):
        build("linformer", sharing="all")
    with pytest.raises(ValueError, match="k must be"):
        build("linformer", k=0)
    with pytest.raises(ValueError, match="k == seq_len"):
        build("linformer", seq_len=8, k=4).make_exact_()


# ----------------------------------------------------------------------------------- linear and performer


def kernel_reference(phi_q, phi_k, v, causal=False):
    """The explicit quadratic form: weights phi(q_i) . phi(k_j), masked, normalised per row."""
    weights = phi_q @ phi_k.transpose(-1, -2)  # (B, H, Lq, Lk)
    if causal:
        weights = weights * causal_keep_mask(phi_q.shape[2], phi_k.shape[2])
    return weights @ v / weights.sum(-1, keepdim=True)


def elu_features(x):
    return F.elu(x) + 1


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 5, 64])
def test_linear_attention_equals_the_quadratic_kernel_form(causal, chunk_size):
    q, k, v = qkv(q_len=13)
    out = build("linear", chunk_size=chunk_size)(q, k, v, causal=causal).values
    expected = kernel_reference(elu_features(q), elu_features(k), v, causal)
    assert max_diff(out, expected) < TOL64


def test_linear_causal_attention_equals_its_recurrent_form():
    q, k, v = qkv(q_len=11)
    phi_q, phi_k = elu_features(q), elu_features(k)
    state = torch.zeros(2, 2, 8, 8, dtype=torch.float64)  # S_i = S_{i-1} + phi(k_i) v_i^T
    total = torch.zeros(2, 2, 8, dtype=torch.float64)  # z_i = z_{i-1} + phi(k_i)
    rows = []
    for i in range(11):
        state = state + phi_k[:, :, i, :, None] * v[:, :, i, None, :]
        total = total + phi_k[:, :, i]
        numerator = (phi_q[:, :, i, :, None] * state).sum(-2)
        rows.append(numerator / (phi_q[:, :, i] * total).sum(-1, keepdim=True))
    out = build("linear", chunk_size=4)(q, k, v, causal=True).values
    assert max_diff(out, torch.stack(rows, dim=2)) < TOL64


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_kernel_key_padding_equals_truncation_to_the_real_keys(name):
    q, k, v = qkv(q_len=6, kv_len=10)
    core = build(name)
    keep = padding_keep(2, 10, [10, 7])
    out = core(q, k, v, attention_mask=keep).values
    assert max_diff(out[1], core(q[1:], k[1:, :, :7], v[1:, :, :7]).values[0]) < TOL64
    assert max_diff(out[0], core(q[:1], k[:1], v[:1]).values[0]) < TOL64


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_kernel_causal_decoding_step_equals_the_last_row(name):
    """A causal call with fewer queries than keys aligns them with the last keys (generation)."""
    q, k, v = qkv(q_len=10)
    core = build(name, chunk_size=3)
    full = core(q, k, v, causal=True).values
    assert max_diff(core(q[:, :, -3:], k, v, causal=True).values, full[:, :, -3:]) < TOL64


def performer(heads=2, dim=8, dtype=torch.float64, **kwargs):
    """A Performer core whose features come from its own ``seed`` kwarg (``build`` takes ``seed`` as torch's)."""
    return build_attention("performer", heads, dim, **kwargs).to(dtype).eval()


def performer_features(core, x, scaling):
    """phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(M), x' = x sqrt(scaling), without stabilisers."""
    x = x * scaling**0.5
    return torch.exp(x @ core.projection.T - x.square().sum(-1, keepdim=True) / 2) / math.sqrt(core.nb_features)


@pytest.mark.parametrize("causal", [False, True])
def test_performer_equals_the_quadratic_form_of_its_features(causal):
    """The stabilisers cancel: the output is the normalised kernel of the unstabilised features."""
    q, k, v = qkv(q_len=12)
    core = build("performer", nb_features=32, chunk_size=5)
    phi_q, phi_k = performer_features(core, q, 8**-0.5), performer_features(core, k, 8**-0.5)
    out = core(q, k, v, causal=causal).values
    assert max_diff(out, kernel_reference(phi_q, phi_k, v, causal)) < TOL64


def sphere(n: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """(1, 1, n, d) vectors of norm d^(1/4): logits q . k / sqrt(d) lie in [-1, 1] (spec sheet section 6)."""
    x = torch.randn(1, 1, n, d, generator=generator, dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True) * d**0.25


def test_performer_attention_error_falls_as_features_grow():
    """Relative Frobenius error of the attention matrix (values = identity), averaged over 3 draws: about
    1.95 / sqrt(M) (0.46, 0.13, 0.033 for M = 16, 256, 4096 measured at d = 16, N = 32)."""
    errors = {}
    for features in (16, 256, 4096):
        runs = []
        for draw in range(3):
            generator = torch.Generator().manual_seed(100 + draw)
            q, k = sphere(32, 16, generator), sphere(32, 16, generator)
            eye = torch.eye(32, dtype=torch.float64)[None, None]
            core = performer(heads=1, dim=16, nb_features=features, seed=draw)
            exact = dense_attention(q, k, eye)[0]
            runs.append(((core(q, k, eye).values - exact).norm() / exact.norm()).item())
        errors[features] = sum(runs) / len(runs)
    assert errors[256] < errors[16] / 2 and errors[4096] < errors[256] / 2.5
    assert errors[256] < 0.2 and errors[4096] < 0.06


def test_performer_causal_output_ignores_large_future_keys_in_float32():
    """No global key maximum: scaling the future keys up cannot move the past (the stabiliser leak)."""
    q, k, v = qkv(q_len=16, dtype=torch.float32)
    core = build("performer", dtype=torch.float32, nb_features=16, chunk_size=4)
    out = core(q, k, v, causal=True).values
    k2 = k.clone()
    k2[:, :, 9:] *= 6
    changed = core(q, k2, v, causal=True).values
    assert torch.equal(out[:, :, :9], changed[:, :, :9])
    assert max_diff(out[:, :, 9:], changed[:, :, 9:]) > 1e-3


def test_performer_features_are_orthogonal_blocks_and_a_saved_buffer():
    core = performer(dim=4, nb_features=10, seed=7)
    w = core.projection  # (10, 4): blocks of 4, 4, 2 orthogonal rows (drawn in float32)
    directions = w / w.norm(dim=1, keepdim=True)
    for block in (directions[:4], directions[4:8], directions[8:]):
        assert max_diff(block @ block.T, torch.eye(len(block), dtype=torch.float64)) < 1e-6
    assert "projection" in core.state_dict()
    torch.manual_seed(1)  # the seed kwarg, not torch's generator, decides the draw
    assert torch.equal(performer(dim=4, nb_features=10, seed=7).projection, w)


def test_performer_redraws_features_in_training_only_and_reproducibly():
    q, k, v = qkv(q_len=6)
    core = performer(nb_features=8, feature_redraw_interval=2, seed=3)
    twin = performer(nb_features=8, feature_redraw_interval=2, seed=3)
    initial = core.projection.clone()
    for _ in range(3):
        core(q, k, v)  # evaluation mode: never redraws
    assert torch.equal(core.projection, initial)
    core.train(), twin.train()
    core(q, k, v), core(q, k, v)
    assert torch.equal(core.projection, initial)  # two calls: still the first draw
    core(q, k, v)  # the third call redraws (seed 3 + 1)
    assert not torch.equal(core.projection, initial)
    for _ in range(3):
        twin(q, k, v)
    assert torch.equal(core.projection, twin.projection)


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_kernel_attention_refuses_weights_and_bad_settings(name):
    q, k, v = qkv(q_len=4)
    with pytest.raises(ValueError, match="returning attention weights"):
        build(name)(q, k, v, output_weights=True)
    with pytest.raises(ValueError, match="chunk_size"):
        build(name, chunk_size=0)
    with pytest.raises(ValueError, match="key padding mask"):
        build(name)(q, k, v, attention_mask=torch.ones(2, 1, 4, 4, dtype=torch.bool))
    if name == "performer":
        with pytest.raises(ValueError, match="nb_features"):
            build(name, nb_features=0)
        with pytest.raises(ValueError, match="feature_redraw_interval"):
            build(name, feature_redraw_interval=-1)


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_kernel_attention_runs_in_bfloat16(name):
    q, k, v = qkv(q_len=8, dtype=torch.bfloat16)
    out = build(name, dtype=torch.bfloat16, chunk_size=3)(q, k, v, causal=True).values
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


# ------------------------------------------------------------------------------------------- synthesizer


def test_random_synthesizer_with_zero_logits_averages_the_values():
    q, k, v = qkv(q_len=7)
    core = build("synthesizer_random", max_length=7)
    with torch.no_grad():
        core.table.zero_()
    assert max_diff(core(q, k, v).values, v.mean(2, keepdim=True).expand_as(v)) < TOL64
    cumulative = v.cumsum(2) / torch.arange(1, 8, dtype=torch.float64)[:, None]
    assert max_diff(core(q, k, v, causal=True).values, cumulative) < TOL64


@pytest.mark.parametrize("causal", [False, True])
def test_random_synthesizer_is_softmax_of_its_table_and_the_same_for_every_input(causal):
    q, k, v = qkv(q_len=6, kv_len=9)
    core = build("synthesizer_random", max_length=12, trainable=False)
    assert "table" in dict(core.named_buffers()) and not list(core.parameters())
    keep = padding_keep(2, 9, [9, 5])
    out = core(q, k, v, attention_mask=keep, causal=causal, output_weights=True)
    rows = slice(3, 9) if causal else slice(0, 6)  # causal queries are the last 6 positions
    mask = keep & causal_keep_mask(6, 9) if causal else keep  # (B, 1, 6, 9)
    probs = torch.softmax(core.table[:, rows, :9].masked_fill(~mask, -math.inf), -1)  # (B, H, 6, 9)
    assert max_diff(out.weights, probs) < TOL64 and max_diff(out.values, probs @ v) < TOL64


def test_random_synthesizer_weights_do_not_depend_on_the_input():
    core = build("synthesizer_random", max_length=8)
    a = core(*qkv(q_len=8, seed=1), output_weights=True).weights
    b = core(*qkv(q_len=8, seed=2), output_weights=True).weights
    assert torch.equal(a, b) and torch.equal(a[0], a[1])


def test_factorized_random_synthesizer_uses_the_product_of_its_factors():
    q, k, v = qkv(q_len=6)
    core = build("synthesizer_random", max_length=10, factorized=True, rank=3)
    assert core.left.shape == (2, 10, 3) and core.right.shape == (2, 10, 3)
    probs = torch.softmax(core.left[:, :6] @ core.right[:, :6].transpose(-1, -2), -1)
    assert max_diff(core(q, k, v).values, probs @ v) < TOL64


def dense_logits(mlp, q):
    return torch.relu(q @ mlp["w1"] + mlp["b1"]) @ mlp["w2"] + mlp["b2"]


def test_dense_synthesizer_is_softmax_of_its_mlp_and_rows_depend_on_their_own_query():
    q, k, v = qkv(q_len=12)
    core = build("synthesizer_dense", max_length=16, hidden_dim=5)
    probs = torch.softmax(dense_logits(core.branches[0], q)[..., :12], -1)
    out = core(q, k, v).values
    assert max_diff(out, probs @ v) < TOL64
    q2 = q.clone()
    q2[:, :, 10] += 1.0
    changed = core(q2, k, v).values
    others = [i for i in range(12) if i != 10]
    assert max_diff(out[:, :, others], changed[:, :, others]) == 0.0
    assert max_diff(out[:, :, 10], changed[:, :, 10]) > 1e-6


def test_factorized_dense_synthesizer_multiplies_tiled_and_repeated_rows():
    q, k, v = qkv(q_len=7)
    core = build("synthesizer_dense", max_length=10, factorized=True, factors=(3, 4))
    a, b = (dense_logits(mlp, q) for mlp in core.branches)  # (B, H, L, 3), (B, H, L, 4)
    j = torch.arange(7)
    logits = a[..., j // 4] * b[..., j % 4]  # position j = (j // 4, j % 4)
    expected = torch.softmax(logits.masked_fill(~causal_keep_mask(7, 7), -math.inf), -1) @ v
    assert max_diff(core(q, k, v, causal=True).values, expected) < TOL64
    assert build("synthesizer_dense", max_length=10, factorized=True).factors == (4, 3)


@pytest.mark.parametrize("name", ["synthesizer_dense", "synthesizer_random"])
def test_synthesizer_mixed_with_dot_products_adds_the_scaled_scores(name):
    q, k, v = qkv(q_len=6)
    core = build(name, max_length=6, mix_dot_product=True)
    synthesized = dense_logits(core.branches[0], q) if name == "synthesizer_dense" else core.table
    probs = torch.softmax(synthesized + q @ k.transpose(-1, -2) / math.sqrt(8), -1)
    assert max_diff(core(q, k, v).values, probs @ v) < TOL64


@pytest.mark.parametrize("name", ["synthesizer_dense", "synthesizer_random"])
def test_synthesizer_decoding_step_equals_the_last_row(name):
    q, k, v = qkv(q_len=9)
    core = build(name, max_length=9)
    full = core(q, k, v, causal=True).values
    assert max_diff(core(q[:, :, -2:], k, v, causal=True).values, full[:, :, -2:]) < TOL64


def test_synthesizer_layers_project_only_what_the_core_reads():
    def projected(name, **kwargs):
        layer = MultiHeadAttention(16, 2, attention_type=name, attention_kwargs={"max_length": 8, **kwargs})
        return [p for p in ("q_proj", "k_proj", "v_proj") if getattr(layer, p) is not None]

    assert projected("synthesizer_dense") == ["q_proj", "v_proj"]
    assert projected("synthesizer_random") == ["v_proj"]
    assert projected("synthesizer_random", mix_dot_product=True) == ["q_proj", "k_proj", "v_proj"]


def test_random_synthesizer_dropout_draws_a_mask_per_batch_row():
    q, k, v = qkv(q_len=8)
    v = v[:1].expand_as(v)  # the same values in both rows: only dropout can tell them apart
    core = build("synthesizer_random", max_length=8).train()
    out = core(q, k, v, dropout=0.5).values
    assert max_diff(out[0], out[1]) > 1e-3
    assert torch.equal(core.eval()(q, k, v, dropout=0.5).values[0], core(q, k, v).values[1])


def test_synthesizer_refuses_long_inputs_and_inconsistent_settings_by_name():
    layer = MultiHeadAttention(16, 2, attention_type="synthesizer_random", attention_kwargs={"max_length": 6})
    with pytest.raises(ValueError, match="7 queries exceed max_length=6; its 7 keys exceed"):
        layer(torch.randn(1, 7, 16))
    with pytest.raises(ValueError, match="factors"):
        build("synthesizer_dense", factors=(2, 2))
    with pytest.raises(ValueError, match="do not cover max_length=10"):
        build("synthesizer_dense", max_length=10, factorized=True, factors=(3, 3))
    with pytest.raises(ValueError, match="rank"):
        build("synthesizer_random", rank=4)
    with pytest.raises(ValueError, match="max_length"):
        build("synthesizer_dense", max_length=0)


# ------------------------------------------------------------------------------------------ ISAB and PMA


def test_isab_is_two_softmax_attentions_through_the_inducing_points():
    q, k, v = qkv(q_len=5, kv_len=11)
    core = build("isab", num_inducing=3)
    inducing = core.inducing.expand(2, -1, -1, -1)  # (B, H, m, D)
    keep = padding_keep(2, 11, [11, 6])
    summary_k, summary_v = reference(inducing, k, k, keep), reference(inducing, k, v, keep)
    out = core(q, k, v, attention_mask=keep, output_weights=True)
    assert max_diff(out.values, reference(q, summary_k, summary_v)) < TOL64
    assert max_diff(out.weights.sum(-1), torch.ones(2, 2, 5, dtype=torch.float64)) < TOL64
    assert max_diff(out.weights @ v, out.values) < TOL64 and out.weights[1, :, :, 6:].abs().max() == 0


def test_isab_is_permutation_equivariant():
    q, k, v = qkv(q_len=10)
    core = build("isab", num_inducing=4)
    order = torch.randperm(10)
    shuffled = core(q[:, :, order], k[:, :, order], v[:, :, order]).values
    assert max_diff(shuffled, core(q, k, v).values[:, :, order]) < TOL64


def test_isab_on_a_padded_set_equals_isab_on_the_real_elements():
    q, k, v = qkv(q_len=9)
    core = build("isab", num_inducing=4)
    out = core(q, k, v, attention_mask=padding_keep(2, 9, [9, 6])).values
    alone = core(q[1:, :, :6], k[1:, :, :6], v[1:, :, :6]).values
    assert max_diff(out[1, :, :6], alone[0]) < TOL64


def test_isab_refuses_causal_attention():
    with pytest.raises(ValueError, match="causal"):
        build("isab")(*qkv(q_len=4), causal=True)
    with pytest.raises(ValueError, match="num_inducing"):
        build("isab", num_inducing=0)


def make_pma(**kwargs) -> PoolingByMultiheadAttention:
    torch.manual_seed(0)
    return PoolingByMultiheadAttention(16, 2, **kwargs).double().eval()


def test_pma_is_permutation_invariant_and_pools_to_its_seeds():
    pma = make_pma(num_seeds=3)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    pooled = pma(x)
    assert pooled.shape == (2, 3, 16)
    assert max_diff(pma(x[:, torch.randperm(7)]), pooled) < TOL64


def test_pma_ignores_padding_and_checks_the_mask_shape():
    pma = make_pma()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    pooled = pma(x, mask)
    assert max_diff(pooled[1], pma(x[1:, :4])[0]) < TOL64
    x2 = x.clone()
    x2[1, 4:] = 100.0
    assert max_diff(pma(x2, mask), pooled) == 0.0
    empty = pma(x, torch.zeros(2, 7))
    assert torch.isfinite(empty).all()
    with pytest.raises(ValueError, match="mask has shape"):
        pma(x, mask[:, :5])


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_kernel_attention_refuses_probability_dropout_instead_of_skipping_it(name):
    from hf_xcv.attention import MultiHeadAttention

    layer = MultiHeadAttention(16, 2, attention_type=name, dropout=0.1).train()
    with pytest.raises(ValueError, match="no attention probabilities for dropout=0.1"):
        layer(torch.randn(1, 5, 16))
    assert layer.eval()(torch.randn(1, 5, 16))[0].shape == (1, 5, 16)  # no dropout at inference
