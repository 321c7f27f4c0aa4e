"""Running exported checkpoints in transformers alone: a fresh Python process in which ``import hf_xcv`` fails, as on
a machine without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

# Makes hf_xcv unimportable in the process it runs in (as if it were not installed).
BLOCK_HF_XCV = """
import importlib.abc, sys
class _NoHfXcv(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hf_xcv" or name.startswith("hf_xcv."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _NoHfXcv())
"""

# Loads each job's folder with transformers' own classes, runs the model on the job's inputs and the processor (if
# the folder has one) on the job's image; every output in a file for the parent to compare.
_RUN_ALONE = """
import sys, numpy as np, torch, transformers
from PIL import Image
jobs = torch.load(sys.argv[1], weights_only=False)
results = []
for job in jobs:
    config = transformers.AutoConfig.from_pretrained(job["folder"])
    model = getattr(transformers, config.architectures[0]).from_pretrained(job["folder"]).eval()
    with torch.no_grad():
        out = model(**job["inputs"])
    result = {{name: out[name] for name in {names!r} if out.get(name) is not None}}
    if job.get("image") is not None:
        processor = transformers.AutoImageProcessor.from_pretrained(job["folder"])
        result["processor"] = type(processor).__module__
        result["pixels"] = dict(processor(job["image"], return_tensors="pt"))
    if job.get("pipeline") is not None:
        task, arguments = job["pipeline"]
        runner = transformers.pipeline(task, model=job["folder"])
        result["pipeline"] = runner(Image.fromarray(job["image"]), **arguments)
    results.append(result)
assert not any(name.split(".")[0] == "hf_xcv" for name in sys.modules)
torch.save(results, sys.argv[2])
"""

COMPARED = ("logits", "pred_boxes", "last_hidden_state", "feature_maps")


def in_transformers_alone(jobs: list[dict[str, Any]], env: dict[str, str], workdir: Path) -> list[dict[str, Any]]:
    """Each job (``folder``, ``inputs`` for the model, optionally an ``image`` for the processor) run by
    transformers in one fresh process where hf_xcv cannot be imported; the outputs of each."""
    jobs_file, results_file = workdir / "jobs.pt", workdir / "results.pt"
    torch.save([{**job, "folder": str(job["folder"])} for job in jobs], jobs_file)
    code = BLOCK_HF_XCV + _RUN_ALONE.format(names=COMPARED)
    result = subprocess.run(
        [sys.executable, "-c", code, str(jobs_file), str(results_file)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(results_file, weights_only=False)


def assert_same_outputs(ours: Any, theirs: dict[str, Any], atol: float = 1e-4) -> list[str]:
    """hf_xcv's outputs equal transformers' (within ``atol``) for every compared output both have; their names."""
    compared = []
    for name in COMPARED:
        if getattr(ours, name, None) is None or name not in theirs:
            continue
        a, b = getattr(ours, name), theirs[name]
        for x, y in zip(a, b, strict=True) if isinstance(a, (tuple, list)) else [(a, b)]:
            torch.testing.assert_close(x, y, atol=atol, rtol=0)
        compared.append(name)
    return compared
