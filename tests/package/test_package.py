"""The package itself: registration on import, no network, Auto classes in a fresh process."""

from __future__ import annotations

import importlib
import json
import sys

import numpy as np
import PIL.Image
import pytest
import torch
from helpers import run_python

import hf_xcv

NO_NETWORK = """
import socket
def refuse(*args, **kwargs):
    raise RuntimeError("network access attempted")
socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
"""


def test_import_registers_everything_and_touches_no_network(subprocess_env):
    result = run_python(
        NO_NETWORK
        + """
import hf_xcv
import transformers
from transformers import AutoConfig, AutoModel
from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING
for model_type, entry in hf_xcv.MODEL_TYPES.items():
    config = AutoConfig.for_model(model_type)
    assert type(config) is entry.config
    assert type(AutoModel.from_config(config)) is entry.base_model
    for auto_name, head in entry.heads.items():
        assert type(getattr(transformers, auto_name).from_config(config)) is head
    if entry.image_processor is not None:
        assert IMAGE_PROCESSOR_MAPPING[entry.config]["pil"] is entry.image_processor
    if entry.tokenizer is not None:
        assert TOKENIZER_MAPPING[entry.config] is entry.tokenizer
print("ok")
""",
        subprocess_env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"


def test_auto_round_trip_in_a_fresh_process(tmp_path, subprocess_env):
    config = hf_xcv.preset_config("vit-test-tiny", num_labels=3)
    model = hf_xcv.ViTForImageClassification(config).eval()
    processor = hf_xcv.XcvViTImageProcessor(size={"height": 16, "width": 16})
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    image = PIL.Image.fromarray(np.random.default_rng(0).integers(0, 255, (16, 16, 3), dtype=np.uint8))
    image.save(tmp_path / "image.png")
    with torch.no_grad():
        expected = model(processor(image, return_tensors="pt")["pixel_values"]).logits
    result = run_python(
        NO_NETWORK
        + f"""
import json, PIL.Image, torch
import hf_xcv
from transformers import AutoImageProcessor, AutoModelForImageClassification
model = AutoModelForImageClassification.from_pretrained("{tmp_path / "model"}").eval()
processor = AutoImageProcessor.from_pretrained("{tmp_path / "model"}")
with torch.no_grad():
    logits = model(processor(PIL.Image.open("{tmp_path / "image.png"}"), return_tensors="pt")["pixel_values"]).logits
print(json.dumps({{"class": type(model).__name__, "logits": logits.tolist()}}))
""",
        subprocess_env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["class"] == "ViTForImageClassification"
    assert torch.equal(torch.tensor(loaded["logits"]), expected)


def test_without_importing_hf_xcv_transformers_does_not_know_the_type(tmp_path, subprocess_env):
    """A saved folder then loads only by its remote code (hf_xcv.remote_code), which transformers runs only when
    asked to."""
    hf_xcv.ViTConfig().save_pretrained(tmp_path)
    result = run_python(
        f"""
        import os, sys
        sys.stdin = open(os.devnull)  # (on a terminal, transformers asks whether to run the folder's code)
        from transformers import CONFIG_MAPPING, AutoConfig
        assert "xcv_vit" not in CONFIG_MAPPING
        AutoConfig.from_pretrained("{tmp_path}")
        """,
        subprocess_env,
    )
    assert result.returncode != 0 and "pass the argument `trust_remote_code=True`" in result.stderr


def test_torch_requirement_admits_the_cpu_build_ci_installs():
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    requirements = [Requirement(r) for r in requires("hf_xcv")]
    core = [r for r in requirements if r.marker is None]
    torch_requirement = next(r for r in core if r.name == "torch")
    assert "2.13.0" in torch_requirement.specifier
    assert not any(r.name in ("torchvision", "timm") for r in core)


@pytest.mark.parametrize(("command", "program"), [("train", "image-classification"), ("convert", "vit")])
def test_a_programs_usage_names_the_command_typed(command, program, capsys):
    module = importlib.import_module(f"hf_xcv.{command}")
    argv0 = sys.argv[0]
    with pytest.raises(SystemExit) as exit_:
        module.main([program, "--help"])
    assert exit_.value.code == 0 and sys.argv[0] == argv0
    assert capsys.readouterr().out.startswith(f"usage: hf-xcv-{command} {program} ")
    with pytest.raises(SystemExit) as exit_:
        module.main(["nope"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith(f"hf-xcv-{command}: error: unknown program 'nope'")
