"""Trace shards: one trace file per process of a run spread over several, merged into the run's trace by task id.

A trace takes a lock for the one process that writes it (runtime/trace.py),
so each actor of a Ray run writes its own shard, `<trace>.shard-<k>`. When
the run ends, the shards' lines are appended to the trace, grouped by task
(every line of a task together, in the order its actor wrote them: reserve,
call and task lines alike) and the shards removed. A run killed before that
leaves its shards behind; the next run on the trace merges them first, so
that `--resume` counts what they hold.
"""

from __future__ import annotations

import glob
import json
import os

from bamasc.runtime.trace import TraceWriter

SHARD = ".shard-"


def shard_path(trace_path: str | None, number: int) -> str | None:
    return None if trace_path is None else f"{trace_path}{SHARD}{number}"


def shards_of(trace_path: str | None) -> list[str]:
    """The shards beside `trace_path`, in the order of their numbers."""
    if trace_path is None:
        return []
    found = [path for path in glob.glob(glob.escape(trace_path) + SHARD + "*")
             if path[len(trace_path) + len(SHARD):].isdigit()]
    return sorted(found, key=lambda path: int(path[len(trace_path) + len(SHARD):]))


def merge_shards(trace: TraceWriter, shards: list[str]) -> int:
    """Append every complete line of `shards` to `trace` (open, so locked for this run), grouped by task id;
    then remove the shards. Returns the number of lines merged.

    Each shard is locked while it is read, so a shard a live process still
    writes is refused (TraceError) rather than taken from under it. Its last
    line, when a kill cut it short, is dropped. Lines are grouped in memory:
    a run's shards hold its own lines only.
    """
    by_task: dict[str, list[str]] = {}
    for path in shards:
        reader = TraceWriter(path)  # the lock, and the torn last line cut
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        by_task.setdefault(_task_id(line), []).append(line)
        finally:
            reader.close()
    merged = 0
    for lines in by_task.values():
        trace.append_lines(lines)
        merged += len(lines)
    for path in shards:
        os.remove(path)
    return merged


def _task_id(line: str) -> str:
    """The line's task id; a line that is not a record goes with the others that are not (the resume says why)."""
    try:
        record = json.loads(line)
    except ValueError:
        return ""
    task_id = record.get("task_id") if isinstance(record, dict) else None
    return task_id if isinstance(task_id, str) else ""
