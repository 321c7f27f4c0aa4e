"""What a user without ``import hf_xcv`` runs on saved hf_xcv folders and Hub repos: transformers' Auto classes and
``pipeline`` with ``trust_remote_code=True`` (the folders' remote code imports hf_xcv). Started by
tests/hub/test_remote_code.py as ``python remote_code_worker.py PLAN OUT``: first with hf_xcv made unimportable (the
errors are recorded), then as a user with hf_xcv installed; it writes ``OUT/results.json`` and each item's tensors to
``OUT/<name>.pt``. It imports nothing of hf_xcv or of the tests, and the test compares with :func:`flat_tensors`.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import torch


class HfXcvNotInstalled:
    """A meta-path finder for which hf_xcv does not exist: importing it fails as for a package that is not
    installed."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] == "hf_xcv":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def flat_tensors(output: Any) -> dict[str, torch.Tensor]:
    """The tensors of a model or processor output by name (a tuple's as ``name.0``, ``name.1``, ...)."""
    flat = {}
    for key, value in output.items():
        if isinstance(value, torch.Tensor):
            flat[key] = value
        elif isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
            flat.update({f"{key}.{index}": tensor for index, tensor in enumerate(value)})
    return flat


def qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def load(item: dict[str, Any]) -> Any:
    """``item["auto"]`` of transformers (an Auto class or ``pipeline``) loading ``item["source"]``."""
    import transformers

    if item["auto"] == "pipeline":  # the task given, or the config's custom pipeline
        return transformers.pipeline(item.get("task"), model=item["source"], trust_remote_code=True, device="cpu")
    return getattr(transformers, item["auto"]).from_pretrained(item["source"], trust_remote_code=True)


def images(arguments: dict[str, Any]) -> dict[str, Any]:
    """Call arguments with the PNG files named in them opened (text stays as it is)."""
    return {key: PIL.Image.open(v) if str(v).endswith(".png") else v for key, v in arguments.items()}


def run_item(item: dict[str, Any], out: Path) -> dict[str, Any]:
    loaded = load(item)
    result: dict[str, Any] = {"class": qualified(type(loaded))}
    call = images(item.get("call", {}))
    if item["auto"] == "pipeline":
        result["task"] = loaded.task
        output = loaded(call.pop("images"), **call)
        if isinstance(output, PIL.Image.Image):
            torch.save({"image": torch.from_numpy(np.asarray(output).copy())}, out / f"{item['name']}.pt")
        else:  # labels and scores, boxes
            result["output"] = output
    elif "inputs" in item:  # a model
        result["config_class"] = qualified(type(loaded.config))
        with torch.no_grad():
            output = loaded(**torch.load(item["inputs"], weights_only=True))
        torch.save(flat_tensors(output), out / f"{item['name']}.pt")
        if "resave" in item:  # the loaded model saves as hf_xcv saves it
            loaded.save_pretrained(item["resave"])
    else:  # an image processor or a tokenizer
        if hasattr(loaded, "to_dict") and not hasattr(loaded, "get_vocab"):
            result["settings"] = json.loads(json.dumps(loaded.to_dict(), default=str))
        torch.save(flat_tensors(loaded(**call, return_tensors="pt")), out / f"{item['name']}.pt")
    return result


def main(plan_file: str, out_dir: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    out = Path(out_dir)
    torch.set_num_threads(plan["threads"])  # the test's: equal outputs need equal reductions
    results: dict[str, Any] = {"errors_without_hf_xcv": {}, "items": {}}
    blocker = HfXcvNotInstalled()
    sys.meta_path.insert(0, blocker)
    import transformers

    results["transformers"] = transformers.__version__
    for item in plan["blocked"]:
        try:
            load(item)
            results["errors_without_hf_xcv"][item["name"]] = None
        except Exception as error:  # what the user sees is the result
            results["errors_without_hf_xcv"][item["name"]] = f"{type(error).__name__}: {error}"
    sys.meta_path.remove(blocker)
    importlib.invalidate_caches()
    results["hf_xcv_imported_before_loading"] = "hf_xcv" in sys.modules
    for item in plan["items"]:
        try:
            results["items"][item["name"]] = run_item(item, out)
        except Exception:  # each item's failure is reported by its own test
            results["items"][item["name"]] = {"error": traceback.format_exc()}
    (out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:3])
