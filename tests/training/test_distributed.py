"""Every task model under DDP and FSDP2 in two gloo processes on the CPU equals one process on the whole batch
(losses and gradients), and a sharded torch.distributed.checkpoint of the FSDP2 model reloads into an unsharded
model with equal outputs. The processes run tests/distributed_workers.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from distributed_workers import batch, build
from helpers import REPO_ROOT, TESTS_DIR, free_port
from model_testing import HEADS
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("distributed")
    script = TESTS_DIR / "distributed_workers.py"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, str(script), str(out), str(free_port())], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return out, torch.load(out / "results.pt", weights_only=False)


def single_process(model_type: str, head: type) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model = build(model_type, head)
    loss = model(**batch(model)).loss
    loss.backward()
    return loss.detach(), {name: param.grad for name, param in model.named_parameters() if param.requires_grad}


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
@pytest.mark.parametrize("case", HEADS, ids=lambda case: case[2].__name__)
def test_two_processes_equal_one_on_the_whole_batch(runs, case, mode):
    model_type, _, head = case
    _, results = runs
    got = results[head.__name__][mode]
    loss, grads = single_process(model_type, head)
    torch.testing.assert_close(got["loss"], loss, atol=1e-5, rtol=1e-5)
    assert set(got["grads"]) == set(grads)
    for name, grad in grads.items():
        torch.testing.assert_close(got["grads"][name], grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("case", HEADS, ids=lambda case: case[2].__name__)
def test_a_sharded_checkpoint_reloads_into_an_unsharded_model(runs, case, tmp_path):
    model_type, _, head = case
    out, results = runs
    dcp_to_torch_save(out / f"dcp-{head.__name__}", tmp_path / "full.pt")
    state = torch.load(tmp_path / "full.pt", weights_only=True)["model"]
    model = build(model_type, head)
    model.load_state_dict(state)
    inputs = {k: v for k, v in batch(model).items() if k != "labels"}
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs)[0], results[head.__name__]["fsdp"]["output"], atol=1e-5, rtol=1e-5)
