"""ViT specifics: the losses of every problem_type, pooling, attention backends, loading options."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import hf_xcv
from hf_xcv.attention import full as full_module


def tiny(**overrides):
    return hf_xcv.preset_config("vit-test-tiny", **overrides)


@pytest.fixture
def pixels():
    return torch.randn(4, 3, 16, 16)


def test_single_label_cross_entropy(pixels):
    model = hf_xcv.ViTForImageClassification(tiny(num_labels=5)).eval()
    labels = torch.tensor([0, 4, 2, 1])
    out = model(pixels, labels=labels)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))
    assert model.config.problem_type == "single_label_classification"


def test_multi_label_binary_cross_entropy(pixels):
    model = hf_xcv.ViTForImageClassification(tiny(num_labels=3, problem_type="multi_label_classification")).eval()
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    out = model(pixels, labels=labels)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, labels))


def test_regression_mean_squared_error(pixels):
    model = hf_xcv.ViTForImageClassification(tiny(num_labels=1)).eval()
    targets = torch.tensor([0.5, -1.0, 2.0, 0.0])
    out = model(pixels, labels=targets)
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.squeeze(-1), targets))
    assert model.config.problem_type == "regression"


def test_mean_pooling_without_a_cls_token(pixels):
    model = hf_xcv.ViTModel(tiny(pooling="mean", use_cls_token=False)).eval()
    out = model(pixels)
    assert out.last_hidden_state.shape == (4, 16, 32)  # 4x4 patches, no [CLS]
    torch.testing.assert_close(out.pooler_output, out.last_hidden_state.mean(dim=1))
    bigger = model(torch.randn(1, 3, 24, 20), interpolate_pos_encoding=True)
    assert bigger.last_hidden_state.shape == (1, 30, 32)


def test_cls_pooling_and_pre_logits_layer(pixels):
    model = hf_xcv.ViTModel(tiny(representation_size=24)).eval()
    out = model(pixels)
    expected = torch.tanh(model.pooler.dense(out.last_hidden_state[:, 0]))
    torch.testing.assert_close(out.pooler_output, expected)
    classifier = hf_xcv.ViTForImageClassification(tiny(representation_size=24, num_labels=3))
    assert classifier.classifier.in_features == 24


def test_no_labels_gives_features(pixels):
    model = hf_xcv.ViTForImageClassification(tiny(num_labels=0)).eval()
    assert model(pixels).logits.shape == (4, 32)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_attn_implementation_picks_the_backend(implementation, pixels, monkeypatch, tmp_path):
    """The setting reaches every layer, through set_attn_implementation and from_pretrained."""
    calls = {"eager": 0, "sdpa": 0}
    real_eager, real_sdpa = full_module.eager_attention_forward, ALL_ATTENTION_FUNCTIONS["sdpa"]

    def counting_eager(*args, **kwargs):
        calls["eager"] += 1
        return real_eager(*args, **kwargs)

    def counting_sdpa(*args, **kwargs):
        calls["sdpa"] += 1
        return real_sdpa(*args, **kwargs)

    monkeypatch.setattr(full_module, "eager_attention_forward", counting_eager)
    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "sdpa", counting_sdpa)
    hf_xcv.ViTForImageClassification(tiny(num_labels=2)).save_pretrained(tmp_path)
    model = hf_xcv.ViTForImageClassification.from_pretrained(tmp_path, attn_implementation=implementation).eval()
    with torch.no_grad():
        model(pixels)
    assert calls[implementation] == model.config.num_hidden_layers
    assert calls["eager" if implementation == "sdpa" else "sdpa"] == 0
    other = "sdpa" if implementation == "eager" else "eager"
    model.set_attn_implementation(other)
    with torch.no_grad():
        model(pixels)
    assert calls[other] == model.config.num_hidden_layers


def test_flex_attention_backend_matches_sdpa(pixels):
    model = hf_xcv.ViTForImageClassification(tiny(num_labels=2)).eval()
    with torch.no_grad():
        expected = model(pixels).logits
        model.set_attn_implementation("flex_attention")
        got = model(pixels).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_device_map_and_dtype_on_load(tmp_path, pixels):
    model = hf_xcv.ViTForImageClassification(tiny(num_labels=3)).eval()
    model.save_pretrained(tmp_path)
    loaded = hf_xcv.ViTForImageClassification.from_pretrained(tmp_path, device_map="auto", dtype=torch.bfloat16)
    assert next(loaded.parameters()).dtype == torch.bfloat16
    with torch.no_grad():
        low = loaded(pixels).logits.float()  # float32 pixels are cast to the weights' dtype
        torch.testing.assert_close(low, model(pixels).logits, atol=0.1, rtol=0.1)
