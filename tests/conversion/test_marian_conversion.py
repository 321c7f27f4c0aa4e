"""Marian (opus-mt) checkpoints -> hf_xcv Transformer: parity of logits and beam search, tokenizer kept, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import transformers
from marian_testing import build_marian_tokenizer, marian_config, random_marian
from transformers import MarianModel, MarianMTModel, MarianTokenizer

import hf_xcv
from hf_xcv.checkpoint_conversion import convert_checkpoint
from hf_xcv.conversion import CorruptCheckpointError
from hf_xcv.conversion.marian import convert_config, convert_state_dict


def batch(vocab: int = 59, seed: int = 1) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (3, 9), generator=generator)
    ids[:, -1] = 0  # </s>
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    ids[1, 6:] = 59
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian")
    model = random_marian()
    model.generation_config.num_beams = 4
    model.save_pretrained(folder)
    build_marian_tokenizer(tmp_path_factory.mktemp("spm")).save_pretrained(folder)
    return folder


def test_convert_on_load_matches_marian_logits(marian_dir):
    theirs = MarianMTModel.from_pretrained(marian_dir).eval()
    ours = hf_xcv.TransformerForConditionalGeneration.from_pretrained(marian_dir).eval()
    decoder_input_ids = torch.randint(0, 60, (3, 7), generator=torch.Generator().manual_seed(2))
    labels = torch.randint(0, 60, (3, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a = theirs(**batch(), decoder_input_ids=decoder_input_ids, labels=labels)
        b = ours(**batch(), decoder_input_ids=decoder_input_ids, labels=labels)
    assert (a.logits - b.logits).abs().max().item() <= 1e-4
    assert b.loss.item() == pytest.approx(a.loss.item(), abs=1e-5)  # conversion keeps Marian's plain CE loss
    assert ours.config.label_smoothing == 0.0 and ours.config.sinusoidal_layout == "half"


@pytest.mark.parametrize(
    "settings",
    [
        dict(num_beams=4, length_penalty=0.6, early_stopping=True),
        dict(num_beams=3, length_penalty=1.5, num_return_sequences=2),
        dict(num_beams=1),
    ],
    ids=["beam4-early-stopping", "beam3-two-returned", "greedy"],
)
def test_generation_gives_marians_tokens(marian_dir, settings):
    theirs = MarianMTModel.from_pretrained(marian_dir).eval()
    ours = hf_xcv.TransformerForConditionalGeneration.from_pretrained(marian_dir).eval()
    with torch.no_grad():
        expected = theirs.generate(**batch(), max_new_tokens=16, do_sample=False, **settings)
        got = ours.generate(**batch(), max_new_tokens=16, do_sample=False, **settings)
    assert torch.equal(expected, got)
    assert len({tuple(row) for row in got.tolist()}) > 1  # the sequences differ: a real test of the search


def test_base_marian_model_converts_to_the_bare_transformer(tmp_path):
    theirs = random_marian(MarianModel, seed=1)
    theirs.save_pretrained(tmp_path)
    ours = transformers.AutoModel.from_pretrained(tmp_path).eval()  # AutoModel of marian: transformers' own
    assert type(ours) is MarianModel
    ours = hf_xcv.TransformerModel.from_pretrained(tmp_path).eval()
    decoder_input_ids = torch.randint(0, 60, (3, 5))
    with torch.no_grad():
        a = theirs(**batch(), decoder_input_ids=decoder_input_ids)
        b = ours(**batch(), decoder_input_ids=decoder_input_ids)
    assert (a.last_hidden_state - b.last_hidden_state).abs().max().item() <= 1e-4
    assert (a.encoder_last_hidden_state - b.encoder_last_hidden_state).abs().max().item() <= 1e-4


def test_separate_source_and_target_vocabularies(tmp_path):
    theirs = random_marian(
        seed=2, share_encoder_decoder_embeddings=False, decoder_vocab_size=70, tie_word_embeddings=True
    )
    theirs.save_pretrained(tmp_path)
    ours = hf_xcv.TransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert ours.config.decoder_vocab_size == 70 and not ours.config.share_encoder_decoder_embeddings
    assert ours.lm_head.weight is ours.model.decoder.embed_tokens.weight
    decoder_input_ids = torch.randint(0, 70, (3, 5))
    with torch.no_grad():
        a = theirs(**batch(), decoder_input_ids=decoder_input_ids).logits
        b = ours(**batch(), decoder_input_ids=decoder_input_ids).logits
    assert (a - b).abs().max().item() <= 1e-4


def test_cli_converts_keeps_the_tokenizer_and_verifies(marian_dir, tmp_path, repo_root):
    out = tmp_path / "converted"
    result = subprocess.run(
        [sys.executable, "-m", "conversion.marian", "--input", str(marian_dir), "--output", str(out), "--verify"],
        cwd=repo_root,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "verified: max |delta| = " in result.stdout
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "source.spm", "target.spm"} <= names
    assert {"vocab.json", "tokenizer_config.json"} <= names
    assert json.loads((out / "config.json").read_text())["model_type"] == "xcv_transformer"
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out)
    assert isinstance(model, hf_xcv.TransformerForConditionalGeneration)
    assert model.generation_config.num_beams == 4  # the source's generation settings travel along
    original = transformers.AutoTokenizer.from_pretrained(marian_dir)
    kept = transformers.AutoTokenizer.from_pretrained(out)
    assert type(kept) is MarianTokenizer
    text = ["the cat runs in the park", "un deux trois"]
    assert kept(text).input_ids == original(text).input_ids
    again = subprocess.run(
        [sys.executable, "-m", "conversion.marian", "--input", str(marian_dir), "--output", str(out)],
        cwd=repo_root,
        capture_output=True,
        text=True,
    )
    assert again.returncode != 0 and "not empty" in again.stderr


def test_a_marian_on_the_hub_converts_on_load():
    theirs = random_marian(seed=4)
    repo = "testuser/opus-mt-toy"
    theirs.push_to_hub(repo)
    ours = hf_xcv.TransformerForConditionalGeneration.from_pretrained(repo).eval()
    assert ours.name_or_path == repo
    with torch.no_grad():
        assert torch.equal(
            theirs.generate(**batch(), num_beams=4, max_new_tokens=8),
            ours.generate(**batch(), num_beams=4, max_new_tokens=8),
        )


def test_an_old_style_folder_gets_its_tokenizer_class_and_generation_settings(marian_dir, tmp_path):
    """Folders from Marian's conversion script: no tokenizer_class, generation settings inside config.json."""
    old = tmp_path / "old"
    old.mkdir()
    for item in marian_dir.iterdir():
        (old / item.name).write_bytes(item.read_bytes())
    (old / "generation_config.json").unlink()
    (old / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "fr"}))
    config = json.loads((old / "config.json").read_text())
    config.update(bad_words_ids=[[59]], num_beams=3, max_length=12)
    (old / "config.json").write_text(json.dumps(config))
    theirs = MarianMTModel.from_pretrained(old).eval()
    out = tmp_path / "converted"
    convert_checkpoint(old, out, "xcv_transformer")
    assert type(transformers.AutoTokenizer.from_pretrained(out)) is MarianTokenizer
    ours = hf_xcv.TransformerForConditionalGeneration.from_pretrained(out).eval()
    settings = ours.generation_config
    assert (settings.num_beams, settings.bad_words_ids, settings.max_length) == (3, [[59]], 12)
    with torch.no_grad():
        assert torch.equal(theirs.generate(**batch()), ours.generate(**batch()))


def test_untied_checkpoints_of_transformers_5_convert_with_separate_embeddings(tmp_path):
    theirs = random_marian(seed=5, tie_word_embeddings=False)  # transformers 5 then unties every embedding
    theirs.save_pretrained(tmp_path)
    ours = hf_xcv.TransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert not ours.config.share_encoder_decoder_embeddings and not ours.config.tie_word_embeddings
    decoder_input_ids = torch.randint(0, 60, (3, 5))
    with torch.no_grad():
        a = theirs(**batch(), decoder_input_ids=decoder_input_ids).logits
        b = ours(**batch(), decoder_input_ids=decoder_input_ids).logits
    assert (a - b).abs().max().item() <= 1e-4


def test_a_stale_decoder_vocab_size_is_ignored_when_embeddings_are_shared():
    config = convert_config(marian_config(decoder_vocab_size=70).to_dict())
    assert config["decoder_vocab_size"] == config["vocab_size"] == 60


def test_state_dict_mapping_accounts_for_every_key():
    theirs = random_marian()
    config = theirs.config.to_dict()
    state_dict = theirs.state_dict()  # in memory: shared, both embed_tokens, positions and lm_head all present
    converted, dropped = convert_state_dict(state_dict, config)
    ours = hf_xcv.TransformerForConditionalGeneration(hf_xcv.TransformerConfig(**convert_config(config)))
    expected = set(ours.state_dict()) - {"model.decoder.embed_tokens.weight", "lm_head.weight"}  # tied
    assert set(converted) == expected
    assert sorted(dropped) == sorted(
        [
            "model.encoder.embed_positions.weight",
            "model.decoder.embed_positions.weight",
            "model.decoder.embed_tokens.weight",
            "lm_head.weight",
        ]
    )
    assert torch.equal(converted["lm_head.bias"], theirs.final_logits_bias[0])


def test_a_tied_copy_that_differs_is_refused():
    theirs = random_marian()
    state_dict = {k: v.clone() for k, v in theirs.state_dict().items()}
    state_dict["model.decoder.embed_tokens.weight"] += 1.0
    with pytest.raises(ValueError, match="model.decoder.embed_tokens.weight differs from the shared embeddings"):
        convert_state_dict(state_dict, theirs.config.to_dict())


def test_a_checkpoint_without_token_embeddings_is_named():
    theirs = random_marian()
    state_dict = {k: v for k, v in theirs.state_dict().items() if "shared" not in k and "encoder.embed_tokens" not in k}
    with pytest.raises(ValueError, match="neither model.shared.weight nor model.encoder.embed_tokens.weight"):
        convert_state_dict(state_dict, theirs.config.to_dict())


def test_learned_positions_are_refused_not_silently_replaced():
    theirs = random_marian()
    state_dict = dict(theirs.state_dict())
    state_dict["model.encoder.embed_positions.weight"] = torch.randn(64, 32)
    with pytest.raises(ValueError, match="is not Marian's fixed sinusoidal table"):
        convert_state_dict(state_dict, theirs.config.to_dict())


def test_unknown_keys_are_an_error():
    theirs = random_marian()
    state_dict = {**theirs.state_dict(), "model.encoder.adapter.weight": torch.zeros(2)}
    with pytest.raises(ValueError, match="no conversion rule"):
        convert_state_dict(state_dict, theirs.config.to_dict())


def test_a_truncated_checkpoint_is_reported(marian_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in marian_dir.iterdir():
        (broken / item.name).write_bytes(item.read_bytes())
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(CorruptCheckpointError, match="model.safetensors"):
        hf_xcv.TransformerForConditionalGeneration.from_pretrained(broken)


def test_a_vit_checkpoint_is_refused_by_name(tmp_path):
    hf_xcv.ViTModel(hf_xcv.preset_config("vit-test-tiny")).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="model_type 'xcv_vit'.*converts \\['marian'\\]"):
        hf_xcv.TransformerForConditionalGeneration.from_pretrained(tmp_path)
