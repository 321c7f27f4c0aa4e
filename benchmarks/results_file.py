"""Where the benchmark scripts write what they measured: ``benchmarks/results/<name>.md``, headed by the command,
commit and date of the run, so that docs/benchmarks.md includes each table as its last run wrote it (nothing is
copied by hand, and a missing file fails the docs build).

    <!-- written by benchmarks/bench_vit.py: rerun it to replace this file -->
    - command: `python benchmarks/bench_vit.py --repeats 7`
    - commit: 0123abc (+ uncommitted changes)
    - date: 2026-12-03 14:05 UTC
    - machine: <cpu>, 2 logical CPUs

    <what the script printed: its header lines and its markdown table>
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def commit() -> str:
    """The checkout's commit, marked when the code differs from it (results files aside); "unknown" outside git,
    unless ``RESULTS_COMMIT`` names it (a copy of the tree run elsewhere, e.g. on a GPU machine without git)."""
    if os.environ.get("RESULTS_COMMIT"):
        return os.environ["RESULTS_COMMIT"]
    head = _git("rev-parse", "--short", "HEAD")
    if head is None:
        return "unknown (not a git checkout)"
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)benchmarks/results")
    return f"{head} (+ uncommitted changes)" if changed else head


def command(argv: list[str] | None = None) -> str:
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve() if argv else Path("?")
    with contextlib.suppress(ValueError):
        script = script.relative_to(REPO)
    return "python " + " ".join(shlex.quote(str(part)) for part in [script, *argv[1:]])


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as cpuinfo:
        cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    return f"{cpu}, {os.cpu_count()} logical CPUs"


def run_lines() -> list[str]:
    """The commit and date of this run (for reports that already name their command and machine)."""
    return [f"commit: {commit()}", f"date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"]


def provenance(argv: list[str] | None = None) -> list[str]:
    """Command, commit, date and machine of this run."""
    return [f"command: `{command(argv)}`", *run_lines(), f"machine: {machine()}"]


def as_markdown(printed: list[str]) -> list[str]:
    """What a script printed, as markdown blocks: a blank line between two printed lines unless both belong to one
    table or one list (so each line of text stays a line, and each table is a table)."""
    lines: list[str] = []
    for line in printed:
        previous = lines[-1] if lines else ""
        same_block = any(previous.startswith(mark) and line.startswith(mark) for mark in ("|", "- "))
        if previous.strip() and line.strip() and not same_block:
            lines.append("")
        lines.append(line)
    return lines


def write(path: str | Path | None, body: list[str], argv: list[str] | None = None) -> Path | None:
    """Write ``body`` (what the run printed) under its provenance to ``path``; nothing when ``path`` is empty."""
    if not path:
        return None
    path = Path(path)
    script = Path(sys.argv[0] if argv is None else argv[0]).name
    lines = [f"<!-- written by benchmarks/{script}: rerun it to replace this file -->"]
    lines += [f"- {line}" for line in provenance(argv)] + [""]
    lines += as_markdown(body)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")
    print(f"results: {path}")
    return path


@contextlib.contextmanager
def tee() -> Iterator[list[str]]:
    """Collect the lines printed inside the block (they still reach stdout); the list fills when the block ends."""
    lines: list[str] = []
    buffer, stdout = io.StringIO(), sys.stdout

    class Tee(io.TextIOBase):
        def write(self, text: str) -> int:
            buffer.write(text)
            return stdout.write(text)

        def flush(self) -> None:
            stdout.flush()

    sys.stdout = Tee()
    try:
        yield lines
    finally:
        sys.stdout = stdout
        lines.extend(buffer.getvalue().strip("\n").splitlines())
