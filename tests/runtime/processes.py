"""Which processes a test left behind: this process's descendants, and the members of given process groups.

psutil when it is installed, else a scan of /proc. Processes that were just
killed take a moment to go, so `left_after` polls until none is left or a
generous limit passes; a test asserts the list it returns is empty, which does
not depend on how fast the machine is.
"""

from __future__ import annotations

import os
import time

import pytest

SETTLE_LIMIT_S = 60.0


def _table() -> dict[int, tuple[int, int, str]]:
    """{pid: (parent pid, process group, state)} of every process, zombies marked 'Z'."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        table[int(name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def descendants(pid: int | None = None) -> set[int]:
    """Living (not zombie) descendants of `pid` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    try:
        import psutil
    except ImportError:
        table = _table()
        found, frontier = set(), {pid}
        while frontier:
            frontier = {child for child, (parent, _, state) in table.items() if parent in frontier and state != "Z"}
            found |= frontier
        return found
    found = set()
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has)."""
    state = _table().get(pid)
    return state is not None and state[2] != "Z"


def group_members(groups: set[int]) -> set[int]:
    """Living processes whose process group is one of `groups`."""
    return {pid for pid, (_, group, state) in _table().items() if group in groups and state != "Z"}


def left_after(before: set[int] = frozenset(), groups: set[int] = frozenset()) -> list[str]:
    """Processes still alive that a test started: new descendants, or members of `groups`; empty when none."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    while True:
        left = (descendants() - set(before)) | group_members(set(groups))
        if not left or time.monotonic() > deadline:
            return [_describe(pid) for pid in sorted(left)]
        time.sleep(0.05)


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        return f"{pid} {command}"
    except OSError:
        return str(pid)


@pytest.fixture
def no_leftover_process():
    """After the test: no process it started is left (add process groups to the yielded set to check them too)."""
    before = descendants()
    groups: set[int] = set()
    yield groups
    assert left_after(before, groups) == []
