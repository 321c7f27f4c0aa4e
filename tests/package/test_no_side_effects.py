"""Importing hf_xcv changes nothing transformers does with its own repos; hf_xcv's saved type names are its own.

transformers resolves ``image_processor_type`` and ``tokenizer_class`` by class name, so a saved name equal
to one of its classes would make its own folders load hf_xcv's class after ``import hf_xcv``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers
from marian_testing import build_marian_tokenizer, random_marian
from transformers import AutoImageProcessor, AutoTokenizer, ViTConfig, ViTForImageClassification

import hf_xcv
from hf_xcv import MODEL_TYPES

PROBE = """
import json, sys
import numpy as np, torch
if {import_hf_xcv}:
    import hf_xcv  # noqa: F401
from transformers import AutoImageProcessor, AutoModelForImageClassification, AutoModelForSeq2SeqLM, AutoTokenizer

def name(obj):
    return type(obj).__module__ + "." + type(obj).__qualname__

vit, marian = sys.argv[1], sys.argv[2]
processor = AutoImageProcessor.from_pretrained(vit)
image = (np.random.RandomState(0).rand(40, 50, 3) * 255).astype("uint8")
pixels = processor(image, return_tensors="pt")["pixel_values"]
classifier = AutoModelForImageClassification.from_pretrained(vit).eval()
tokenizer = AutoTokenizer.from_pretrained(marian)
ids = tokenizer(["the cat sat on the mat", "un chien"], padding=True, return_tensors="pt")
translator = AutoModelForSeq2SeqLM.from_pretrained(marian).eval()
with torch.no_grad():
    logits = classifier(pixels).logits
    generated = translator.generate(**ids, max_new_tokens=5, num_beams=2)
print(json.dumps({{
    "classes": [name(processor), name(classifier), name(tokenizer), name(translator)],
    "pixels": pixels.flatten().tolist(), "logits": logits.flatten().tolist(),
    "ids": ids["input_ids"].tolist(), "generated": generated.tolist(),
}}))
"""


@pytest.fixture(scope="module")
def transformers_folders(tmp_path_factory):
    vit = tmp_path_factory.mktemp("vit")
    config = ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, num_labels=3,
    )  # fmt: skip
    torch.manual_seed(0)
    ViTForImageClassification(config).save_pretrained(vit)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(vit)
    marian = tmp_path_factory.mktemp("marian")
    random_marian().save_pretrained(marian)
    build_marian_tokenizer(tmp_path_factory.mktemp("spm")).save_pretrained(marian)
    return vit, marian


def probe(folders, import_hf_xcv: bool, env) -> dict:
    code = PROBE.format(import_hf_xcv=import_hf_xcv)
    result = subprocess.run(
        [sys.executable, "-c", code, str(folders[0]), str(folders[1])], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_transformers_loads_its_own_repos_the_same_after_import_hf_xcv(transformers_folders, subprocess_env):
    before = probe(transformers_folders, False, subprocess_env)
    after = probe(transformers_folders, True, subprocess_env)
    assert after["classes"] == before["classes"]
    assert all(name.startswith("transformers.") for name in before["classes"])
    for key in ("pixels", "logits", "ids", "generated"):
        assert after[key] == before[key], key


def test_saved_type_names_are_not_transformers_class_names(tmp_path):
    for model_type, entry in MODEL_TYPES.items():
        for cls in (entry.image_processor, entry.tokenizer):
            if cls is not None:
                assert not hasattr(transformers, cls.__name__), (model_type, cls.__name__)
    hf_xcv.XcvViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert saved["image_processor_type"] == "XcvViTImageProcessor"
    assert type(AutoImageProcessor.from_pretrained(tmp_path)) is hf_xcv.XcvViTImageProcessor


def test_a_tokenizer_saves_a_class_name_of_its_own(tmp_path):
    tokenizer = hf_xcv.train_tokenizer(["one two three", "un deux trois"] * 20, vocab_size=300)
    tokenizer.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert not hasattr(transformers, saved["tokenizer_class"])
    assert type(AutoTokenizer.from_pretrained(tmp_path)) is type(tokenizer)


def test_folders_saved_under_the_old_processor_name_still_load(tmp_path):
    """Earlier hf_xcv saved ``"image_processor_type": "ViTImageProcessor"``."""
    model = hf_xcv.ViTForImageClassification(hf_xcv.preset_config("vit-test-tiny", num_labels=2))
    model.save_pretrained(tmp_path)
    processor = hf_xcv.XcvViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.4, 0.5, 0.6])
    processor.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    saved["image_processor_type"] = "ViTImageProcessor"
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(saved))
    image = (np.random.RandomState(1).rand(20, 30, 3) * 255).astype("uint8")
    expected = processor(image, return_tensors="pt")["pixel_values"]
    ours = hf_xcv.XcvViTImageProcessor.from_pretrained(tmp_path)
    assert torch.equal(ours(image, return_tensors="pt")["pixel_values"], expected)
    auto = AutoImageProcessor.from_pretrained(tmp_path)  # transformers' own ViT processor: same arguments
    assert torch.equal(auto(image, return_tensors="pt")["pixel_values"], expected)
    assert type(transformers.AutoModel.from_pretrained(tmp_path)) is hf_xcv.ViTModel
