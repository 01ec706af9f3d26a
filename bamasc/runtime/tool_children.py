"""The processes python tools start: noticed as they appear during a call, and stopped with the run's tools.

A python tool runs in this process, so what it starts (`subprocess.Popen`,
`os.system(... &)`) is a child of this process, in its process group: it
cannot be stopped as an MCP server's group is (runtime/tool_process.py).
Instead each python call notes the children of this process that appear while
it runs (`Children.during`), and the run's tools, as they stop, kill each of
them and what it started in turn (`Children.stop`). A process is known by its
pid and its start time, so a pid the system has given to another process
since is left alone. Linux only (/proc); elsewhere nothing is noticed.

What it deliberately does not follow: a process the tool's child detached
from itself (a double fork leaves it to init), and one started after the
call has returned or timed out.
"""

from __future__ import annotations

import contextlib
import os
import signal

_PROC = "/proc"


def children(pid: int | None = None) -> set[tuple[int, int]]:
    """(pid, start time) of each child of `pid` (this process by default), from /proc; empty without it."""
    pid = os.getpid() if pid is None else pid
    found: set[tuple[int, int]] = set()
    try:
        threads = os.listdir(f"{_PROC}/{pid}/task")
    except OSError:
        return found
    for thread in threads:
        try:
            with open(f"{_PROC}/{pid}/task/{thread}/children", encoding="ascii") as handle:
                listed = handle.read().split()
        except OSError:
            continue
        for child in listed:
            started = start_time(int(child))
            if started is not None:
                found.add((int(child), started))
    return found


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks after boot, field 22 of /proc/PID/stat); None when it is gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count the fields after its end.
    fields = text[text.rfind(")") + 2:].split()
    return int(fields[19]) if len(fields) > 19 else None


class Children:
    """The processes the python calls of one run started, to stop with its tools."""

    def __init__(self) -> None:
        self.started: set[tuple[int, int]] = set()

    @contextlib.contextmanager
    def during(self, ignore=frozenset()):
        """Note the children of this process that appear while the block runs, but pids in `ignore`
        (the MCP servers, stopped with their own groups)."""
        before = children()
        try:
            yield
        finally:
            self.started |= {child for child in children() - before if child[0] not in ignore}

    def stop(self) -> None:
        """SIGKILL each noticed process still running, and its descendants first; then reap the ones
        that are this process's children, so none is left a zombie."""
        noticed, self.started = self.started, set()
        for pid, started in sorted(noticed):
            if start_time(pid) != started:
                continue  # gone, or the pid is another process's now
            for process in _descendants(pid) + [(pid, started)]:
                _kill(*process)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def _descendants(pid: int) -> list[tuple[int, int]]:
    """Every process below `pid`, deepest first."""
    found = []
    for child in children(pid):
        found += _descendants(child[0]) + [child]
    return found


def _kill(pid: int, started: int) -> None:
    if start_time(pid) == started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
