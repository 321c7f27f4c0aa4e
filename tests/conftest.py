"""Test session setup: an isolated Hub server on 127.0.0.1 and an isolated HF cache.

huggingface_hub reads HF_ENDPOINT when it is imported, so the server starts and the environment is
set here, before anything imports transformers or hf_xcv.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from minihub import make_server  # noqa: E402
from timeouts import pytest_configure, pytest_runtest_call  # noqa: E402, F401  (every test's time limit)

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="hf_xcv-tests-"))
_SERVER = make_server("127.0.0.1", 0, str(_SESSION_DIR / "hub-data"), lfs="auto", user="testuser")
threading.Thread(target=_SERVER.serve_forever, daemon=True).start()
HUB_ENDPOINT = f"http://127.0.0.1:{_SERVER.server_address[1]}"

os.environ.update(
    {
        "HF_ENDPOINT": HUB_ENDPOINT,
        "HF_TOKEN": "hf_dummy_test_token",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HOME": str(_SESSION_DIR / "hf-home"),
        "HF_EVALUATE_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
)


def _shutdown() -> None:
    _SERVER.shutdown()
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)


atexit.register(_shutdown)

import pytest  # noqa: E402
import torch  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def hub_endpoint() -> str:
    return HUB_ENDPOINT


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def subprocess_env(tmp_path) -> dict[str, str]:
    """Environment for a fresh Python process: same Hub server, a fresh empty HF cache."""
    env = dict(os.environ)
    env["HF_HOME"] = str(tmp_path / "fresh-hf-home")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
