"""The vanilla Transformer: masks, cache, beam search, loss, variants, bad inputs."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from safetensors.torch import load_file

import hf_xcv
from hf_xcv import TransformerForConditionalGeneration, TransformerModel, preset_config
from hf_xcv.layers import sinusoidal_table
from hf_xcv.losses import label_smoothed_loss
from hf_xcv.models.transformer import shift_tokens_right


def tiny(seed: int = 0, **overrides) -> TransformerForConditionalGeneration:
    torch.manual_seed(seed)
    return TransformerForConditionalGeneration(preset_config("transformer-test-tiny", **overrides)).eval()


def source_batch(config, batch: int = 3, length: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, config.vocab_size, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[-1, length // 2 :] = 0
    return {"input_ids": ids.masked_fill(mask == 0, config.pad_token_id), "attention_mask": mask}


def test_sinusoidal_layouts_follow_the_paper_formula():
    table = sinusoidal_table(50, 16, "interleaved").double()
    half = sinusoidal_table(50, 16, "half").double()
    for pos, i in itertools.product((0, 7, 49), range(8)):
        angle = pos / 10000 ** (2 * i / 16)
        assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-7)
        assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-7)
        assert half[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-7)
        assert half[pos, 8 + i].item() == pytest.approx(math.cos(angle), abs=1e-7)


def test_padding_in_the_source_does_not_change_the_other_rows_or_the_padded_row():
    model = tiny()
    batch = source_batch(model.config)
    decoder_input_ids = torch.tensor([[1, 5, 6, 7]] * 3)
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input_ids).logits
        length = int(batch["attention_mask"][-1].sum())
        alone = model(input_ids=batch["input_ids"][-1:, :length], decoder_input_ids=decoder_input_ids[:1]).logits
    torch.testing.assert_close(logits[-1:], alone, atol=1e-5, rtol=1e-5)


def test_decoder_is_causal_later_target_tokens_change_nothing_before_them():
    model = tiny()
    batch = source_batch(model.config)
    target = torch.randint(4, 300, (3, 6))
    changed = target.clone()
    changed[:, 4:] = torch.randint(4, 300, (3, 2))
    with torch.no_grad():
        a = model(**batch, decoder_input_ids=target).logits
        b = model(**batch, decoder_input_ids=changed).logits
    torch.testing.assert_close(a[:, :4], b[:, :4], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_incremental_decoding_with_the_cache_equals_rerunning_the_prefix():
    model = tiny()
    batch = source_batch(model.config)
    target = torch.cat([torch.ones(3, 1, dtype=torch.long), torch.randint(4, 300, (3, 6))], dim=1)
    with torch.no_grad():
        full = model(**batch, decoder_input_ids=target, use_cache=False).logits  # (B, T, V)
        encoder_outputs = model.get_encoder()(**batch)
        cache, steps = None, []
        for t in range(target.shape[1]):
            out = model(
                attention_mask=batch["attention_mask"],
                encoder_outputs=encoder_outputs,
                decoder_input_ids=target[:, t : t + 1],
                cache=cache,
                use_cache=True,
            )
            cache = out.cache
            steps.append(out.logits)
    assert cache.get_seq_length() == target.shape[1]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_with_and_without_cache_gives_the_same_tokens(num_beams):
    model = tiny(init_std=0.3)
    batch = source_batch(model.config)
    settings = dict(num_beams=num_beams, max_new_tokens=10, do_sample=False)
    with torch.no_grad():
        cached = model.generate(**batch, **settings, use_cache=True)
        uncached = model.generate(**batch, **settings, use_cache=False)
    assert torch.equal(cached, uncached)
    assert (cached[:, 0] == model.config.decoder_start_token_id).all()


def exhaustive_best(model, batch, steps: int, banned: int) -> tuple[list[int], float]:
    """The highest-scoring continuation of ``steps`` tokens by brute force: every sequence scored in full."""
    vocab = [t for t in range(model.config.decoder_vocab_size) if t != banned]
    sequences = torch.tensor(list(itertools.product(vocab, repeat=steps)))  # (N, steps)
    starts = torch.full((len(sequences), 1), model.config.decoder_start_token_id)
    with torch.no_grad():
        encoded = model.get_encoder()(**batch).last_hidden_state.expand(len(sequences), -1, -1)
        logits = model(encoder_outputs=(encoded,), decoder_input_ids=torch.cat([starts, sequences[:, :-1]], 1)).logits
    log_probs = torch.log_softmax(logits.double(), dim=-1)  # (N, steps, V)
    scores = log_probs.gather(2, sequences[..., None]).sum(dim=(1, 2))  # (N,)
    best = scores.argmax()
    return sequences[best].tolist(), scores[best].item()


def test_beam_search_finds_the_exhaustive_optimum_where_greedy_does_not():
    """With num_beams >= vocab^(steps-1) beam search keeps every prefix: it must return the brute-force optimum.

    The seed is one where the greedy path is worse, so the test checks real beam behaviour (a beam that
    was not the best after the first step wins).
    """
    model = tiny(seed=25, vocab_size=6, init_std=1.0)
    steps, eos = 3, model.config.eos_token_id
    batch = {"input_ids": torch.tensor([[4, 5, 3, 2]])}
    best, best_score = exhaustive_best(model, batch, steps, banned=eos)
    settings = dict(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, length_penalty=1.0)
    with torch.no_grad():
        beam = model.generate(**batch, num_beams=25, output_scores=True, return_dict_in_generate=True, **settings)
        greedy = model.generate(**batch, num_beams=1, **settings)
    assert beam.sequences[0, 1:].tolist() == best
    # transformers divides the summed log-probabilities by length ** length_penalty (generated tokens + start)
    assert beam.sequences_scores[0].item() == pytest.approx(best_score / steps, abs=1e-5)
    assert best == [4, 5, 5] and greedy[0, 1:].tolist() == [5, 5, 5]  # greedy's first choice loses


def test_label_smoothing_loss_matches_a_hand_computation():
    logits = torch.tensor([[[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4], [1.0, 1.0, 1.0, 5.0]]])
    labels = torch.tensor([[0, 3, -100]])
    eps, vocab = 0.1, 4
    by_hand = 0.0
    for t, y in enumerate([0, 3]):
        log_p = [x - math.log(sum(math.exp(v) for v in logits[0, t].tolist())) for x in logits[0, t].tolist()]
        by_hand += -(1 - eps) * log_p[y] - eps / vocab * sum(log_p)
    assert label_smoothed_loss(logits, labels, eps).item() == pytest.approx(by_hand / 2, rel=1e-6)
    # Trainer passes the token count of all accumulated micro-batches: the sum is divided by it instead
    assert label_smoothed_loss(logits, labels, eps, num_items_in_batch=8).item() == pytest.approx(by_hand / 8, rel=1e-6)
    assert label_smoothed_loss(logits, labels, 0.0).item() == pytest.approx(
        torch.nn.functional.cross_entropy(logits[0, :2], labels[0, :2]).item(), rel=1e-6
    )


def test_labels_give_teacher_forcing_and_the_configured_smoothing():
    model = tiny(label_smoothing=0.2)
    batch = source_batch(model.config)
    labels = torch.tensor([[5, 6, 7, 2], [8, 9, 2, -100], [10, 2, -100, -100]])
    with torch.no_grad():
        out = model(**batch, labels=labels)
        decoder_input_ids = shift_tokens_right(labels, model.config.pad_token_id, model.config.decoder_start_token_id)
        explicit = model(**batch, decoder_input_ids=decoder_input_ids)
    assert decoder_input_ids.tolist()[2] == [1, 10, 2, 0]
    torch.testing.assert_close(out.logits, explicit.logits)
    assert out.loss.item() == pytest.approx(label_smoothed_loss(explicit.logits, labels, 0.2).item(), rel=1e-6)
    assert out.cache is None  # no cache is built when training


@pytest.mark.parametrize(
    "overrides",
    [
        {"normalize_before": True},
        {"position_embedding_type": "learned"},
        {"sinusoidal_layout": "half", "scale_embedding": False, "activation_function": "gelu"},
        {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 200, "tie_word_embeddings": False},
        {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 200, "lm_head_bias": True},
    ],
    ids=["pre-ln", "learned-positions", "marian-layout", "separate-vocab-untied", "separate-vocab-tied"],
)
def test_variants_train_save_and_reload_exactly(overrides, tmp_path):
    model = tiny(**overrides).train()
    batch = source_batch(model.config)
    labels = torch.randint(4, model.config.decoder_vocab_size, (3, 5))
    model(**batch, labels=labels).loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    assert model.lm_head.weight.shape[0] == model.config.decoder_vocab_size
    if overrides.get("normalize_before"):
        assert model.model.encoder.layer_norm is not None and model.model.decoder.layer_norm is not None
    model.eval().save_pretrained(tmp_path)
    reloaded = TransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(model(**batch, labels=labels).logits, reloaded(**batch, labels=labels).logits)


def test_embedding_ties_survive_save_and_load(tmp_path):
    model = tiny()
    encoder, decoder = model.model.encoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight
    assert model.lm_head.weight is encoder and decoder is encoder
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert "model.encoder.embed_tokens.weight" in saved
    assert "lm_head.weight" not in saved and "model.decoder.embed_tokens.weight" not in saved
    assert not any("table" in key for key in saved)  # sinusoids are recomputed, never stored
    reloaded = TransformerForConditionalGeneration.from_pretrained(tmp_path)
    assert reloaded.lm_head.weight is reloaded.model.encoder.embed_tokens.weight
    assert reloaded.model.decoder.embed_tokens.weight is reloaded.model.encoder.embed_tokens.weight
    untied = tiny(share_encoder_decoder_embeddings=False, tie_word_embeddings=False)
    assert untied.lm_head.weight is not untied.model.decoder.embed_tokens.weight
    assert untied.model.decoder.embed_tokens.weight is not untied.model.encoder.embed_tokens.weight


def test_sinusoids_are_rebuilt_when_loading():
    model = TransformerForConditionalGeneration.from_pretrained(_saved_tiny())
    table = model.model.encoder.embed_positions.table
    assert torch.equal(table, sinusoidal_table(*table.shape, "interleaved"))


_SAVED: dict[str, str] = {}


def _saved_tiny() -> str:
    import tempfile

    if "dir" not in _SAVED:
        _SAVED["dir"] = tempfile.mkdtemp(prefix="hf_xcv-tiny-")
        tiny().save_pretrained(_SAVED["dir"])
    return _SAVED["dir"]


def test_base_model_returns_decoder_states_and_encoder_output():
    torch.manual_seed(0)
    model = TransformerModel(preset_config("transformer-test-tiny")).eval()
    batch = source_batch(model.config)
    with torch.no_grad():
        out = model(**batch, decoder_input_ids=torch.ones(3, 4, dtype=torch.long))
    assert out.last_hidden_state.shape == (3, 4, 32)
    assert out.encoder_last_hidden_state.shape == (3, 8, 32)


def test_decoder_and_cross_attention_maps_respect_the_masks():
    model = tiny()
    batch = source_batch(model.config)  # the last row is padded from position 4
    with torch.no_grad():
        out = model(**batch, decoder_input_ids=torch.ones(3, 5, dtype=torch.long), output_attentions=True)
    assert len(out.decoder_attentions) == len(out.cross_attentions) == model.config.decoder_layers
    self_maps, cross_maps = out.decoder_attentions[0], out.cross_attentions[0]
    assert self_maps.shape == (3, 4, 5, 5) and cross_maps.shape == (3, 4, 5, 8)
    torch.testing.assert_close(self_maps.sum(-1), torch.ones(3, 4, 5))
    torch.testing.assert_close(cross_maps.sum(-1), torch.ones(3, 4, 5))
    assert (self_maps.triu(diagonal=1) == 0).all()  # nothing from the future
    assert (cross_maps[-1, :, :, 4:] == 0).all()  # nothing from source padding


def test_sampling_is_reproducible_with_a_seed_and_differs_across_seeds():
    model = tiny(init_std=0.5)
    batch = source_batch(model.config)
    settings = dict(do_sample=True, top_k=50, temperature=1.5, max_new_tokens=12, min_new_tokens=12)
    with torch.no_grad():
        torch.manual_seed(1)
        first = model.generate(**batch, **settings)
        torch.manual_seed(1)
        again = model.generate(**batch, **settings)
        torch.manual_seed(2)
        other = model.generate(**batch, **settings)
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_a_plain_dynamic_cache_is_taken_as_the_self_attention_cache():
    from transformers.cache_utils import DynamicCache

    model = tiny()
    batch = source_batch(model.config)
    with torch.no_grad():
        expected = model(**batch, decoder_input_ids=torch.ones(3, 1, dtype=torch.long), use_cache=False).logits
        out = model(**batch, decoder_input_ids=torch.ones(3, 1, dtype=torch.long), cache=DynamicCache(), use_cache=True)
    torch.testing.assert_close(out.logits, expected)
    assert out.cache.get_seq_length() == 1


def test_bad_inputs_raise_clear_errors():
    model = tiny()
    config = model.config
    start = torch.ones(1, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="empty input"):
        model(input_ids=torch.zeros(1, 0, dtype=torch.long), decoder_input_ids=start)
    with pytest.raises(ValueError, match="marks no token at all in batch rows \\[1\\]"):
        model(
            input_ids=torch.full((2, 3), 5),
            attention_mask=torch.tensor([[1, 1, 0], [0, 0, 0]]),
            decoder_input_ids=torch.ones(2, 1, dtype=torch.long),
        )
    too_long = torch.full((1, config.max_position_embeddings + 1), 5)
    with pytest.raises(ValueError, match="longer than max_position_embeddings=64; truncate"):
        model(input_ids=too_long, decoder_input_ids=start)
    with pytest.raises(ValueError, match="token ids must lie in \\[0, 300\\)"):
        model(input_ids=torch.tensor([[5, 300]]), decoder_input_ids=start)
    with pytest.raises(ValueError, match="attention_mask must be \\(batch, 3\\)"):
        model(input_ids=torch.full((1, 3), 5), attention_mask=torch.ones(1, 4), decoder_input_ids=start)
    with pytest.raises(ValueError, match="decoder_input_ids"):
        model(input_ids=torch.full((1, 3), 5))
    with pytest.raises(ValueError, match="labels must be \\(batch, target_length >= 1\\)"):
        model(input_ids=torch.full((1, 3), 5), labels=torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="input_ids must be \\(batch, length\\)"):
        model(input_ids=torch.full((3,), 5), decoder_input_ids=start)


def test_generation_stops_at_the_last_position_and_keeps_its_output(caplog):
    """Asked for more tokens than the decoder has positions, generate stops at the limit with a warning
    instead of failing at that step and losing what it generated."""
    model = tiny(max_position_embeddings=8, init_std=0.3)
    source = torch.tensor([[5, 6, 2]])
    with caplog.at_level("WARNING", logger="hf_xcv.modeling_utils"):
        out = model.generate(input_ids=source, max_new_tokens=20, min_new_tokens=20)
    assert out.shape == (1, 9)  # the start token, 7 fed back through positions 1..7, and the last one
    assert "generation stops at 9 tokens" in caplog.text
    assert torch.equal(model.generate(input_ids=source, max_new_tokens=8, min_new_tokens=8), out)
    # a decoder input longer than the positions (teacher forcing) names what overflowed
    with pytest.raises(ValueError, match="the target sequence of 9 tokens.*max_position_embeddings=8"):
        model(input_ids=source, decoder_input_ids=torch.full((1, 9), 4))


def test_auto_tokenizer_loads_the_transformer_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = hf_xcv.train_tokenizer(["one two three", "un deux trois"] * 20, vocab_size=300)
    tokenizer.save_pretrained(tmp_path)
    tiny(vocab_size=len(tokenizer)).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded) is hf_xcv.TransformerTokenizerFast
    assert loaded("one two").input_ids == tokenizer("one two").input_ids
