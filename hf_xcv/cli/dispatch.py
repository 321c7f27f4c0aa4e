"""One command, several programs: ``<command> <name> [options]`` runs the ``main`` of the program ``name``.

A user's mistake (:class:`~hf_xcv.utils.errors.UsageError`, a missing or unreadable file, a missing optional package,
a program's own ``SystemExit("message")``) is printed as one line on stderr with exit status 2, no traceback;
``--debug`` anywhere on the command line (or ``HF_XCV_DEBUG=1``) shows the traceback instead. Any other exception is
an internal error and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Mapping
from types import ModuleType

from ..utils.errors import UsageError

DEBUG_FLAG = "--debug"
DEBUG_ENVIRONMENT_VARIABLE = "HF_XCV_DEBUG"
# What a user fixes themselves: their input, their files, their installed packages.
USER_ERRORS = (UsageError, OSError, ImportError)


def debug_requested(argv: list[str]) -> bool:
    """Whether ``--debug`` is on the command line or ``HF_XCV_DEBUG`` is set to a true value."""
    value = os.environ.get(DEBUG_ENVIRONMENT_VARIABLE, "").strip().lower()
    return DEBUG_FLAG in argv or value not in ("", "0", "false", "no", "off")


def one_line(error: BaseException) -> str:
    """The error's message on one line (a message's own line breaks become spaces)."""
    message = error.code if isinstance(error, SystemExit) else str(error)
    text = " ".join(str(message).split())
    if isinstance(error, OSError) and not isinstance(error, UsageError) and not text:
        text = type(error).__name__
    return text


def dispatch(
    command: str,
    programs: Mapping[str, str],
    usage: str,
    argv: list[str],
    load: Callable[[str], ModuleType],
) -> object:
    """Run ``programs[argv[0]]``'s ``main(argv[1:])``; the usage (and a SystemExit) for a missing or unknown name.

    A user error ends the process with status 2 and one line on stderr, ``<command> <name>: error: <message>``."""
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        raise SystemExit(0 if argv else 2)
    name, rest = argv[0], argv[1:]
    if name not in programs:
        print(f"{command}: error: unknown program {name!r}; choose one of {sorted(programs)}", file=sys.stderr)
        raise SystemExit(2)
    debug = debug_requested(rest)
    rest = [arg for arg in rest if arg != DEBUG_FLAG]
    program = load(programs[name])
    shown, sys.argv[0] = sys.argv[0], f"{command} {name}"  # argparse's usage line names the command typed
    try:
        return program.main(rest)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):  # argparse's own exits (status 2), --help (0)
            raise
        if debug:  # the chain ends with the message
            traceback.print_exception(exit_)
            raise SystemExit(2) from None
        _refuse(command, name, exit_)
    except USER_ERRORS as error:
        if debug:
            raise
        _refuse(command, name, error)
    finally:
        sys.argv[0] = shown


def _refuse(command: str, name: str, error: BaseException) -> None:
    print(f"{command} {name}: error: {one_line(error)} (add {DEBUG_FLAG} for the traceback)", file=sys.stderr)
    raise SystemExit(2) from None
