"""Traces: one JSONL line per call attempt and one per task, flushed as they happen.

A crash or Ctrl-C leaves every line written so far intact (each line is
written whole and flushed), so `--resume` can skip the tasks already done.
"""

from __future__ import annotations

import json
import os


class TraceWriter:
    def __init__(self, path: str | None):
        self.path = path
        self.handle = None
        if path:
            _drop_partial_last_line(path)
            self.handle = open(path, "a", encoding="utf-8")

    def _write(self, record: dict) -> None:
        if self.handle is not None:
            self.handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.handle.flush()

    def call(self, record: dict) -> None:
        self._write({"type": "call", **record})

    def task(self, record: dict) -> None:
        self._write({"type": "task", **record})

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def finished_tasks(path: str) -> set[str]:
    """Ids of tasks with a task line in an existing trace (what `--resume` skips)."""
    done = set()
    if not path or not os.path.exists(path):
        return done
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            if record.get("type") == "task":
                done.add(str(record["task_id"]))
    return done


def _drop_partial_last_line(path: str) -> None:
    """A process killed mid-write may leave half a line; cut it so appends stay valid JSONL."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    with open(path, "rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
        data = handle.seek(0) or handle.read()
        handle.truncate(data.rfind(b"\n") + 1)
