"""The families' registry entries and what is derived from them: every declared converter, exporter and conversion
program exists, ``hf-xcv-convert``'s formats are the entries' (and a checkout's ``conversion/`` wrappers match them),
presets and recipes are reachable, and a family registers itself by being imported."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest
from helpers import REPO_ROOT

import hf_xcv
from hf_xcv import registry
from hf_xcv.convert import FORMATS
from hf_xcv.models import FAMILIES


def test_every_family_registers_its_own_entry():
    owners = {entry.base_model.__module__.split(".")[2] for entry in registry.MODEL_TYPES.values()}
    assert owners == set(FAMILIES)
    for model_type, entry in registry.MODEL_TYPES.items():
        family = importlib.import_module(entry.base_model.__module__.rsplit(".", 1)[0])
        assert family.ENTRY is entry, model_type  # declared in the family's own package
        assert all(cls.__module__.startswith(family.__name__) for cls in entry.model_classes), model_type


def test_declared_converters_and_exporters_exist_and_are_pure_mappings():
    for model_type, entry in registry.MODEL_TYPES.items():
        for source, name in entry.converters.items():
            module = registry.find_converter(model_type, source)
            assert module.__name__ == name and name.startswith("hf_xcv.conversion.")
            assert callable(module.convert) and module.TARGET_MODEL_TYPE == model_type
            assert module.SOURCE_MODEL_TYPE == source
        if entry.exporter:
            module = registry.find_exporter(model_type)
            assert callable(module.export) and callable(module.export_config)
    assert registry.find_converter("xcv_vit", "swin") is None
    assert registry.exported_types() == ["xcv_deformable_detr", "xcv_detr", "xcv_swin", "xcv_transformer", "xcv_vit"]
    with pytest.raises(ValueError, match=r"'xcv_ttsr' has no transformers format to export to; exported types"):
        registry.find_exporter("xcv_ttsr")


def test_convert_formats_are_derived_from_the_entries_and_match_the_checkout_wrappers():
    declared = [fmt for entry in registry.MODEL_TYPES.values() for fmt in entry.conversion_formats]
    assert len(declared) == len(set(declared))
    assert set(FORMATS) == {*declared, "to-transformers"}
    for fmt, program in FORMATS.items():
        assert callable(importlib.import_module(program).main), fmt
    wrappers = {path.stem for path in (REPO_ROOT / "conversion").glob("*.py") if path.stem != "__init__"}
    assert wrappers == {fmt.replace("-", "_") for fmt in declared}
    for name in wrappers:  # each wrapper runs its format's program
        tree = ast.parse((REPO_ROOT / "conversion" / f"{name}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert f"hf_xcv.cli.convert_{name}" in imported, name


def test_presets_are_the_families_and_recipes_hold_options_of_their_scripts():
    assert hf_xcv.PRESETS == {n: p for e in registry.MODEL_TYPES.values() for n, p in e.presets.items()}
    from hf_xcv.cli import train_image_restoration, train_lra, train_object_detection

    scripts = {  # every family with a recipe is trained by one of these scripts
        **{t: train_object_detection.TrainArguments for t in train_object_detection.RECIPES},
        **{t: train_image_restoration.TrainArguments for t in train_image_restoration.RESTORATION_TYPES},
    }
    assert set(scripts) == {t for t, e in registry.MODEL_TYPES.items() if e.recipe is not None}
    for model_type, arguments in scripts.items():
        fields = set(inspect.signature(arguments).parameters)
        assert set(registry.MODEL_TYPES[model_type].recipe.defaults) <= fields, model_type
    lra_fields = set(inspect.signature(train_lra.TrainArguments).parameters)
    for task in ("listops", "image", "pathfinder"):
        assert set(train_lra.task_recipe(task)) <= lra_fields


def test_a_second_registration_of_a_type_or_a_preset_name_is_refused():
    entry = registry.MODEL_TYPES["xcv_vit"]
    assert registry.register_model_type(entry) is entry  # importing a family again changes nothing
    from dataclasses import replace

    assert registry.register_model_type(replace(entry)) == entry  # an equal declaration too
    with pytest.raises(ValueError, match="registered already"):
        registry.register_model_type(replace(entry, exporter=None))
    clash = replace(registry.MODEL_TYPES["xcv_swin"], presets={"vit-test-tiny": registry.Preset("xcv_swin", {})})
    with pytest.raises(ValueError, match="preset 'vit-test-tiny' of xcv_swin is a preset of xcv_vit already"):
        registry.register_model_type(clash)
    assert registry.MODEL_TYPES["xcv_swin"] is not clash
