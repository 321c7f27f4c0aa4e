"""hf_xcv checkpoints written in transformers' own format load in transformers alone (a fresh process that never
imports hf_xcv) with the same outputs; what transformers has no equivalent for is refused by name."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from marian_testing import random_marian
from model_testing import SPECS

import hf_xcv
from hf_xcv import preset_config
from hf_xcv.conversion.export import export_checkpoint

ALONE = """
import json, sys
import numpy as np, torch, transformers
assert "hf_xcv" not in sys.modules
folder, inputs = sys.argv[1], json.loads(sys.argv[2])
config = transformers.AutoConfig.from_pretrained(folder)
model = getattr(transformers, config.architectures[0]).from_pretrained(folder).eval()
tensors = {{key: torch.tensor(value) for key, value in inputs.items()}}
with torch.no_grad():
    out = model(**tensors)[0]
extra = {{}}
if {generate}:
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    extra["tokenizer"] = type(tokenizer).__name__
    extra["ids"] = tokenizer(["one two three"]).input_ids
    with torch.no_grad():
        extra["generated"] = model.generate(tensors["input_ids"], attention_mask=tensors["attention_mask"],
                                            max_new_tokens=6, num_beams=3).tolist()
if {processor}:
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    image = (np.random.RandomState(0).rand(20, 30, 3) * 255).astype("uint8")
    extra["processor"] = type(processor).__module__
    extra["pixels"] = processor(image, return_tensors="pt")["pixel_values"].flatten().tolist()
print(json.dumps({{"output": out.flatten().tolist(), **extra}}))
"""


def in_transformers_alone(folder, inputs: dict, env, generate: bool = False, processor: bool = False) -> dict:
    code = ALONE.format(generate=generate, processor=processor)
    plain = {key: value.tolist() for key, value in inputs.items()}
    result = subprocess.run(
        [sys.executable, "-c", code, str(folder), json.dumps(plain)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_vit_classifier_and_its_processor_export_to_transformers(tmp_path, subprocess_env):
    torch.manual_seed(0)
    model = hf_xcv.ViTForImageClassification(preset_config("vit-test-tiny", num_labels=3, drop_path_rate=0.1)).eval()
    model.save_pretrained(tmp_path / "ours")
    processor = hf_xcv.XcvViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.4, 0.5, 0.6])
    processor.save_pretrained(tmp_path / "ours")
    export_checkpoint(tmp_path / "ours", tmp_path / "theirs")
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    theirs = in_transformers_alone(tmp_path / "theirs", {"pixel_values": pixels}, subprocess_env, processor=True)
    with torch.no_grad():
        expected = model(pixels).logits.flatten()
    np.testing.assert_allclose(theirs["output"], expected.numpy(), atol=1e-5)
    assert theirs["processor"].startswith("transformers.")
    image = (np.random.RandomState(0).rand(20, 30, 3) * 255).astype("uint8")
    np.testing.assert_allclose(
        theirs["pixels"], processor(image, return_tensors="pt")["pixel_values"].flatten(), atol=1e-6
    )


def test_a_trained_translation_model_and_its_tokenizer_export_to_marian(tmp_path, subprocess_env):
    """A Marian-compatible Transformer with hf_xcv's own tokenizer: transformers loads both, the same logits,
    token ids and beam-search output."""
    tokenizer = hf_xcv.train_tokenizer(["one two three four", "un deux trois quatre"] * 30, vocab_size=300)
    ids = tokenizer(["one two three"]).input_ids
    config = preset_config(
        "transformer-test-tiny", vocab_size=len(tokenizer), decoder_vocab_size=len(tokenizer),
        sinusoidal_layout="half", layer_norm_eps=1e-5, init_std=0.3, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    model = hf_xcv.TransformerForConditionalGeneration(config).eval()
    model.save_pretrained(tmp_path / "ours")
    tokenizer.save_pretrained(tmp_path / "ours")
    export_checkpoint(tmp_path / "ours", tmp_path / "theirs")
    short = ids[0][:2] + [tokenizer.eos_token_id]
    source = torch.tensor([ids[0], short + [tokenizer.pad_token_id] * (len(ids[0]) - len(short))])
    mask = (source != tokenizer.pad_token_id).long()
    inputs = {"input_ids": source, "attention_mask": mask, "decoder_input_ids": torch.tensor([[4, 9, 12]] * 2)}
    theirs = in_transformers_alone(tmp_path / "theirs", inputs, subprocess_env, generate=True)
    with torch.no_grad():
        expected = model(**inputs).logits.flatten()
        generated = model.generate(source, attention_mask=mask, max_new_tokens=6, num_beams=3)
    np.testing.assert_allclose(theirs["output"], expected.numpy(), atol=1e-5)
    assert theirs["tokenizer"] in ("PreTrainedTokenizerFast", "TokenizersBackend")  # one class in transformers 5
    assert theirs["ids"] == ids
    assert theirs["generated"] == generated.tolist()


def test_a_converted_marian_model_exports_back_to_its_own_weights(tmp_path):
    marian = random_marian()
    marian.save_pretrained(tmp_path / "marian")
    ours = hf_xcv.TransformerForConditionalGeneration.from_pretrained(tmp_path / "marian")
    ours.save_pretrained(tmp_path / "ours")
    export_checkpoint(tmp_path / "ours", tmp_path / "back")
    import transformers

    back = transformers.MarianMTModel.from_pretrained(tmp_path / "back")
    original = marian.state_dict()
    for key, value in back.state_dict().items():
        assert torch.equal(value, original[key]), key


@pytest.mark.parametrize(
    ("model_type", "overrides", "message"),
    [
        ("xcv_vit", {"attention_type": "performer"}, "attention_type='performer'"),
        ("xcv_vit", {"pooling": "mean"}, "pooling other than the"),
        ("xcv_vit", {"representation_size": 16}, "representation_size"),
        ("xcv_transformer", {"normalize_before": True}, r"normalize_before=True \(Marian has False: post-LN"),
        ("xcv_transformer", {"position_embedding_type": "learned"}, "position_embedding_type='learned'"),
        ("xcv_swin", {"attention_type": "full"}, r"attention_type='full' \(transformers' Swin has shifted-window"),
        ("xcv_swin", {"window_size": 8}, r"window_size=8 on stage 2's 4x4 grid .* transformers' Swin keeps"),
        ("xcv_detr", {"encoder_attention_type": "linear"}, r"encoder_attention_type='linear' \(transformers' DETR"),
        ("xcv_detr", {"dilation": True}, r"dilation \(DC5"),
        ("xcv_deformable_detr", {"decoder_attention_type": "linear"}, "decoder_attention_type='linear'"),
    ],
)
def test_what_transformers_has_no_equivalent_for_is_refused_by_name(tmp_path, model_type, overrides, message):
    entry = hf_xcv.MODEL_TYPES[model_type]
    head = next(iter(entry.heads.values()))
    head(preset_config(SPECS[model_type].test_preset, **overrides)).save_pretrained(tmp_path / "ours")
    with pytest.raises(ValueError, match=message):
        export_checkpoint(tmp_path / "ours", tmp_path / "theirs")
    assert not (tmp_path / "theirs").exists()


def test_the_command_exports_and_verifies(tmp_path, subprocess_env):
    torch.manual_seed(0)
    hf_xcv.ViTForImageClassification(preset_config("vit-test-tiny", num_labels=3)).save_pretrained(tmp_path / "ours")
    result = subprocess.run(
        [sys.executable, "-m", "hf_xcv.convert", "to-transformers", "--input", str(tmp_path / "ours"),
         "--output", str(tmp_path / "theirs"), "--verify"],
        env=subprocess_env, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "verified" in result.stdout
    assert json.loads((tmp_path / "theirs" / "config.json").read_text())["model_type"] == "vit"
