"""What transformers' own text models do and the Transformer and XFormer models must do too: resized
vocabularies, inputs_embeds, the old past_key_values name, get_encoder by modality, generation modes they
cannot serve refused by name, generation that stops at the last position."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

import hf_xcv
from hf_xcv import preset_config


def translator(**overrides) -> hf_xcv.TransformerForConditionalGeneration:
    torch.manual_seed(0)
    return hf_xcv.TransformerForConditionalGeneration(preset_config("transformer-test-tiny", **overrides)).eval()


def causal_lm(**overrides) -> hf_xcv.XFormerForCausalLM:
    torch.manual_seed(0)
    return hf_xcv.XFormerForCausalLM(preset_config("xformer-test-tiny", **overrides)).eval()


def source(model, length: int = 6) -> torch.Tensor:
    return torch.randint(4, model.config.vocab_size, (2, length), generator=torch.Generator().manual_seed(1))


def test_resize_token_embeddings_takes_the_new_ids_and_saves(tmp_path):
    model = translator()  # shared source/target embeddings, tied lm_head
    old = model.config.vocab_size
    model.resize_token_embeddings(old + 8)
    assert model.config.vocab_size == model.config.decoder_vocab_size == old + 8
    ids = torch.tensor([[old + 7, 5, 2]])
    with torch.no_grad():
        logits = model(input_ids=ids, decoder_input_ids=torch.tensor([[old + 3, 4]])).logits
    assert logits.shape[-1] == old + 8
    model.save_pretrained(tmp_path)
    reloaded = hf_xcv.TransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=ids, decoder_input_ids=torch.tensor([[old + 3, 4]])).logits, logits)
    lm = causal_lm()
    lm.resize_token_embeddings(lm.config.vocab_size + 4)
    with torch.no_grad():
        assert lm(torch.tensor([[lm.config.vocab_size - 1, 5]])).logits.shape[-1] == lm.config.vocab_size


def test_separate_target_embeddings_resize_on_their_own():
    model = translator(share_encoder_decoder_embeddings=False, tie_word_embeddings=False)
    target = model.config.decoder_vocab_size
    model.resize_token_embeddings(model.config.vocab_size + 5)
    assert model.config.decoder_vocab_size == target and model.lm_head.out_features == target
    model.resize_decoder_token_embeddings(target + 3)
    assert model.config.decoder_vocab_size == target + 3 and model.lm_head.out_features == target + 3
    with torch.no_grad():
        model(input_ids=torch.tensor([[model.config.vocab_size - 1]]), decoder_input_ids=torch.tensor([[target + 2]]))
    with pytest.raises(ValueError, match="share their embeddings"):
        translator().resize_decoder_token_embeddings(10)


def test_inputs_embeds_from_the_input_embeddings_equal_the_ids():
    model = translator()
    ids, target = source(model), source(model, 4)
    with torch.no_grad():
        expected = model(input_ids=ids, decoder_input_ids=target).logits
        embeds = model.get_input_embeddings()(ids)  # scaled by sqrt(d_model), as the model adds positions to it
        decoder_embeds = model.get_decoder().embed_tokens(target)
        got = model(inputs_embeds=embeds, decoder_inputs_embeds=decoder_embeds).logits
    torch.testing.assert_close(got, expected, atol=0, rtol=0)


def test_past_key_values_is_the_old_name_of_cache():
    model = translator()
    ids, target = source(model), source(model, 3)
    with torch.no_grad():
        first = model(input_ids=ids, decoder_input_ids=target[:, :2], use_cache=True)
        expected = model(input_ids=ids, decoder_input_ids=target[:, 2:], cache=first.cache).logits
        first = model(input_ids=ids, decoder_input_ids=target[:, :2], use_cache=True)
        with pytest.warns(FutureWarning, match="past_key_values is deprecated"):
            got = model(input_ids=ids, decoder_input_ids=target[:, 2:], past_key_values=first.cache).logits
    torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match="not both"):
        model(input_ids=ids, decoder_input_ids=target, cache=DynamicCache(), past_key_values=DynamicCache())
    lm = causal_lm()
    with torch.no_grad(), pytest.warns(FutureWarning):
        lm(source(lm), past_key_values=DynamicCache(), use_cache=True)


def test_get_encoder_returns_the_text_encoder_only_for_text():
    model = translator()
    assert model.get_encoder() is model.model.encoder
    for modality in ("image", "audio"):  # no such encoder: transformers' convention is the model itself
        assert model.get_encoder(modality=modality) is model
        assert model.model.get_encoder(modality=modality) is model.model


def test_static_caches_are_refused_by_name():
    for model, inputs in ((translator(), {}), (causal_lm(), {})):
        ids = source(model, 3)
        with pytest.raises(ValueError, match="cache_implementation='static' is not supported by .*DynamicCache"):
            model.generate(ids, max_new_tokens=3, cache_implementation="static", **inputs)


def test_assisted_and_prompt_lookup_decoding_without_a_key_value_cache_are_refused_by_name():
    lm = causal_lm(attention_type="linear", attention_kwargs={"chunk_size": 4})
    ids = source(lm, 5)[:1]  # assisted decoding takes one sequence
    with pytest.raises(ValueError, match="assisted generation is not supported with stateful models"):
        lm.generate(ids, max_new_tokens=3, prompt_lookup_num_tokens=2)
    with pytest.raises(ValueError, match="assisted generation is not supported with stateful models"):
        lm.generate(ids, max_new_tokens=3, assistant_model=causal_lm(attention_type="linear"))
    full = causal_lm()  # with a key/value cache it works, and equals greedy decoding
    greedy = full.generate(ids, max_new_tokens=4, do_sample=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assisted = full.generate(ids, max_new_tokens=4, do_sample=False, prompt_lookup_num_tokens=2)
    assert torch.equal(assisted, greedy)


def test_a_causal_lm_generates_up_to_its_last_position(caplog):
    lm = causal_lm(max_position_embeddings=12, position_embedding_type="learned")
    ids = source(lm, 5)
    with caplog.at_level("WARNING", logger="hf_xcv.modeling_utils"):
        out = lm.generate(ids, max_new_tokens=30, min_new_tokens=30)
    assert out.shape == (2, 13) and "generation stops at 13 tokens" in caplog.text
    assert lm.generate(source(lm, 12), max_new_tokens=3).shape == (2, 13)  # a prompt on every position: one token
    with pytest.raises(ValueError, match="the prompt has 13 tokens, but XFormerForCausalLM has 12 positions"):
        lm.generate(source(lm, 13), max_new_tokens=3)
    relative = causal_lm(attention_type="xl", max_position_embeddings=12)  # no absolute positions: no limit
    assert relative.generate(ids, max_new_tokens=10, min_new_tokens=10).shape == (2, 15)


def test_encoder_decoder_cache_is_still_kept_for_every_core_that_serves_it():
    model = translator()
    out = model(input_ids=source(model), decoder_input_ids=source(model, 2), use_cache=True)
    assert isinstance(out.cache, EncoderDecoderCache)
