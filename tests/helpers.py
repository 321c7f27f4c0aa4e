"""Small helpers shared by the test modules."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a fresh interpreter; the result carries rc, stdout and stderr."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)
