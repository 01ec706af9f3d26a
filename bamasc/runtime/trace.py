"""Traces: one JSONL line per reservation, per call attempt, per tool call and per task, flushed as they happen.

The trace is the ledger that survives a crash. Before an attempt starts, a
`reserve` line records the money held for it; the attempt's `call` line,
written when it ends, names the same reservation `id` and what was charged.
A reservation without its call line is an attempt whose outcome nobody saw
(the process died while it was in flight), so it counts as charged in full:
the provider may have billed it. A tool call (runtime/tool_loop.py) has a
`tool` line, which settles the reserve line of its price when it has one. A
task's spend is the sum over every run that the trace holds, and `--resume`
continues a task from that sum. `bamasc proxy` also writes a `budget` line
when a scope's budget is set or tightened, and a thread's turn a `turn` line
before it starts (runtime/threads.py); neither moves money.

Every line says when it was written: `at`, Unix seconds (UTC) to the
millisecond, from the writer's clock. Readers of money ignore it (an older
trace has none); the spend report draws its time axis from it.

Each line is written whole and flushed; a line cut short by a crash is the
last one, and is dropped before anything is appended.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time

from bamasc.metering.admission import model_names, reply_names
from bamasc.rows import RowError, drop_torn_line, parse_line
from bamasc.secrets import redact
from bamasc.words import show

TRACE_TYPES = ("reserve", "call", "tool", "task", "budget", "turn")


class TraceError(ValueError):
    """A trace that cannot be resumed from; the message names the file, the line and what is wrong."""


class TraceWriter:
    def __init__(self, path: str | None, clock=time.time):
        self.path = path
        self.handle = None
        self.clock = clock  # Unix seconds: each line's `at`
        self.labels: dict[str, dict] = {}  # task id -> what its task lines also record (serve: the key that sent it)
        # Reservation ids only need to be unique within one trace: a run's
        # random prefix keeps them apart from other runs appending to it.
        self._run = os.urandom(4).hex()
        self._numbers = itertools.count(1)
        if path:
            self.handle = open(path, "a", encoding="utf-8")
            try:
                _lock(self.handle, path)
                drop_torn_line(path)
            except BaseException:
                self.handle.close()
                raise

    def _write(self, record: dict) -> None:
        if self.handle is not None:
            stamp = round(self.clock(), 3)
            line = {"type": record["type"], "at": stamp, **record}
            line["at"] = stamp  # the writer's clock, whatever the record said
            self.handle.write(json.dumps(line, ensure_ascii=False) + "\n")
            self.handle.flush()

    def reserve(self, record: dict) -> str:
        """Record money held for an attempt about to start; returns the id its call line must carry."""
        reservation = f"{self._run}.{next(self._numbers)}"
        self._write({"type": "reserve", "id": reservation, **record})
        return reservation

    def call(self, record: dict) -> None:
        self._write({"type": "call", **_redacted(record)})

    def tool(self, record: dict) -> None:
        self._write({"type": "tool", **_redacted(record)})

    def task(self, record: dict) -> None:
        self._write({"type": "task", **_redacted(record), **self.labels.get(record.get("task_id"), {})})

    def turn(self, record: dict) -> None:
        """Record a thread's turn about to start (no money moves): its thread, number and text, for a restart."""
        self._write({"type": "turn", **record})

    def budget(self, record: dict) -> None:
        """Record a budget a proxy scope was given or tightened to (no money moves): a restart keeps it."""
        self._write({"type": "budget", "run": self._run, **record})

    def append_lines(self, lines: list[str]) -> None:
        """Lines written elsewhere (a shard of this run's trace), each ending in a newline, appended as they are."""
        if self.handle is not None:
            self.handle.writelines(lines)
            self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


class AttemptLines:
    """The trace's side of one task's attempts (metering/admission.py's events): the `reserve` line of an
    attempt about to be sent, and the `call` line of one that ended or was refused.

    Each line names the model three ways: its name in the `.bam` (`model`), its `provider` and the vendor's
    id the request carries (`model_id`); a call line also says where the request went (`server_address`,
    `server_port`: absent when no server answered, as for an offline provider, `--fake` or a cassette) and
    what the reply said of itself (`response_id`, `response_model`, `finish_reason`)."""

    def __init__(self, trace, task_id: str, server: tuple[str, int] | None = None):
        self.trace = trace  # a TraceWriter, or anything with its `reserve` and `call`
        self.task_id = task_id
        self.server = server  # (host, port) the provider sends to
        self.ids: dict = {}  # the reserve line's id of each attempt in flight

    def __call__(self, event: str, attempt) -> None:
        if event == "started":
            line = {"task_id": self.task_id, "node": attempt.node.id, "model": attempt.model.name,
                    **model_names(attempt.model),
                    "attempt": attempt.number, "reserved": round(attempt.reservation.amount, 6)}
            if attempt.round is not None:
                line["round"] = attempt.round
            self.ids[attempt] = self.trace.reserve(line)
        else:
            self.trace.call(self.line(event, attempt))

    def line(self, event: str, attempt) -> dict:
        made = event != "refused"  # a refused attempt held nothing and took no time
        usage = attempt.usage if event == "settled" else None
        line = {
            "id": self.ids.pop(attempt, None),
            "task_id": self.task_id,
            "node": attempt.node.id,
            "role": attempt.node.role,
            "model": attempt.model.name,
            **model_names(attempt.model),
            "prompt_tokens": attempt.prompt_tokens if usage is None else usage.prompt_tokens,
            "completion_tokens": 0 if usage is None else usage.completion_tokens,
            "reserved": round(attempt.reservation.amount, 6) if made else 0.0,
            "charged": round(attempt.charged, 6),
            "latency_ms": round(attempt.latency * 1000, 3) if made else 0.0,
            "attempt": attempt.number,
            "clamped": made and attempt.clamped,
            "skipped": not made,
            "error": attempt.error,
        }
        if made and self.server is not None:
            line.update(server_address=self.server[0], server_port=self.server[1])
        if usage is not None:  # a settled call shows the usage it was charged for and the rates (the tier) that applied
            line.update(cached_tokens=usage.cached_tokens, cache_write_tokens=usage.cache_write_tokens,
                        rates=attempt.rates.as_dict())
            line.update(reply_names(attempt.reply))
        if attempt.waited is not None:  # the attempt went through a rate limiter
            line["rate_wait_s"] = round(attempt.waited, 6)
        if attempt.round is not None:  # a round of a tool loop
            line["round"] = attempt.round
        if attempt.fallback is not None:  # sent to a fallback model: which seat's model failed, and how
            line.update(attempt.fallback)
        return line


def _redacted(record: dict) -> dict:
    """`record` with any key in its error masked: an error may quote a server that echoed the key."""
    error = record.get("error")
    return {**record, "error": redact(error)} if isinstance(error, str) else record


class TaskLedger:
    """What the trace holds for one task, over every run that wrote to it (filled line by line)."""

    __slots__ = ("charged", "open", "finished")

    def __init__(self) -> None:
        self.charged = 0.0  # the call lines' charges
        self.open: dict[str, dict] = {}  # reservations without a call line, by id
        self.finished = False  # its last task line ended in a status `--resume` does not run again

    def add(self, record: dict) -> None:
        """One more of the task's trace records, in the trace's order."""
        kind = record["type"]
        if kind == "reserve":
            self.open[record["id"]] = record
        elif kind in ("call", "tool"):
            self.charged += record["charged"]
            self.open.pop(record.get("id"), None)
        elif kind == "task":
            # The last task line decides: one that ended in `error` (a provider
            # kept failing) is run again by --resume, with what it spent.
            self.finished = record.get("status") not in RERUN_STATUSES

    @property
    def spent(self) -> float:
        """Everything the task may have cost: charges plus every reservation whose outcome is unknown."""
        return self.charged + sum(reservation["reserved"] for reservation in self.open.values())


# Task statuses that `--resume` runs again: a provider kept failing, the batch's total or the task's own budget
# had no room for it to start, or the process running it died with it in flight.
RERUN_STATUSES = ("error", "skipped_total", "skipped_budget", "too_long", "interrupted")


def read_ledgers(path: str | None) -> dict[str, TaskLedger]:
    """Each task's ledger in an existing trace; a line that is not a trace record is a TraceError.

    Only the last line may be cut short (by a crash); it is ignored. Anything
    else that is not a record of the trace's types, with the fields resuming
    needs, stops the resume: guessing would lose or double money. A `budget`
    line (a proxy scope's budget) moves no money.

    The file is read a line at a time. A line is first parsed by the standard
    library's C decoder; only one it refuses, or whose values are out of
    range, goes through the careful parser that says what is wrong. Lines
    bamasc wrote are plain JSON, so a 100,000-task trace is read at the C
    decoder's speed.
    """
    ledgers: dict[str, TaskLedger] = {}
    if not path or not os.path.exists(path):
        return ledgers
    try:
        handle = open(path, "rb")
    except OSError as problem:
        raise TraceError(f"{path}: cannot read the trace: {problem.strerror or problem}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            record = _fast_record(line)
            if record is None:
                if not line.strip():
                    continue
                try:
                    record = parse_line(line)
                except RowError as problem:
                    if not line.endswith(b"\n"):
                        continue  # the half-written last line of a run that was killed
                    raise TraceError(f"{path}:{number}: {problem}") from None
                problem = _check(record)
                if problem:
                    raise TraceError(f"{path}:{number}: {problem}")
            _add(ledgers, record)
    return ledgers


def _fast_record(line: bytes) -> dict | None:
    """The line's record when the C decoder reads it and it passes every check; else None (look closer)."""
    try:
        record = _PLAIN.decode(line.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return record if _check(record) is None else None


def _refuse_constant(name: str):
    raise ValueError(name)


# NaN and Infinity only call back to Python, so the decoder keeps its C speed on every other value.
_PLAIN = json.JSONDecoder(parse_constant=_refuse_constant)


def _add(ledgers: dict[str, TaskLedger], record: dict) -> None:
    ledger = ledgers.get(record["task_id"])
    if ledger is None:
        ledger = ledgers[record["task_id"]] = TaskLedger()
    ledger.add(record)


def finished_tasks(path: str | None) -> set[str]:
    """Ids of tasks whose last task line ended in a status `--resume` does not run again (what it skips)."""
    return {task_id for task_id, ledger in read_ledgers(path).items() if ledger.finished}


def _check(record: object) -> str | None:
    """What makes `record` unusable for resuming, or None."""
    if not isinstance(record, dict):
        return f"not a trace record (a JSON object), but {type(record).__name__} {show(record)}"
    kind = record.get("type")
    if kind not in TRACE_TYPES:
        return f"unknown record type {show(kind)} (one of {', '.join(TRACE_TYPES)})"
    if not isinstance(record.get("task_id"), str) or not record["task_id"]:
        return f"{kind} line without a task_id (a string), got {show(record.get('task_id'))}"
    if kind == "reserve":
        if not isinstance(record.get("id"), str):
            return f"reserve line without an id, got {show(record.get('id'))}"
        if not _amount(record.get("reserved")):
            return f"reserve line with reserved = {show(record.get('reserved'))}, not an amount in µ$"
    if kind == "budget" and not _amount(record.get("budget")):
        return f"budget line with budget = {show(record.get('budget'))}, not an amount in µ$"
    if kind in ("call", "tool"):
        if not _amount(record.get("charged")):
            return f"{kind} line with charged = {show(record.get('charged'))}, not an amount in µ$"
        if record.get("id") is not None and not isinstance(record["id"], str):
            return f"{kind} line with id = {show(record['id'])}, not a reservation id"
    return None


def _amount(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


def _lock(handle, path: str) -> None:
    """Hold the trace for this run alone: two runs appending to one ledger would both pay for its open tasks.

    The lock is the kernel's (flock) and ends with the process, a killed one included.
    """
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock to take
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise TraceError(f"{path} is in use by another bamasc run; let it finish, then --resume") from None

