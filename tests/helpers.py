"""Small helpers shared by the test modules."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

TESTS_DIR = Path(__file__).resolve().parent  # tests/, whose subfolders group the test modules by area
REPO_ROOT = TESTS_DIR.parent


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a fresh interpreter; the result carries rc, stdout and stderr."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def accelerate_launcher(num_processes: int) -> list[str]:
    """`accelerate launch --multi_gpu --num_processes N`: N gloo processes on a CPU machine (one each on GPUs)."""
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(num_processes),
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()),
    ]  # fmt: skip


def run_script(
    script: Path, args: list[str], env: dict[str, str], launcher: list[str] | None = None
) -> subprocess.CompletedProcess:
    """Run a training script (with ``launcher``, else this interpreter); the result carries rc, stdout, stderr."""
    command = (launcher or [sys.executable]) + [str(script), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True)


def check(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``result`` if it succeeded; else fail with the ends of its output."""
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-12000:]  # room for a hung one's stacks
    return result


def load_script(path: Path) -> ModuleType:
    """Import a script (e.g. training/train_translation.py) as a module, to call its functions."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
