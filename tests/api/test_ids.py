"""A session's task ids: never one the trace or the session used, and no memory kept per id it makes and runs."""

from __future__ import annotations

import re

from bamasc.api import ids
from bamasc.api.ids import TaskIds


def test_ids_made_are_new_and_each_can_be_run_once():
    taken = TaskIds()
    made = [taken.new() for _ in range(1000)]
    assert len(set(made)) == 1000 and all(re.fullmatch(r"[0-9a-f]{16}", task_id) for task_id in made)
    assert not any(task_id in taken for task_id in made)  # made, not yet run: free for the one who asked
    for task_id in made:
        taken.add(task_id)
    assert all(task_id in taken for task_id in made)
    assert taken._named == set() and taken._handed == set()  # nothing kept per id made and run
    prefix = made[0][:8]
    assert f"{prefix}{1001:08x}" not in taken and f"{prefix}0000_3e8" not in taken and "elsewhere" not in taken


def test_ids_of_the_trace_and_of_callers_are_never_made(monkeypatch):
    taken = TaskIds()
    first = taken.new()
    prefix, count = first[:8], int(first[8:], 16)
    taken.update([f"{prefix}{count + 1:08x}"])  # the trace holds the next one
    assert taken.new() == f"{prefix}{count + 2:08x}"
    taken.add("chosen-by-a-caller")
    assert "chosen-by-a-caller" in taken and f"{prefix}{count + 1:08x}" in taken
    monkeypatch.setattr(ids, "LAST_COUNT", count + 2)
    after = taken.new()  # the counter is spent: a new prefix
    assert after[:8] != prefix and int(after[8:], 16) == 1
    taken.add(first)
    assert first in taken  # ids of the earlier prefix are still known
