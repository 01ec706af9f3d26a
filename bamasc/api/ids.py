"""The task ids a session has used, kept in memory that does not grow with the ids it makes itself.

A session (a server) may name millions of tasks. Remembering each id would
grow without end, so the ids a session makes are a random prefix of 8 hex
digits and a counter of 8 (16 hex digits, as any random id): one of them was
used if its prefix is this session's and its count is not past the counter.
Only the ids the trace held when the session opened, the ids callers chose,
and the ids made and not yet run are kept one by one.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

COUNT_DIGITS = 8
LAST_COUNT = 16**COUNT_DIGITS - 1
HEX = set("0123456789abcdef")


class TaskIds:
    """Which ids a session may still give a task."""

    def __init__(self) -> None:
        self._named: set[str] = set()  # the trace's ids at opening, and the ids callers gave
        self._handed: set[str] = set()  # made by `new`, not yet run
        self._counts: dict[str, int] = {}  # prefix -> the last count made with it
        self._prefix = ""

    def update(self, ids: Iterable[str]) -> None:
        """Ids already in the trace."""
        self._named.update(ids)

    def new(self) -> str:
        """An id no task of the trace, and no other id made here, has."""
        while True:
            if not self._prefix or self._counts[self._prefix] == LAST_COUNT:
                self._prefix = secrets.token_hex(4)
                if self._prefix in self._counts:
                    continue
                self._counts[self._prefix] = 0
            self._counts[self._prefix] += 1
            made = f"{self._prefix}{self._counts[self._prefix]:0{COUNT_DIGITS}x}"
            if made not in self._named:
                self._handed.add(made)
                return made

    def __contains__(self, task_id: object) -> bool:
        """Whether `task_id` was used (an id `new` made and nobody has run yet is not)."""
        if task_id in self._named:
            return True
        return isinstance(task_id, str) and self._made(task_id) and task_id not in self._handed

    def add(self, task_id: str) -> None:
        """`task_id` is being run."""
        if task_id in self._handed:
            self._handed.discard(task_id)
        elif not self._made(task_id):
            self._named.add(task_id)

    def _made(self, task_id: str) -> bool:
        prefix, count = task_id[:-COUNT_DIGITS], task_id[-COUNT_DIGITS:]
        last = self._counts.get(prefix)
        if last is None or len(count) != COUNT_DIGITS or not set(count) <= HEX:
            return False
        return 0 < int(count, 16) <= last
