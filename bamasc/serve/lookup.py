"""A task the server no longer keeps in memory, read back from the trace (the ledger holds every task)."""

from __future__ import annotations

import json
from typing import Any

CALL_FIELDS = ("node", "role", "model", "attempt", "prompt_tokens", "completion_tokens", "reserved", "charged",
               "latency_ms", "clamped", "skipped", "error", "rate_wait_s")
TASK_FIELDS = ("task_id", "answer", "cost", "bound", "status", "template", "budget", "error", "task_tokens",
               "length_class", "fits_up_to")


def task_from_trace(path: str | None, task_id: str) -> dict[str, Any] | None:
    """The task's last task line and every call line of it, as `GET /v1/tasks/{id}` shows them; None if absent.

    Only lines that hold the id as written are decoded, so a look-up costs one read of the file."""
    if not path:
        return None
    needle = json.dumps({"task_id": task_id}, ensure_ascii=False)[1:-1].encode("utf-8")
    calls: list[dict[str, Any]] = []
    last: dict[str, Any] | None = None
    try:
        handle = open(path, "rb")
    except OSError:
        return None
    with handle:
        for line in handle:
            if needle not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written, or torn by a crash
            if not isinstance(record, dict) or record.get("task_id") != task_id:
                continue
            if record.get("type") == "call":
                calls.append({name: record.get(name) for name in CALL_FIELDS})
            elif record.get("type") == "task":
                last = {name: record.get(name) for name in TASK_FIELDS}
    if last is None and not calls:
        return None
    return {**(last or {"task_id": task_id, "status": "running"}), "calls": calls}
