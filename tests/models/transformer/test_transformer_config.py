"""TransformerConfig: the paper's defaults, validation that names the field, presets, the LR schedule."""

from __future__ import annotations

import pytest
import torch

import hf_xcv
from hf_xcv import TransformerConfig, preset_config
from hf_xcv.attention import registry
from hf_xcv.attention.registry import AttentionCore, Capabilities
from hf_xcv.training import get_noam_schedule, noam_factor


def test_defaults_are_the_papers_base_model():
    config = TransformerConfig()
    assert (config.d_model, config.encoder_layers, config.decoder_layers) == (512, 6, 6)
    assert (config.encoder_attention_heads, config.encoder_ffn_dim, config.decoder_ffn_dim) == (8, 2048, 2048)
    assert config.dropout == 0.1 and config.label_smoothing == 0.1 and config.activation_function == "relu"
    assert not config.normalize_before and config.scale_embedding and config.position_embedding_type == "sinusoidal"
    assert config.sinusoidal_layout == "interleaved" and config.tie_word_embeddings
    assert config.decoder_vocab_size == config.vocab_size and config.is_encoder_decoder
    assert config.hidden_size == 512 and config.num_hidden_layers == 6  # transformers' generic names


def test_base_preset_has_the_published_parameter_count():
    model = hf_xcv.TransformerModel(preset_config("transformer-base"))
    params = sum(p.numel() for p in model.parameters())
    # 63M with this 37k joint vocabulary; the paper's 65M includes a larger vocabulary
    assert 60e6 < params < 66e6


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"d_model": 0}, "d_model must be an integer >= 1"),
        ({"d_model": 100, "encoder_attention_heads": 8}, "d_model=100 is not divisible by encoder_attention_heads=8"),
        ({"decoder_attention_heads": 3}, "d_model=512 is not divisible by decoder_attention_heads=3"),
        ({"decoder_vocab_size": 100}, "share_encoder_decoder_embeddings=True needs decoder_vocab_size == vocab_size"),
        ({"activation_function": "nope"}, "activation_function='nope' is not a known activation"),
        ({"dropout": 1.5}, "dropout must be a probability"),
        ({"label_smoothing": -0.1}, "label_smoothing must be a probability"),
        ({"position_embedding_type": "rotary"}, "position_embedding_type='rotary' is not allowed"),
        ({"sinusoidal_layout": "zigzag"}, "sinusoidal_layout='zigzag' is not allowed"),
        ({"normalize_before": "yes"}, "normalize_before must be True or False"),
        ({"pad_token_id": None}, "pad_token_id must be set"),
        ({"eos_token_id": 40000}, "eos_token_id=40000 is outside the vocabulary \\(decoder_vocab_size=37000\\)"),
        (
            {
                "pad_token_id": 60,
                "vocab_size": 50,
                "decoder_vocab_size": 100,
                "share_encoder_decoder_embeddings": False,
            },
            "pad_token_id=60 is outside the vocabulary \\(vocab_size=50\\)",
        ),
        ({"decoder_start_token_id": -1}, "decoder_start_token_id must be an integer >= 0"),
        ({"attention_type": "nope"}, "attention_type='nope' is not allowed; allowed values"),
        ({"attention_kwargs": {"window": 3}}, "attention_kwargs has keys \\['window'\\]"),
        ({"max_position_embeddings": 0}, "max_position_embeddings must be an integer >= 1"),
    ],
)
def test_invalid_fields_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**overrides)


def test_preset_overrides_with_a_typo_are_rejected():
    with pytest.raises(ValueError, match="has no field \\['d_modle'\\]"):
        preset_config("transformer-test-tiny", d_modle=64)


def test_an_attention_core_without_causal_or_cross_support_is_refused_with_every_reason(monkeypatch):
    class EncoderOnly(AttentionCore):
        name = "encoder_only_test"
        capabilities = Capabilities(padding_mask=True)

    monkeypatch.setitem(registry._REGISTRY, EncoderOnly.name, EncoderOnly)
    with pytest.raises(ValueError, match="cannot serve an encoder-decoder") as err:
        TransformerConfig(attention_type="encoder_only_test")
    assert "causal" in str(err.value) and "cross-attention" in str(err.value)


def test_config_round_trips_through_json(tmp_path):
    config = preset_config("transformer-test-tiny", normalize_before=True, sinusoidal_layout="half")
    config.save_pretrained(tmp_path)
    loaded = TransformerConfig.from_pretrained(tmp_path)
    assert loaded.to_diff_dict() == config.to_diff_dict()


def test_noam_schedule_values():
    d_model, warmup = 512, 4000
    assert noam_factor(0, d_model, warmup) == pytest.approx(512**-0.5 * 4000**-1.5)
    peak = noam_factor(warmup - 1, d_model, warmup)
    assert peak == pytest.approx(512**-0.5 * 4000**-0.5)  # both branches meet at the warm-up step
    assert noam_factor(15999, d_model, warmup) == pytest.approx(512**-0.5 * 16000**-0.5)
    assert noam_factor(0, d_model, warmup, factor=2.0) == pytest.approx(2 * noam_factor(0, d_model, warmup))
    values = [noam_factor(s, d_model, warmup) for s in range(8000)]
    assert max(values) == peak and values.index(peak) == warmup - 1


def test_noam_schedule_drives_an_optimizer():
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([param], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    schedule = get_noam_schedule(optimizer, d_model=64, warmup_steps=10)
    seen = []
    for _ in range(20):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert seen == pytest.approx([noam_factor(s, 64, 10) for s in range(20)])
    with pytest.raises(ValueError, match="warmup_steps must be an integer >= 1"):
        get_noam_schedule(optimizer, d_model=64, warmup_steps=0)
