"""Trace shards: one trace file per process of a run spread over several, merged into the run's trace by task id.

A trace takes a lock for the one process that writes it (runtime/trace.py),
so each actor of a Ray run writes its own shard, `<trace>.shard-<k>`. When
the run ends (or an actor dies), the shards' lines are appended to the
trace, grouped by task (every line of a task together, in the order its
actor wrote them: reserve, call and task lines alike) and the shards
removed. A run killed before that leaves its shards behind; the next run on
the trace, on either engine, merges them before it reads the trace, so that
`--resume` counts what they hold.

A merge is idempotent: a line the trace already holds is not appended again,
so shards left by a run killed while it merged them are folded in once.
"""

from __future__ import annotations

import glob
import json
import os
import time

from bamasc.runtime.trace import TraceError, TraceWriter

SHARD = ".shard-"
LOCK_POLL_S = 0.1  # how often a shard still locked by a dying process is tried again
# How long a run waits for a shard's lock before it reads the trace: the actors of a killed Ray driver are
# stopped by Ray within seconds, and their shards are free once their processes are gone.
DYING_PROCESS_S = 30.0


def shard_path(trace_path: str | None, number: int) -> str | None:
    return None if trace_path is None else f"{trace_path}{SHARD}{number}"


def shards_of(trace_path: str | None) -> list[str]:
    """The shards beside `trace_path`, in the order of their numbers."""
    if trace_path is None:
        return []
    found = [path for path in glob.glob(glob.escape(trace_path) + SHARD + "*")
             if path[len(trace_path) + len(SHARD):].isdigit()]
    return sorted(found, key=lambda path: int(path[len(trace_path) + len(SHARD):]))


def merge_shards(trace: TraceWriter, shards: list[str], wait_s: float = 0.0) -> dict[str, list[str]]:
    """Append every complete line of `shards` that `trace` (open, so locked for this run) does not hold yet,
    grouped by task id; then remove the shards. Returns each task's lines in the shards, appended or not.

    Each shard is locked while it is read, so a shard a live process still
    writes is not taken from under it: one still locked after `wait_s`
    seconds (the time a killed actor's process takes to go) is left where it
    is, the others are merged, and then TraceError names it. A shard's last
    line, when a kill cut it short, is dropped. Lines are grouped in memory:
    a run's shards hold its own lines only.
    """
    by_task: dict[str, list[str]] = {}
    taken, busy = [], []
    for path in shards:
        lines = _read_locked(path, wait_s)
        if lines is None:
            busy.append(path)
            continue
        taken.append(path)
        for line in lines:
            by_task.setdefault(_task_id(line), []).append(line)
    held = _already_held(trace.path, by_task)
    for lines in by_task.values():
        trace.append_lines([line for line in lines if line not in held])
    for path in taken:
        os.remove(path)
    if busy:
        raise TraceError(f"{', '.join(busy)} still in use by a bamasc process; when it has ended, --resume merges it")
    return by_task


def _read_locked(path: str, wait_s: float) -> list[str] | None:
    """The shard's complete lines, read under its lock; None while another process holds it past `wait_s`."""
    waited_until = time.monotonic() + wait_s
    while True:
        try:
            reader = TraceWriter(path)  # the lock, and the torn last line cut
            break
        except TraceError:
            if time.monotonic() >= waited_until:
                return None
            time.sleep(LOCK_POLL_S)
    try:
        with open(path, encoding="utf-8") as handle:
            return [line if line.endswith("\n") else line + "\n" for line in handle if line.strip()]
    finally:
        reader.close()


def _already_held(trace_path: str | None, by_task: dict[str, list[str]]) -> set[str]:
    """The shards' lines that the trace already holds, from an earlier merge cut short by a kill.

    A line that moves money is unique in its trace (a reservation's id, and
    the call line that settles it), and a task line that ran carries its time
    to the microsecond; the lines that can repeat word for word (an attempt
    not made, a task skipped twice for the same reason) change no ledger, so
    equal text is taken as the same record.
    """
    wanted = {line for lines in by_task.values() for line in lines}
    if not wanted or not trace_path or not os.path.exists(trace_path):
        return set()
    with open(trace_path, encoding="utf-8", errors="surrogateescape") as handle:
        return {line for line in handle if line in wanted}


def _task_id(line: str) -> str:
    """The line's task id; a line that is not a record goes with the others that are not (the resume says why)."""
    try:
        record = json.loads(line)
    except ValueError:
        return ""
    task_id = record.get("task_id") if isinstance(record, dict) else None
    return task_id if isinstance(task_id, str) else ""
