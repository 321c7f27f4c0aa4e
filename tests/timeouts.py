"""A time limit for every test, so that a hang fails with the stacks of what hung instead of eating CI's time.

Each test runs under a limit (``HF_XCV_TEST_TIMEOUT`` seconds, default 900: ten times the slowest test on a loaded
2-core machine; ``@pytest.mark.timeout(seconds)`` for one test). When it runs out:

* every process the test started (its descendants: a training script, ``accelerate launch`` and its workers) gets
  SIGABRT, deepest first. The test session sets ``PYTHONFAULTHANDLER=1``, so each Python process prints the stack
  of every one of its threads to its stderr before it dies; a test that checks its subprocess (``helpers.check``)
  fails with that output;
* the test fails with a message naming the limit and the processes, whatever it did next; if it is still stuck
  itself after a grace period, it fails with the stacks of the test process's own threads.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from pathlib import Path

import pytest

DEFAULT_LIMIT = float(os.environ.get("HF_XCV_TEST_TIMEOUT", "900"))
GRACE = 30.0  # seconds between aborting the children and failing the test process itself


class TestTimeout(BaseException):
    """Raised in a test process that is itself stuck after its limit (a BaseException: no ``except Exception``
    in the code under test swallows it)."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timeout(seconds): this test's time limit instead of HF_XCV_TEST_TIMEOUT")
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")  # inherited: a SIGABRT makes a Python child print its stacks


def descendants(pid: int) -> list[int]:
    """The processes below ``pid``, children before grandchildren (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # the command may hold spaces and parentheses
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        below = children.get(queue.pop(0), [])
        found += below
        queue += below
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


def thread_stacks() -> str:
    """The Python stack of every thread of this process."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(f"Thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker else DEFAULT_LIMIT
    fired: list[str] = []

    def on_alarm(signum, frame):
        if fired:  # the grace period ran out too: this process is stuck itself
            raise TestTimeout(f"{item.nodeid} still stuck {GRACE:.0f} s after its limit; stacks:\n{thread_stacks()}")
        stuck = descendants(os.getpid())
        fired.append(
            f"{item.nodeid} ran past its time limit of {limit:.0f} s"
            + (
                f"; sent SIGABRT to {[(pid, _command(pid)) for pid in stuck]} (each Python process printed its "
                "threads' stacks to its stderr)"
                if stuck
                else ""
            )
        )
        print(f"\n{fired[0]}", file=sys.__stderr__, flush=True)
        for pid in reversed(stuck):  # workers before their launcher, which would otherwise only report them
            try:
                os.kill(pid, signal.SIGABRT)
            except ProcessLookupError:
                pass
        if not stuck:
            raise TestTimeout(f"{fired[0]}; stacks:\n{thread_stacks()}")
        signal.setitimer(signal.ITIMER_REAL, GRACE)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        outcome = yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if fired:
        error = outcome.exception
        if isinstance(error, TestTimeout):
            message = str(error)
        else:
            message = fired[0] + (f"\n{type(error).__name__}: {error}" if error is not None else "")
        outcome.force_exception(pytest.fail.Exception(message, pytrace=False))
