"""One command, several programs: ``<command> <name> [options]`` runs the ``main`` of the program ``name``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from types import ModuleType


def dispatch(
    command: str,
    programs: Mapping[str, str],
    usage: str,
    argv: list[str],
    load: Callable[[str], ModuleType],
) -> object:
    """Run ``programs[argv[0]]``'s ``main(argv[1:])``; the usage (and a SystemExit) for a missing or unknown name."""
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        raise SystemExit(0 if argv else 2)
    name, rest = argv[0], argv[1:]
    if name not in programs:
        raise SystemExit(f"{command}: unknown program {name!r}; choose one of {sorted(programs)}")
    program = load(programs[name])
    shown, sys.argv[0] = sys.argv[0], f"{command} {name}"  # argparse's usage line names the command typed
    try:
        return program.main(rest)
    finally:
        sys.argv[0] = shown
