"""Swin, DETR (ResNet and Swin backbones) and Deformable DETR (base, box refinement, two-stage) trained a few steps
with hf_xcv and exported to transformers' own types: transformers alone, in a process where hf_xcv cannot be
imported, gives the same outputs and, from the exported processor, the same pixels; transformers -> hf_xcv ->
transformers gives back the same weights; ``--verify`` checks each."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import torch
import transformers
import yaml
from detection_testing import padded_batch, randomize_norms
from export_testing import assert_same_outputs, in_transformers_alone
from PIL import Image

import hf_xcv
from hf_xcv import preset_config
from hf_xcv.cli import export_to_transformers
from hf_xcv.conversion.export import export_checkpoint

SWIN = dict(image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4)
DETR = dict(d_model=16, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=5, num_labels=3)  # fmt: skip
DEFORMABLE = {
    "base": {},
    "box_refine": {"with_box_refine": True},
    "two_stage": {"with_box_refine": True, "two_stage": True},
}
# The pipeline each family's export is run through (task, arguments): every query's detection, every class.
PIPELINES = {"swin": ("image-classification", {"top_k": 3}), "detr": ("object-detection", {"threshold": 0.0}),
             "deformable": ("object-detection", {"threshold": 0.0})}  # fmt: skip
RESNET = dict(depths=[1, 1, 1, 1], hidden_sizes=[8, 16, 32, 64], embedding_size=8)
LABELS = [
    {"class_labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.5, 0.5, 0.4, 0.3], [0.3, 0.6, 0.2, 0.2]])},
    {"class_labels": torch.tensor([1]), "boxes": torch.tensor([[0.4, 0.4, 0.3, 0.5]])},
]


def swin_classifier():
    return hf_xcv.SwinForImageClassification(hf_xcv.SwinConfig(**SWIN, num_labels=3))


def detr(backbone: str):
    if backbone == "resnet":
        return hf_xcv.DetrForObjectDetection(preset_config("detr-test-tiny", num_labels=3))
    swin = hf_xcv.SwinConfig(**SWIN, out_features=["stage2"])
    return hf_xcv.DetrForObjectDetection(hf_xcv.DetrConfig(backbone_config=swin, **DETR))


def deformable(variant: str, backbone: str = "resnet"):
    if backbone == "resnet":
        return hf_xcv.DeformableDetrForObjectDetection(
            preset_config("deformable-detr-test-tiny", num_labels=3, **DEFORMABLE[variant])
        )
    swin = hf_xcv.SwinConfig(**SWIN, out_features=["stage1", "stage2"])
    config = hf_xcv.DeformableDetrConfig(
        backbone_config=swin, **{**DETR, "d_model": 32}, num_feature_levels=3, encoder_n_points=2,
        decoder_n_points=2, two_stage_num_proposals=5, **DEFORMABLE[variant],
    )  # fmt: skip
    return hf_xcv.DeformableDetrForObjectDetection(config)


# name -> (model builder, processor, trained: labels are given)
TRAINED = {
    "swin": (swin_classifier, lambda: hf_xcv.XcvSwinImageProcessor(crop_size=32, crop_pct=0.875)),
    "detr-resnet": (
        lambda: detr("resnet"), lambda: hf_xcv.XcvDetrImageProcessor(size={"shortest_edge": 48, "longest_edge": 96})
    ),
    "detr-swin": (lambda: detr("swin"), None),
    **{f"deformable-{v}": (lambda v=v: deformable(v), lambda: hf_xcv.XcvDeformableDetrImageProcessor(
        size={"shortest_edge": 40, "longest_edge": 72})) for v in DEFORMABLE},
    "deformable-two_stage-swin": (lambda: deformable("two_stage", "swin"), None),
}  # fmt: skip
UNTRAINED = {
    "swin-model": lambda: hf_xcv.SwinModel(hf_xcv.SwinConfig(**SWIN)),
    "swin-backbone": lambda: hf_xcv.SwinBackbone(hf_xcv.SwinConfig(**SWIN, out_features=["stage1", "stage2"])),
}


def inputs_for(model) -> dict[str, torch.Tensor]:
    if isinstance(model, hf_xcv.modeling_detection.DetectionTransformerPreTrainedModel):
        pixels, mask = padded_batch()
        return {"pixel_values": pixels, "pixel_mask": mask}
    return {"pixel_values": torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))}


def train_a_few_steps(model, inputs: dict[str, torch.Tensor], steps: int = 3) -> None:
    """A few AdamW steps on the model's own loss, so that no weight keeps its initial value."""
    is_detector = "pixel_mask" in inputs
    labels = LABELS if is_detector else torch.tensor([0, 2])
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(steps):
        model(**inputs, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every case trained (or drawn at random), saved with its processor, exported, and run by transformers alone."""
    workdir = tmp_path_factory.mktemp("exports")
    env = {**os.environ, "HF_HOME": str(workdir / "hf-home")}
    image = (np.random.RandomState(0).rand(30, 44, 3) * 255).astype("uint8")
    cases, jobs = {}, []
    for name, build in [*((n, b) for n, (b, _) in TRAINED.items()), *UNTRAINED.items()]:
        torch.manual_seed(0)
        model = build()
        randomize_norms(model)
        inputs = inputs_for(model)
        if name in TRAINED:
            train_a_few_steps(model, inputs)
        model.eval().save_pretrained(workdir / name / "ours")
        make_processor = TRAINED.get(name, (None, None))[1]
        processor = make_processor() if make_processor else None
        if processor is not None:
            processor.save_pretrained(workdir / name / "ours")
        export_checkpoint(workdir / name / "ours", workdir / name / "theirs")
        with torch.no_grad():
            ours = model(**inputs)
        pixels = dict(processor(image, return_tensors="pt")) if processor is not None else None
        cases[name] = (ours, pixels)
        task = PIPELINES.get(name.split("-")[0]) if processor is not None else None
        if task is not None:  # hf_xcv's own pipeline on the hf_xcv folder, transformers' on the export
            runner = transformers.pipeline(task[0], model=str(workdir / name / "ours"))
            pixels["pipeline"] = runner(Image.fromarray(image), **task[1])
        job = {"folder": workdir / name / "theirs", "inputs": inputs, "image": image if processor else None}
        jobs.append({**job, "pipeline": task})
    results = in_transformers_alone(jobs, env, workdir)
    return {name: (*cases[name], result) for name, result in zip(cases, results, strict=True)}


@pytest.mark.parametrize("name", [*TRAINED, *UNTRAINED])
def test_exported_models_give_the_same_outputs_in_transformers_alone(exported, name):
    ours, _, theirs = exported[name]
    compared = assert_same_outputs(ours, theirs, atol=1e-4)
    expected = {"swin": ["logits"], "swin-model": ["last_hidden_state"], "swin-backbone": ["feature_maps"]}
    assert compared == expected.get(name, ["logits", "pred_boxes", "last_hidden_state"])


@pytest.mark.parametrize("name", [name for name, (_, processor) in TRAINED.items() if processor is not None])
def test_exported_processors_are_transformers_own_with_the_same_pixels_and_pipeline_results(exported, name):
    _, pixels, theirs = exported[name]
    ours_pipeline = pixels.pop("pipeline")
    assert theirs["processor"].startswith("transformers.models.")
    assert set(pixels) == set(theirs["pixels"])
    for key, value in pixels.items():
        torch.testing.assert_close(theirs["pixels"][key].to(value.dtype), value, atol=1e-5, rtol=0)
    assert len(theirs["pipeline"]) == len(ours_pipeline) > 0
    for a, b in zip(theirs["pipeline"], ours_pipeline, strict=True):  # same labels, scores and boxes, in order
        assert a["label"] == b["label"] and a["score"] == pytest.approx(b["score"], abs=1e-4)
        assert a.get("box") == b.get("box") or max(abs(a["box"][k] - b["box"][k]) for k in a["box"]) <= 1


def transformers_originals() -> dict[str, torch.nn.Module]:
    """transformers' own models of each exportable kind, random (norms included)."""
    swin_config = dict(SWIN, num_labels=3)
    models = {
        "swin": transformers.SwinForImageClassification(transformers.SwinConfig(**swin_config)),
        "swin-backbone": transformers.SwinBackbone(transformers.SwinConfig(**SWIN, out_features=["stage1", "stage2"])),
        "detr-resnet": transformers.DetrForObjectDetection(transformers.DetrConfig(
            use_timm_backbone=False, backbone_config=transformers.ResNetConfig(**RESNET, out_features=["stage4"]),
            **DETR)),
        "detr-swin": transformers.DetrForObjectDetection(transformers.DetrConfig(
            use_timm_backbone=False, backbone_config=transformers.SwinConfig(**SWIN, out_features=["stage2"]), **DETR)),
    }  # fmt: skip
    for variant, settings in DEFORMABLE.items():
        backbone = transformers.ResNetConfig(**RESNET, out_features=["stage2", "stage3", "stage4"])
        config = transformers.DeformableDetrConfig(
            use_timm_backbone=False, backbone_config=backbone, **{**DETR, "d_model": 32}, encoder_n_points=2,
            decoder_n_points=2, two_stage_num_proposals=5, **settings,
        )  # fmt: skip
        models[f"deformable-{variant}"] = transformers.DeformableDetrForObjectDetection(config)
    return models


ORIGINALS = ["swin", "swin-backbone", "detr-resnet", "detr-swin", *(f"deformable-{v}" for v in DEFORMABLE)]


@pytest.mark.parametrize("name", ORIGINALS)
def test_transformers_to_hf_xcv_to_transformers_gives_back_the_same_weights(tmp_path, name):
    torch.manual_seed(0)
    original = transformers_originals()[name].eval()
    randomize_norms(original)
    original.save_pretrained(tmp_path / "original")
    entry_class = getattr(hf_xcv, type(original).__name__)
    entry_class.from_pretrained(tmp_path / "original").save_pretrained(tmp_path / "ours")  # converts on load
    export_checkpoint(tmp_path / "ours", tmp_path / "back")
    back = type(original).from_pretrained(tmp_path / "back").eval()
    expected, returned = original.state_dict(), back.state_dict()
    assert set(returned) == set(expected)
    # transformers' SwinBackbone holds a final norm its forward never reads; hf_xcv's has none, so it comes back new
    is_backbone = name in ("swin-backbone", "detr-swin")
    unread = [key for key in expected if is_backbone and re.search(r"(^|backbone\.model\.)swin\.layernorm\.", key)]
    assert len(unread) == (2 if is_backbone else 0)
    for key, value in expected.items():
        assert key in unread or torch.equal(returned[key], value), key


@pytest.mark.parametrize("name", ["swin-backbone", "detr-swin", "deformable-two_stage"])
def test_the_command_verifies_each_kind(tmp_path, capsys, name):
    torch.manual_seed(0)
    model = {**UNTRAINED, **{n: b for n, (b, _) in TRAINED.items()}}[name]()
    randomize_norms(model)
    model.save_pretrained(tmp_path / "ours")
    export_to_transformers.main(["--input", str(tmp_path / "ours"), "--output", str(tmp_path / "theirs"), "--verify"])
    delta = float(re.search(r"max \|delta\| = (\S+)", capsys.readouterr().out).group(1))
    assert delta <= 1e-4


def test_the_exported_card_keeps_the_results_and_says_it_was_exported(tmp_path):
    torch.manual_seed(0)
    swin_classifier().save_pretrained(tmp_path / "ours")
    results = [{"task": {"type": "image-classification"}, "dataset": {"name": "digits", "type": "digits"},
                "metrics": [{"type": "accuracy", "value": 0.97, "name": "Accuracy"}]}]  # fmt: skip
    metadata = {"license": "apache-2.0", "library_name": "hf_xcv", "tags": ["xcv_swin"], "datasets": ["digits"],
                "model-index": [{"name": "swin-digits", "results": results}]}  # fmt: skip
    body = "# swin-digits\n\nTrained on digits.\n\n## Use without hf_xcv\n\nExport it.\n"
    card = f"---\n{yaml.safe_dump(metadata)}---\n\n{body}"
    (tmp_path / "ours" / "README.md").write_text(card)
    export_checkpoint(tmp_path / "ours", tmp_path / "theirs")
    text = (tmp_path / "theirs" / "README.md").read_text()
    written = yaml.safe_load(text.split("---")[1])
    assert written["model-index"] == metadata["model-index"]
    assert written["license"] == "apache-2.0" and written["datasets"] == ["digits"]
    assert written["library_name"] == "transformers" and "swin" in written["tags"]
    assert "Exported from" in text and "Trained on digits." in text
    assert "Export it." not in text  # the source's instructions to export itself are gone
    assert json.loads((tmp_path / "theirs" / "config.json").read_text())["model_type"] == "swin"


def test_the_exported_card_of_a_plain_save_drops_the_instructions_to_export_it(tmp_path):
    torch.manual_seed(0)
    swin_classifier().save_pretrained(tmp_path / "ours")  # hf_xcv's own card, with its "Use without hf_xcv"
    assert "hf-xcv-convert to-transformers" in (tmp_path / "ours" / "README.md").read_text()
    export_checkpoint(tmp_path / "ours", tmp_path / "theirs")
    text = (tmp_path / "theirs" / "README.md").read_text()
    assert "Exported from" in text
    assert "hf-xcv-convert to-transformers --input" not in text and "hf_xcv:use-without" not in text


EXPORTED_PRESETS = sorted(n for n, p in hf_xcv.PRESETS.items() if hf_xcv.MODEL_TYPES[p.model_type].exporter)
# Presets of exported types whose configuration transformers' architecture cannot hold, and why.
REFUSED = {
    r".*-dc5": r"dilation \(DC5",  # transformers dilates only a timm backbone
    r"transformer-.*": r"sinusoidal_layout='interleaved'",  # the paper's positions; Marian's are half/half
    r"vit-digits": r"pooling other than the \[CLS\] token",  # the demo's ViT pools the mean
}


@pytest.mark.parametrize("name", EXPORTED_PRESETS)
def test_every_preset_of_an_exported_type_exports_to_the_same_parameters_or_is_refused_by_name(name):
    """Built on the meta device (no memory, no time): the config transformers gets from the exporter holds as many
    parameters as hf_xcv's model of the preset (the decoder's copies of Deformable DETR's heads aside); what it
    cannot hold is refused, by name."""
    from hf_xcv.conversion.inverse import transformers_model
    from hf_xcv.registry import find_exporter

    preset = hf_xcv.PRESETS[name]
    config = preset_config(name)
    exporter = find_exporter(preset.model_type)
    refusal = next((message for pattern, message in REFUSED.items() if re.fullmatch(pattern, name)), None)
    if refusal is not None:
        with pytest.raises(ValueError, match=refusal):
            exporter.export_config(config.to_dict())
        return
    target = exporter.export_config(config.to_dict())
    with torch.device("meta"):
        ours = next(iter(hf_xcv.MODEL_TYPES[preset.model_type].heads.values()))(config)
        theirs = transformers_model(target)
    copies = re.compile(r"model\.decoder\.(class_embed|bbox_embed)\..*")  # equal to the heads (see the weight tests)
    count = lambda model: sum(p.numel() for n, p in model.named_parameters() if not copies.fullmatch(n))  # noqa: E731
    assert count(theirs) == count(ours)


def test_an_exported_folder_names_no_hf_xcv_code_and_loads_with_trust_remote_code_too(tmp_path):
    """The export is transformers' own classes: the processor's auto_map (hf_xcv's remote code) stays behind, so a
    user who passes trust_remote_code=True out of habit gets transformers' classes, not a missing-file error."""
    torch.manual_seed(0)
    swin_classifier().save_pretrained(tmp_path / "ours")
    hf_xcv.XcvSwinImageProcessor(crop_size=32, crop_pct=0.875).save_pretrained(tmp_path / "ours")
    assert "auto_map" in json.loads((tmp_path / "ours" / "preprocessor_config.json").read_text())
    export_checkpoint(tmp_path / "ours", tmp_path / "theirs")
    for name in ("config.json", "preprocessor_config.json"):
        assert "auto_map" not in json.loads((tmp_path / "theirs" / name).read_text()), name
    assert not list((tmp_path / "theirs").glob("*.py"))
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "theirs", trust_remote_code=True)
    model = transformers.AutoModelForImageClassification.from_pretrained(tmp_path / "theirs", trust_remote_code=True)
    assert type(processor).__module__.startswith("transformers.") and type(model).__module__.startswith("transformers.")
