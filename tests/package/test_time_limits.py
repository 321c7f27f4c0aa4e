"""The suite's per-test time limit (tests/timeouts.py): a hung test fails fast, with the stacks of what hung."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from helpers import TESTS_DIR

INNER_TESTS = """
import subprocess
import sys
import time

import pytest


@pytest.mark.timeout(4)
def test_a_child_that_hangs(tmp_path):
    script = tmp_path / "stuck.py"
    body = "def wait_for_a_peer_that_left():\\n    time.sleep(600)\\n\\n"
    script.write_text("import time\\n\\n" + body + "wait_for_a_peer_that_left()\\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.timeout(2)
def test_that_hangs_itself():
    time.sleep(600)


@pytest.mark.timeout(30)
def test_in_time():
    time.sleep(0.1)
"""


def test_a_hung_test_fails_after_its_limit_with_the_stacks_of_the_stuck_processes(tmp_path):
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER_TESTS))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(TESTS_DIR), "HOME": str(tmp_path)}
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "timeouts", "-p", "no:cacheprovider", "-q", "test_inner.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    took = time.monotonic() - start
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "2 failed, 1 passed" in out, out
    assert "test_a_child_that_hangs ran past its time limit of 4 s; sent SIGABRT to" in out, out
    assert "wait_for_a_peer_that_left" in out, out  # the child's own stack, printed by faulthandler
    assert "test_that_hangs_itself ran past its time limit of 2 s" in out and "time.sleep(600)" in out, out
    assert took < 60, out  # not the 600 s the tests would have slept
