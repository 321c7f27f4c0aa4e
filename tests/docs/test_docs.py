"""The documentation: the site builds in strict mode (a broken link, a missing page or a missing benchmark table
fails), the tables generated from the registries are there, the README stays short, and every code block marked
runnable in README.md and docs/ runs.

A runnable block is a ```python fence right after a line ``<!-- runnable -->``. The blocks of one page run in
order in one fresh namespace, in a temporary working directory, in this process (the Hub and caches are the test
session's, see tests/conftest.py); they build their models from presets and configs, never download.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = next(path for path in Path(__file__).resolve().parents if (path / "mkdocs.yml").exists())
MARKER = "<!-- runnable -->"
README_MAX_LINES = 250
MAX_LINE = 300


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def runnable_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of every runnable block of a page; a marker not followed by a python fence is an error."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    for index, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        fence = lines[index + 1] if index + 1 < len(lines) else ""
        if not re.fullmatch(r"\s*```(python|py)\s*", fence):
            raise ValueError(f"{path.relative_to(REPO)}:{index + 1}: {MARKER} must be followed by a ```python fence")
        end = next((i for i in range(index + 2, len(lines)) if lines[i].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{path.relative_to(REPO)}:{index + 2}: the runnable block is never closed")
        # a block inside a list item is indented like its fence
        blocks.append((index + 3, textwrap.dedent("\n".join(lines[index + 2 : end]))))
    return blocks


PAGES_WITH_BLOCKS = [path for path in pages() if MARKER in path.read_text(encoding="utf-8")]


def test_the_site_builds_in_strict_mode(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    attention = (site / "attention" / "index.html").read_text(encoding="utf-8")
    from hf_xcv.attention import available_attention_types

    for name in available_attention_types():  # the generated capability table covers the registry
        assert f"<code>{name}</code>" in attention, name
    assert "<!-- generated:" not in attention
    assert (site / "api" / "vit" / "index.html").read_text(encoding="utf-8").count("ViTForImageClassification") > 1


def test_the_readme_is_short_and_no_line_is_too_long():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES, f"README.md has more than {README_MAX_LINES} lines"
    for path in pages():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert len(line) <= MAX_LINE, f"{path.relative_to(REPO)}:{number} has {len(line)} characters"
    # the README is not part of the site: its links to the docs and files are checked here
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if not re.match(r"[a-z]+://", target):
            assert (REPO / target).exists(), f"README.md links to {target}, which does not exist"


def test_there_are_runnable_blocks():
    assert REPO / "README.md" in PAGES_WITH_BLOCKS and len(PAGES_WITH_BLOCKS) >= 10


@pytest.mark.parametrize("page", PAGES_WITH_BLOCKS, ids=lambda path: str(path.relative_to(REPO)))
def test_runnable_blocks(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    for line, code in runnable_blocks(page):
        where = f"{page.relative_to(REPO)}:{line}"
        exec(compile(code, where, "exec"), namespace)  # a failure's traceback names the page and line
