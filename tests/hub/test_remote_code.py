"""Remote code (:mod:`hf_xcv.remote_code`): every registered model type saved by hf_xcv loads through transformers'
Auto classes and ``pipeline`` with ``trust_remote_code=True`` in a process that never imports hf_xcv, with outputs
equal to hf_xcv's own, on the installed transformers and on the oldest pyproject.toml allows; without hf_xcv the
error names the package to install. One worker process (tests/remote_code_worker.py) per transformers version
loads every type; the oldest transformers lives in .cache/transformers-oldest (scripts/setup.sh puts it there)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys

import numpy as np
import PIL.Image
import pytest
import torch
import transformers
from helpers import REPO_ROOT, TESTS_DIR
from huggingface_hub import HfApi
from model_testing import MODEL_CASES, case_id, make_inputs, tiny_config
from packaging.version import Version
from remote_code_worker import flat_tensors, qualified
from transformers.dynamic_module_utils import get_imports

import hf_xcv
from hf_xcv import MODEL_TYPES
from hf_xcv.auto import auto_class_name, pipeline_tag
from hf_xcv.layers import to_pair
from hf_xcv.remote_code import PACKAGE, add_remote_code, config_auto_map, custom_pipelines, module_name

OLDEST_TRANSFORMERS = REPO_ROOT / ".cache" / "transformers-oldest"
HUB_TYPE = "xcv_vit"  # the type whose task model and processor make the push_to_hub round trip
SENTENCES = ["the cat sat on the mat", "un chat"]
PYPROJECT = (REPO_ROOT / "pyproject.toml").read_text()


def oldest_allowed_transformers() -> Version:
    """The lower bound of pyproject.toml's transformers requirement."""
    return Version(re.search(r'^\s*"transformers>=([\d.]+)', PYPROJECT, re.MULTILINE).group(1))


def check_oldest_transformers() -> None:
    """Fail (never skip: CI must run these tests on it) unless .cache/transformers-oldest holds the oldest
    transformers pyproject.toml allows."""
    floor = oldest_allowed_transformers()
    found = [p.name[len("transformers-") : -len(".dist-info")] for p in OLDEST_TRANSFORMERS.glob("*.dist-info")]
    if [Version(version) for version in found] != [floor] or not (OLDEST_TRANSFORMERS / "transformers").is_dir():
        pytest.fail(
            f"{OLDEST_TRANSFORMERS} holds transformers {found or 'none'}, not {floor}, the oldest pyproject.toml "
            f"allows: run `bash scripts/setup.sh` (its OLDEST_TRANSFORMERS must be {floor})"
        )


def random_image(height: int, width: int, seed: int) -> PIL.Image.Image:
    return PIL.Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


def takes_references(processor) -> bool:
    """Whether a processor (and so the pipeline of its models) takes reference images besides the images (TTSR)."""
    return "references" in inspect.signature(type(processor).__call__).parameters


def make_processor(entry):
    """The type's image processor (for the tiny model's image size, where it has one) or tokenizer (trained on a few
    words), or None."""
    if hasattr(entry.image_processor, "for_image_size"):
        return entry.image_processor.for_image_size(to_pair(tiny_config(entry.model_type).image_size))
    if entry.image_processor is not None:
        return entry.image_processor()
    if entry.tokenizer is not None:
        tokenizer = hf_xcv.train_tokenizer(SENTENCES * 20, vocab_size=300)
        assert type(tokenizer) is entry.tokenizer
        return tokenizer
    return None


def processor_call(processor, root) -> dict:
    """A processor's call on sample inputs, as the worker makes it (images are the PNG files of ``root``)."""
    if hasattr(processor, "get_vocab"):
        return {"text": SENTENCES, "padding": True}
    call = {"images": str(root / "image.png")}
    if takes_references(processor):
        call["references"] = str(root / "reference.png")
    return call


def open_images(call: dict) -> dict:
    return {key: PIL.Image.open(v) if str(v).endswith(".png") else v for key, v in call.items()}


def task_pipelines(model_type: str) -> list[tuple[str, type]]:
    """(task, task model) of the type's task models that a pipeline task of transformers runs with the type's image
    processor (image classification, object detection)."""
    entry = MODEL_TYPES[model_type]
    tasks = [(pipeline_tag(head), head) for head in entry.heads.values()]
    return [
        (task, head) for task, head in tasks if entry.image_processor and task in transformers.pipelines.SUPPORTED_TASKS
    ]


def model_items(root, processors: dict, expected: dict) -> list[dict]:
    """Every model class of every type saved with its type's processor or tokenizer (AutoBackbone's classes and
    HUB_TYPE's task models pushed to the Hub: transformers resolves AutoBackbone there only), and what hf_xcv's own
    model gives on the type's dummy inputs."""
    items = []
    for model_type, cls in MODEL_CASES:
        name, auto, processor = case_id((model_type, cls)), auto_class_name(cls), processors[model_type]
        torch.manual_seed(0)
        model = cls(tiny_config(model_type)).eval()
        inputs = make_inputs(model, labels=False)
        with torch.no_grad():
            expected[name] = flat_tensors(model(**inputs))
        torch.save(inputs, root / f"{name}.inputs.pt")
        if auto == "AutoBackbone" or (model_type == HUB_TYPE and cls in MODEL_TYPES[model_type].heads.values()):
            source = f"testuser/remote-code-{name.lower()}"
            for part in (model, processor):
                if part is not None:
                    part.push_to_hub(source)
        else:
            source = str(root / name)
            for part in (model, processor):
                if part is not None:
                    part.save_pretrained(source)
        items.append({"name": name, "auto": auto, "source": source, "inputs": str(root / f"{name}.inputs.pt")})
    return items


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The worker's plan (every model class; each type's processor or tokenizer saved alone, as the training scripts
    and users save them; each custom pipeline; the loads that must fail without hf_xcv) and what hf_xcv computes."""
    root = tmp_path_factory.mktemp("remote-code")
    random_image(20, 16, 1).save(root / "image.png")
    random_image(40, 32, 2).save(root / "reference.png")
    processors = {model_type: make_processor(entry) for model_type, entry in MODEL_TYPES.items()}
    expected: dict = {}
    items, blocked = model_items(root, processors, expected), []
    sources = {item["name"]: item["source"] for item in items}  # a model's folder or Hub repo
    for model_type, entry in MODEL_TYPES.items():
        processor, name = processors[model_type], f"processor-{model_type}"
        if processor is not None:
            processor.save_pretrained(root / name)
            auto = "AutoTokenizer" if hasattr(processor, "get_vocab") else "AutoImageProcessor"
            call = processor_call(processor, root)
            items.append({"name": name, "auto": auto, "source": str(root / name), "call": call})
            blocked.append({"name": name, "auto": auto, "source": str(root / name)})
            expected[name] = (processor, call)
        for task, pipeline in custom_pipelines(entry).items():  # the config's: transformers infers the task
            head = entry.heads[pipeline["pt"][0]]
            call = {"images": str(root / "image.png")}
            if takes_references(processor):
                call["reference"] = str(root / "reference.png")
            source = sources[case_id((model_type, head))]
            items.append({"name": f"custom-{task}-{model_type}", "auto": "pipeline", "source": source, "call": call})
            blocked.append(items[-1])
        for task, head in task_pipelines(model_type):
            source = sources[case_id((model_type, head))]
            call = {"images": str(root / "image.png"), **({"threshold": 0.0} if task == "object-detection" else {})}
            items.append({"name": f"{task}-{model_type}", "auto": "pipeline", "task": task, "source": source,
                          "call": call})  # fmt: skip
    first = items[0]
    blocked += [{"name": "config", "auto": "AutoConfig", "source": first["source"]}, {**first, "name": "model"}]
    resaved = next(item for item in items if item.get("inputs") and not item["source"].startswith("testuser/"))
    resaved["resave"] = str(root / "resaved")
    plan = {"threads": torch.get_num_threads(), "blocked": blocked, "items": items}
    (root / "plan.json").write_text(json.dumps(plan, indent=1))
    return {"root": root, "plan": plan, "expected": expected, "resaved": resaved}


@pytest.fixture(scope="module", params=["installed", "oldest"])
def worker(request, saved, tmp_path_factory):
    """The worker's results on the installed transformers or on the oldest pyproject.toml allows."""
    out = tmp_path_factory.mktemp(f"worker-{request.param}")
    env = dict(os.environ, HF_HOME=str(out / "hf-home"))
    paths = [str(REPO_ROOT), env.get("PYTHONPATH", "")]
    if request.param == "oldest":
        check_oldest_transformers()
        paths.insert(0, str(OLDEST_TRANSFORMERS))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    command = [sys.executable, str(TESTS_DIR / "remote_code_worker.py"), str(saved["root"] / "plan.json"), str(out)]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    return {"version": request.param, "out": out, **json.loads((out / "results.json").read_text())}


def item_result(worker, name: str) -> dict:
    result = worker["items"][name]
    assert "error" not in result, result["error"]
    return result


def test_the_worker_runs_that_transformers_and_does_not_import_hf_xcv(worker):
    expected = oldest_allowed_transformers() if worker["version"] == "oldest" else Version(transformers.__version__)
    assert Version(worker["transformers"]) == expected
    assert worker["hf_xcv_imported_before_loading"] is False


@pytest.mark.parametrize("case", MODEL_CASES, ids=case_id)
def test_every_model_class_loads_by_remote_code_with_hf_xcvs_outputs(worker, saved, case):
    name = case_id(case)
    result = item_result(worker, name)
    assert result["class"] == qualified(case[1])
    assert result["config_class"] == qualified(MODEL_TYPES[case[0]].config)
    outputs = torch.load(worker["out"] / f"{name}.pt", weights_only=True)
    expected = saved["expected"][name]
    assert sorted(outputs) == sorted(expected)
    for key, tensor in expected.items():
        assert torch.equal(outputs[key], tensor), f"{key}: max difference {(outputs[key] - tensor).abs().max()}"


@pytest.mark.parametrize("model_type", [t for t, e in MODEL_TYPES.items() if e.image_processor or e.tokenizer])
def test_a_processor_or_tokenizer_saved_alone_loads_by_remote_code(worker, saved, model_type):
    name = f"processor-{model_type}"
    result = item_result(worker, name)
    processor, call = saved["expected"][name]
    assert result["class"] == qualified(type(processor))
    if "settings" in result:
        assert result["settings"] == json.loads(json.dumps(processor.to_dict(), default=str))
    outputs = torch.load(worker["out"] / f"{name}.pt", weights_only=True)
    expected = flat_tensors(processor(**open_images(call), return_tensors="pt"))
    assert sorted(outputs) == sorted(expected)
    assert all(torch.equal(outputs[key], tensor) for key, tensor in expected.items())


CUSTOM_PIPELINES = [(task, model_type) for model_type, entry in MODEL_TYPES.items() for task in entry.pipelines]


@pytest.mark.parametrize(("task", "model_type"), CUSTOM_PIPELINES, ids=[f"{t}-{m}" for t, m in CUSTOM_PIPELINES])
def test_transformers_pipeline_runs_the_familys_pipeline_by_remote_code(worker, saved, task, model_type):
    """IPT and TTSR through ``transformers.pipeline(model=folder, trust_remote_code=True)``: the config's custom task,
    hf_xcv's pipeline class, the same image as hf_xcv's pipeline gives."""
    item = next(i for i in saved["plan"]["items"] if i["name"] == f"custom-{task}-{model_type}")
    result = item_result(worker, item["name"])
    path = MODEL_TYPES[model_type].pipelines[task]
    assert result["task"] == task and result["class"] == path
    module, name = path.rsplit(".", 1)
    auto = getattr(transformers, custom_pipelines(MODEL_TYPES[model_type])[task]["pt"][0])
    pipe = getattr(importlib.import_module(module), name)(
        model=auto.from_pretrained(item["source"]),
        image_processor=transformers.AutoImageProcessor.from_pretrained(item["source"]),
        device="cpu",
    )
    call = open_images(item["call"])
    expected = np.asarray(pipe(call.pop("images"), **call))
    image = torch.load(worker["out"] / f"{item['name']}.pt", weights_only=True)["image"]
    assert np.array_equal(image.numpy(), expected)


TASK_PIPELINES = [(task, model_type) for model_type in MODEL_TYPES for task, _ in task_pipelines(model_type)]


@pytest.mark.parametrize(("task", "model_type"), TASK_PIPELINES, ids=[f"{t}-{m}" for t, m in TASK_PIPELINES])
def test_transformers_pipeline_of_a_task_runs_by_remote_code(worker, saved, task, model_type):
    """``transformers.pipeline(task, model=folder, trust_remote_code=True)`` gives what it gives with hf_xcv."""
    item = next(i for i in saved["plan"]["items"] if i["name"] == f"{task}-{model_type}")
    result = item_result(worker, item["name"])
    assert result["task"] == task
    call = open_images(item["call"])
    expected = transformers.pipeline(task, model=item["source"], device="cpu")(call.pop("images"), **call)
    assert result["output"] == json.loads(json.dumps(expected))


def test_without_hf_xcv_every_load_names_the_package_to_install(worker, saved):
    errors = worker["errors_without_hf_xcv"]
    assert sorted(errors) == sorted(item["name"] for item in saved["plan"]["blocked"])
    for name, error in errors.items():
        assert error is not None, f"{name} loaded without hf_xcv"
        assert f"not found in your environment: {PACKAGE}." in error and f"pip install {PACKAGE}`" in error, error


def test_push_to_hub_then_load_by_remote_code(worker, saved):
    """The Hub items (the round trip, and AutoBackbone, which transformers resolves on the Hub only) loaded above;
    the repos hold the generated module."""
    hub_items = [item for item in saved["plan"]["items"] if item["source"].startswith("testuser/") and "inputs" in item]
    assert any(item["auto"] != "AutoBackbone" for item in hub_items)
    for item in hub_items:
        item_result(worker, item["name"])
        files = set(HfApi().list_repo_files(item["source"]))
        model_type = item["name"].split("-")[0]
        assert {"config.json", f"{module_name(MODEL_TYPES[model_type])}.py"} <= files


def test_a_model_loaded_by_remote_code_saves_like_hf_xcv(worker, saved):
    """transformers registers a class it loaded by remote code for its next save (which would copy its source
    file): hf_xcv's classes save their generated module instead."""
    item = saved["resaved"]
    item_result(worker, item["name"])
    model_type = item["name"].split("-")[0]
    folder = saved["root"] / "resaved"
    assert [f.name for f in folder.glob("*.py")] == [f"{module_name(MODEL_TYPES[model_type])}.py"]
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == config_auto_map(MODEL_TYPES[model_type])


# ---------------------------------------------------------------------------------------------------------------
# What a save writes (in this process)


def test_the_generated_module_imports_hf_xcv_only_under_its_distribution_name(tmp_path):
    assert re.search(r'^name = "([^"]+)"', PYPROJECT, re.MULTILINE).group(1) == PACKAGE  # the pip name
    for entry in MODEL_TYPES.values():
        tiny_config(entry.model_type).save_pretrained(tmp_path / entry.model_type)
        module = tmp_path / entry.model_type / f"{module_name(entry)}.py"
        assert get_imports(module) == [PACKAGE]
        namespace: dict = {}
        exec(compile(module.read_text(), str(module), "exec"), namespace)
        references = [*config_auto_map(entry).values(), *(p["impl"] for p in custom_pipelines(entry).values())]
        for reference in references:
            file, name = reference.split(".")
            assert file == module_name(entry) and namespace[name].__module__.startswith("hf_xcv.")


@pytest.mark.parametrize("model_type", sorted(MODEL_TYPES))
def test_every_save_writes_the_registrys_auto_map(model_type, tmp_path):
    entry = MODEL_TYPES[model_type]
    tiny_config(model_type).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    expected = {"AutoConfig": entry.config, "AutoModel": entry.base_model, **entry.heads}
    if entry.backbone is not None:
        expected["AutoBackbone"] = entry.backbone
    assert config["auto_map"] == {auto: f"{module_name(entry)}.{cls.__name__}" for auto, cls in expected.items()}
    assert config.get("custom_pipelines", {}) == custom_pipelines(entry)
    assert (tmp_path / f"{module_name(entry)}.py").is_file()
    if entry.image_processor is not None:
        entry.image_processor().save_pretrained(tmp_path / "processor")
        saved = json.loads((tmp_path / "processor" / "preprocessor_config.json").read_text())
        assert saved["auto_map"] == {"AutoImageProcessor": f"{module_name(entry)}.{entry.image_processor.__name__}"}
        assert (tmp_path / "processor" / f"{module_name(entry)}.py").is_file()


def test_a_folder_saved_before_loads_with_hf_xcv_and_gets_the_remote_code_by_a_new_save_or_add_remote_code(tmp_path):
    torch.manual_seed(0)
    model = hf_xcv.IPTForImageRestoration(tiny_config("xcv_ipt")).eval()
    processor = hf_xcv.IPTImageProcessor()
    for part in (model, processor):
        part.save_pretrained(tmp_path / "new")
        part.save_pretrained(tmp_path / "old")
    old = {
        name: json.loads((tmp_path / "old" / name).read_text()) for name in ("config.json", "preprocessor_config.json")
    }
    for saved in old.values():  # what hf_xcv wrote before: no auto_map, a pipeline path that cannot load, no module
        del saved["auto_map"]
    old["config.json"]["custom_pipelines"]["image-to-image"]["impl"] = "hf_xcv.pipelines.ImageRestorationPipeline"
    for name, saved in old.items():
        (tmp_path / "old" / name).write_text(json.dumps(saved))
    (tmp_path / "old" / "xcv_ipt.py").unlink()

    loaded = transformers.AutoModelForImageToImage.from_pretrained(tmp_path / "old")
    inputs = make_inputs(model, labels=False)
    with torch.no_grad():
        assert torch.equal(loaded(**inputs).reconstruction, model(**inputs).reconstruction)
    assert loaded.config.custom_pipelines == custom_pipelines(MODEL_TYPES["xcv_ipt"])
    loaded.save_pretrained(tmp_path / "again")
    add_remote_code(tmp_path / "old")
    for folder in ("again", "old"):
        assert (tmp_path / folder / "xcv_ipt.py").read_text() == (tmp_path / "new" / "xcv_ipt.py").read_text()
        config = json.loads((tmp_path / folder / "config.json").read_text())
        assert config["auto_map"] == config_auto_map(MODEL_TYPES["xcv_ipt"])
        assert config["custom_pipelines"] == custom_pipelines(MODEL_TYPES["xcv_ipt"])
    new_processor = json.loads((tmp_path / "new" / "preprocessor_config.json").read_text())
    assert json.loads((tmp_path / "old" / "preprocessor_config.json").read_text()) == new_processor


def test_with_hf_xcv_imported_its_own_registration_serves_trust_remote_code(tmp_path):
    """An auto_map changes nothing where hf_xcv is imported: its registered classes load the folder, with or
    without trust_remote_code, and no module of the folder is run."""
    torch.manual_seed(0)
    hf_xcv.ViTForImageClassification(tiny_config("xcv_vit")).save_pretrained(tmp_path)
    modules = set(sys.modules)
    for trust in (None, True):
        model = transformers.AutoModelForImageClassification.from_pretrained(tmp_path, trust_remote_code=trust)
        assert type(model) is hf_xcv.ViTForImageClassification
    assert not any(name.startswith("transformers_modules") for name in set(sys.modules) - modules)


def test_save_pretrained_with_push_to_hub_uploads_the_module(tmp_path):
    repo = "testuser/remote-code-save-and-push"
    hf_xcv.XcvViTImageProcessor().save_pretrained(tmp_path / "processor", push_to_hub=True, repo_id=repo)
    hf_xcv.preset_config("vit-test-tiny").save_pretrained(tmp_path / "config", push_to_hub=True, repo_id=repo)
    assert {"xcv_vit.py", "preprocessor_config.json", "config.json"} <= set(HfApi().list_repo_files(repo))


def test_declared_pipelines_are_transformers_pipelines():
    for entry in MODEL_TYPES.values():
        for task, path in entry.pipelines.items():
            module, name = path.rsplit(".", 1)
            assert issubclass(getattr(importlib.import_module(module), name), transformers.Pipeline), task
