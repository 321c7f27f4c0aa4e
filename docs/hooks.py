"""MkDocs hooks: tables generated from hf_xcv's registries at build time, so the docs cannot drift from the code.

A page asks for a table with a marker on a line of its own:

* ``<!-- generated: attention-capabilities -->``: one row per registered attention entry, its capabilities;
* ``<!-- generated: attention-settings -->``: one row per entry, its ``attention_kwargs`` and their defaults, the
  settings tied to the sequence length, and the lengths it takes;
* ``<!-- generated: presets MODEL_TYPE -->``: the presets of one model type with the published figures beside them.

An unknown marker, or a marker whose table would be empty, fails the build.

The pictures the benchmark scripts write (``SITE_FILES``) are added to the site under their repository paths, so a
page links them as ``benchmarks/results/...``; a missing one fails the build.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[1]
SITE_FILES = ["benchmarks/results/lra/accuracy_vs_speed.png", "benchmarks/results/attention.png"]
MARKER = re.compile(r"^<!-- generated: ([a-z-]+)(?: ([a-z_]+))? -->$", re.MULTILINE)

# Capability flags in the order of the table, with their column titles.
CAPABILITY_COLUMNS = {
    "padding_mask": "padding mask",
    "arbitrary_mask": "any boolean mask",
    "causal": "causal",
    "requires_causal": "causal only",
    "cross_attention": "cross-attention",
    "returns_weights": "returns weights",
    "attention_bias": "additive bias",
    "needs_grid": "needs a 2-D grid",
    "stateful": "stateful (memory)",
    "attention_dropout": "attention dropout",
    "relative_positions": "own positions",
}


def _cell(text: str) -> str:
    """Text for one markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _summary(cls: type) -> str:
    """The first paragraph of a class docstring, in markdown."""
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    doc = re.sub(r"[;,]? ?\(?see the module docstring\)?\.?", ".", doc).replace("..", ".").replace(" .", ".")
    return _cell(doc.replace("``", "`"))


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def attention_capabilities() -> str:
    from hf_xcv.attention import available_attention_types, capability_table, get_attention_class

    rows = []
    for row in capability_table():
        flags = ["yes" if row[key] else "–" for key in CAPABILITY_COLUMNS]
        rows.append([f"`{row['name']}`", _summary(get_attention_class(row["name"])), *flags])
    if len(rows) != len(available_attention_types()) or not rows:
        raise ValueError("the capability table does not cover the registry")
    return _table(["entry", "what it is", *CAPABILITY_COLUMNS.values()], rows)


def attention_settings() -> str:
    from hf_xcv.attention import LENGTH_TIED_KWARGS, attention_kwarg_defaults, capability_table

    rows = []
    for row in capability_table():
        name = row["name"]
        defaults = ", ".join(f"`{key}={value!r}`" for key, value in attention_kwarg_defaults(name).items())
        tied = f"`{LENGTH_TIED_KWARGS[name][0]}`" if name in LENGTH_TIED_KWARGS else "–"
        rows.append([f"`{name}`", defaults or "none", tied, row["length_constraint"] or "any"])
    return _table(["entry", "attention_kwargs (defaults)", "tied to the length L", "lengths it takes"], rows)


def presets(model_type: str) -> str:
    from hf_xcv import PRESETS

    rows = [
        [f"`{name}`", preset.reference or "–", preset.params or "–"]
        for name, preset in PRESETS.items()
        if preset.model_type == model_type
    ]
    if not rows:
        raise ValueError(f"no presets of model type {model_type!r}")
    return _table(["preset", "what it is (published figures)", "parameters (published)"], rows)


def render(kind: str, argument: str | None) -> str:
    if kind == "attention-capabilities":
        return attention_capabilities()
    if kind == "attention-settings":
        return attention_settings()
    if kind == "presets" and argument:
        return presets(argument)
    raise ValueError(f"unknown generated table {kind!r} {argument or ''}")


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    def replace(match: re.Match) -> str:
        try:
            return render(match.group(1), match.group(2))
        except ValueError as error:
            raise ValueError(f"{page.file.src_path}: {error}") from error

    return MARKER.sub(replace, markdown)


def on_files(files, config, **kwargs):
    for path in SITE_FILES:
        if not (REPO / path).is_file():
            raise FileNotFoundError(f"{path} is missing: run the benchmark that writes it")
        files.append(File.generated(config, path, abs_src_path=str(REPO / path)))
    return files
