"""Multi-process runs leave nothing distributed alive when ``main`` returns, however they end, and never hang at
exit: every ending of two scripts under ``accelerate launch`` while other processes load the machine."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import accelerate_launcher

WORKER = Path(__file__).with_name("teardown_worker.py")
ENDINGS = {"finished": "returned", "stopped": "stopped", "failed": "raised"}


@pytest.fixture
def load():
    """Two busy processes beside the run: the machine under load, as in CI."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for burner in burners:
        burner.kill()
        burner.wait()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("task, endings", [("image-classification", list(ENDINGS)), ("object-detection", ["failed"])])
def test_every_ending_of_a_two_process_run_leaves_nothing_alive(task, endings, load, subprocess_env, tmp_path):
    subprocess_env["OMP_NUM_THREADS"] = "1"
    for ending in endings:
        outcome = ENDINGS[ending]
        command = [*accelerate_launcher(2), str(WORKER), str(tmp_path / ending), task, ending]
        result = subprocess.run(command, env=subprocess_env, capture_output=True, text=True)
        reports = [json.loads(found) for found in re.findall(r"TEARDOWN (\{[^{}]*\})", result.stdout)]
        log = result.stdout[-2000:] + result.stderr[-12000:]
        assert len(reports) == 2, log  # both processes reached the end of main
        for report in reports:
            assert report["outcome"] == outcome and not report["group"] and report["ddp_alive"] == 0, report
            assert report["state_reset"], report  # released by distributed_main, not torn down early by finish
        assert result.returncode == 0, log  # and exited (the worker reports the injected failure)
