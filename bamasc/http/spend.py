"""Where the money went: trace records folded into one summary that the report and `/ui` both draw.

A `SpendBook` takes the records of any trace `exec`, `serve` or `proxy`
writes, one at a time and in file order (`add`), and answers a `summary`, a
plain JSON-able dict, for everything or for what one caller may see. The
money is read as the trace says it: a task's or a scope's spend is the sum of
its call and tool lines' `charged`; a reservation without its call line is
`held` (in flight, or open for good where a run died: the ledger then counts
it in full); a skipped call line is a refused call, with its `error` as why.
Fields the book does not know are ignored, so a later trace field changes
nothing here. Spend over time is drawn on the lines' clock (`at`;
bamasc/http/timeline.py). A `TraceFollower` reads a trace that a server is
still writing, a complete line at a time.
"""

from __future__ import annotations

import json
import math
import os
import time

from bamasc.http.timeline import MoneyEvent, TraceClock, stamp_problem, timeline, window_lines
from bamasc.rows import RowError, parse_line
from bamasc.words import show

LINE_TYPES = ("reserve", "call", "tool", "task", "budget", "turn")
SHOWN_TASKS = 10  # the dearest and the slowest tasks listed, each with its calls
SHOWN_REFUSALS = 500  # refused calls listed, the latest kept (every one is counted)
RATIO_BINS = 20  # bins of cost / bound from 0 to 1; one more holds every task past its bound
_CALLS_KEPT = 50  # calls kept per task for the listings


class TraceLineError(ValueError):
    """A trace line the report cannot use; the message names the file, the line and what is wrong."""


class _Task:
    """One task (exec, serve) or scope (proxy): its money, its outcome, and its calls."""

    __slots__ = ("source", "task_id", "key", "team", "status", "template", "budget", "bound", "spent", "calls",
                 "attempts", "refused", "latency_ms", "elapsed_s", "overbilled", "ran", "timed", "by_what")

    def __init__(self, source: str, task_id: str) -> None:
        self.source, self.task_id = source, task_id
        self.key = self.team = self.status = self.template = None
        self.budget = self.bound = self.elapsed_s = None
        self.spent = self.latency_ms = 0.0
        self.calls: list[dict] = []
        self.attempts = self.refused = 0
        self.overbilled = False
        self.ran = False  # a task of a plan (its lines name plan nodes), not a proxy's scope
        self.timed = False  # some line of it says how long it took
        self.by_what: dict[tuple[str, str], float] = {}  # ("call", model) or ("tool", name) -> charges, every line

    def row(self) -> dict:
        return {"task_id": self.task_id, "source": self.source, "status": self.status_now, "template": self.template,
                "key": self.key, "team": self.team, "budget": self.budget, "bound": self.bound,
                "spent": round(self.spent, 6), "attempts": self.attempts, "refused": self.refused,
                "seconds": self.seconds, "calls": self.calls}

    @property
    def status_now(self) -> str:
        """A task's last task line's status (`unfinished` before it has one); a scope's: `overbilled`, `refused`
        (its last call hit a limit), or `open`."""
        if self.status is not None:
            return self.status
        if self.ran:
            return "unfinished"
        if self.overbilled:
            return "overbilled"
        return "refused" if self.calls and self.calls[-1].get("refused") else "open"

    @property
    def seconds(self) -> float | None:
        """Its wall time: the task line's `elapsed_s`, else the sum of its attempts' latencies; None when the trace
        records neither (a proxy's lines carry no durations)."""
        if self.elapsed_s is not None:
            return float(self.elapsed_s)
        return self.latency_ms / 1000 if self.timed else None


class SpendBook:
    """The records of one or more traces, folded as they come."""

    def __init__(self) -> None:
        self.tasks: dict[tuple[str, str], _Task] = {}
        self.open: dict[tuple[str, str], tuple[_Task, float, tuple[str, ...]]] = {}  # reservations in flight
        self.events: list[MoneyEvent] = []  # each line that moved money or granted a budget, in the traces' order
        self.clock = TraceClock()
        self.refusals: list[tuple[_Task, dict]] = []
        self.levels: dict[str, float] = {}  # a key's or team's window counter -> its charges
        self.level_budgets: dict[str, float] = {}  # a window counter -> its limit, as its latest reserve line says
        self.sources: list[str] = []
        self.ignored_stamps = 0  # lines whose `at` was not a time, read as if they had none (TraceFollower)

    def _task(self, source: str, task_id: str) -> _Task:
        task = self.tasks.get((source, task_id))
        if task is None:
            task = self.tasks[(source, task_id)] = _Task(source, task_id)
        return task

    def add(self, record: dict, source: str = "") -> None:
        """Fold one checked record (`check_record`) of the trace `source`."""
        if source not in self.sources:
            self.sources.append(source)
        kind = record["type"]
        at = record.get("at")
        self.clock.seen(source, at)
        if kind == "turn":  # a thread's turn about to start: its task's lines say the rest
            return
        task = self._task(source, record["task_id"])
        if "node" in record or kind == "task":
            task.ran = True
        elif task.key is None and " " in task.task_id:
            task.key = task.task_id.split(" ", 1)[0]  # a proxy key's scope is `<key> <scope>` (proxy/access.py)
        granted, settled_in = 0.0, ()
        if kind in ("reserve", "budget") and _amount(record.get("budget")):
            granted = self._grant(task, float(record["budget"]))
        if kind == "reserve":
            levels = tuple(str(level) for level in record.get("levels") or () if isinstance(level, str))
            for level in levels:
                if level.startswith("team:"):
                    task.team = level.split(":")[1]
            for level, limit in zip(record.get("levels") or (), record.get("level_budgets") or ()):
                if isinstance(level, str):
                    self.level_budgets[level] = float(limit)
            self.open[(source, record["id"])] = (task, float(record["reserved"]), levels)
        elif kind in ("call", "tool"):
            settled_in = self._settled(task, record, source)
        elif kind == "task":
            # serve names the client key (and its team) that sent a task, so a key finds its tasks after a restart
            task.key = _text(record.get("key")) or task.key
            task.team = _text(record.get("team")) or task.team
            task.status = record.get("status") if isinstance(record.get("status"), str) else "unknown"
            task.template = _text(record.get("template"))
            task.bound = float(record["bound"]) if _amount(record.get("bound")) else task.bound
            task.elapsed_s = float(record["elapsed_s"]) if _amount(record.get("elapsed_s")) else None
            if _amount(record.get("budget")):
                granted = self._grant(task, float(record["budget"]), latest=True)
        charged = float(record["charged"]) if kind in ("call", "tool") else 0.0
        if charged or granted:
            self.events.append(self.clock.event(source, MoneyEvent(task, charged, granted, settled_in, at)))

    @staticmethod
    def _grant(task: _Task, budget: float, latest: bool = False) -> float:
        """Set a task's budget: a scope's is the lowest it was given, a task's the one its last task line ran under.
        Returns what that adds to the budgets granted (negative when lowered)."""
        before = task.budget or 0.0
        task.budget = budget if task.budget is None or latest else min(task.budget, budget)
        return task.budget - before

    def _settled(self, task: _Task, record: dict, source: str) -> tuple[str, ...]:
        """Fold a call or tool line; returns the window counters its charge went to."""
        charged = float(record["charged"])
        held = self.open.pop((source, record.get("id")), None) if record.get("id") is not None else None
        levels = held[2] if held else ()
        for level in levels:
            self.levels[level] = self.levels.get(level, 0.0) + charged
        task.spent += charged
        error = _text(record.get("error"))
        latency = float(record["latency_ms"]) if _amount(record.get("latency_ms")) else 0.0
        if record["type"] == "tool":
            latency = float(record["duration_ms"]) if _amount(record.get("duration_ms")) else 0.0
        task.latency_ms += latency
        task.timed = task.timed or "latency_ms" in record or "duration_ms" in record
        refused = record["type"] == "call" and record.get("skipped") is True
        if error and error.startswith("overbilled: "):
            task.overbilled = True
        call = {"what": _text(record.get("name") if record["type"] == "tool" else record.get("model")),
                "kind": record["type"], "node": _text(record.get("node")), "charged": round(charged, 6),
                "reserved": float(record["reserved"]) if _amount(record.get("reserved")) else 0.0,
                "ms": round(latency, 3), "error": error, "refused": refused}
        if refused:
            task.refused += 1
            self.refusals.append((task, call))
        else:
            task.attempts += 1
        task.calls.append(call)
        if call["what"] is not None:
            spot = (record["type"], call["what"])
            task.by_what[spot] = task.by_what.get(spot, 0.0) + charged
        if len(task.calls) > _CALLS_KEPT:
            del task.calls[: len(task.calls) - _CALLS_KEPT]
        return levels

    def summary(self, visible=None, live: dict | None = None) -> dict:
        """Everything the page draws, for the tasks `visible(task_row)` lets through (None: every one)."""
        tasks = [task for task in self.tasks.values() if visible is None or visible(task)]
        chosen = {id(task) for task in tasks}
        held = [(task, amount) for task, amount, _ in self.open.values() if id(task) in chosen]
        statuses = _count(task.status_now for task in tasks if task.ran)
        scopes = _count(task.status_now for task in tasks if not task.ran)
        refusals = [(task, call) for task, call in self.refusals if id(task) in chosen]
        totals = {
            "spent": round(sum(task.spent for task in tasks), 6),
            "held": round(sum(amount for _, amount in held), 6),
            "refused": len(refusals),
            "attempts": sum(task.attempts for task in tasks),
            "budgets": round(sum(task.budget or 0.0 for task in tasks), 6),
            "tasks": sum(statuses.values()), "scopes": sum(scopes.values()),
            "tasks_by_status": statuses, "scopes_by_status": scopes,
        }
        events = self.events if visible is None else [event for event in self.events if id(event.task) in chosen]
        return {
            "sources": self.sources, "totals": totals, "live": live,
            "timeline": timeline(events, self.ignored_stamps),
            "ratios": _ratios(tasks),
            "by_model": _spend_by(tasks, "call"),
            "by_tool": _spend_by(tasks, "tool"),
            "by_template": _sums((task.template or ("(proxy scope)" if not task.ran else "(unfinished)"), task.spent)
                                 for task in tasks),
            "by_key": _sums((task.key, task.spent) for task in tasks if task.key),
            "by_team": _sums((task.team, task.spent) for task in tasks if task.team),
            "windows": window_lines(self._windows(tasks), self.level_budgets, self.events),
            "dearest": [task.row() for task in sorted(tasks, key=lambda task: -task.spent)[:SHOWN_TASKS]],
            "slowest": [task.row() for task in sorted((task for task in tasks if task.seconds is not None),
                                                      key=lambda task: -task.seconds)[:SHOWN_TASKS]],
            "refusals": [{"task_id": task.task_id, "source": task.source, "key": task.key, "model": call["what"],
                          "node": call["node"], "why": call["error"] or "(no reason recorded)"}
                         for task, call in refusals[-SHOWN_REFUSALS:]],
        }

    def _windows(self, tasks: list[_Task]) -> list[tuple[str, float]]:
        """Spend per key and team window (`key:NAME:1d@...`) of the visible tasks' keys and teams."""
        names = {f"key:{task.key}" for task in tasks if task.key} | {f"team:{task.team}" for task in tasks if task.team}
        return [(level, spent) for level, spent in sorted(self.levels.items())
                if ":".join(level.split(":")[:2]) in names]


def _count(values) -> dict[str, int]:
    found: dict[str, int] = {}
    for value in values:
        found[value] = found.get(value, 0) + 1
    return dict(sorted(found.items()))


def _sums(pairs) -> dict[str, float]:
    found: dict[str, float] = {}
    for name, amount in pairs:
        found[name] = found.get(name, 0.0) + amount
    return {name: round(amount, 6) for name, amount in sorted(found.items(), key=lambda item: -item[1])}


def _spend_by(tasks: list[_Task], kind: str) -> dict[str, float]:
    return _sums((name, amount) for task in tasks for (line, name), amount in task.by_what.items() if line == kind)


def _ratios(tasks: list[_Task]) -> dict:
    """How many tasks spent each share of their bound (a scope: of its budget), in RATIO_BINS bins and one past 1."""
    counts = [0] * (RATIO_BINS + 1)
    measured = 0
    for task in tasks:
        ceiling = task.bound if task.bound else task.budget if not task.ran else None
        if not ceiling:
            continue
        measured += 1
        share = task.spent / ceiling
        counts[RATIO_BINS if share > 1 else min(RATIO_BINS - 1, int(share * RATIO_BINS))] += 1
    return {"bins": RATIO_BINS, "counts": counts, "measured": measured}


def _amount(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


def _text(value: object) -> str | None:
    return value[:500] if isinstance(value, str) else None


def check_record(record: object) -> str | None:
    """Why `record` is not a trace line the book can fold, or None. Unknown fields are allowed."""
    if not isinstance(record, dict):
        return f"not a trace record (a JSON object), but {type(record).__name__} {show(record)}"
    kind = record.get("type")
    if kind not in LINE_TYPES:
        return f"unknown record type {show(kind)} (one of {', '.join(LINE_TYPES)})"
    if not isinstance(record.get("task_id"), str) or not record["task_id"]:
        return f"{kind} line without a task_id (a string), got {show(record.get('task_id'))}"
    needed = {"reserve": ("reserved",), "call": ("charged",), "tool": ("charged",), "budget": ("budget",)}
    for field in needed.get(kind, ()):
        if not _amount(record.get(field)):
            return f"{kind} line with {field} = {show(record.get(field))}, not an amount in µ$"
    if kind == "reserve" and not isinstance(record.get("id"), str):
        return f"reserve line without an id, got {show(record.get('id'))}"
    if kind in ("call", "tool") and record.get("id") is not None and not isinstance(record["id"], str):
        return f"{kind} line with id = {show(record['id'])}, not a reservation id"
    for field in ("budget", "bound", "latency_ms", "elapsed_s", "reserved"):
        value = record.get(field)
        if value is not None and not _amount(value):
            return f"{kind} line with {field} = {show(value)}, not a number of 0 or more"
    limits = record.get("level_budgets")
    if limits is not None and not (isinstance(limits, list) and all(_amount(limit) for limit in limits)):
        return f"{kind} line with level_budgets = {show(limits)}, not a list of amounts in µ$"
    return None


def read_trace(book: SpendBook, path: str, source: str | None = None) -> int:
    """Fold every line of the trace at `path` into `book`; returns the lines read. A line that is not a trace
    record is a TraceLineError naming `path:line`; only a last line cut short by a crash is skipped."""
    try:
        handle = open(path, "rb")
    except OSError as problem:
        raise TraceLineError(f"{path}: cannot read the trace: {problem.strerror or problem}") from None
    count = 0
    now = time.time()
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record, problem = _parsed(line)
            if problem is None:
                problem = stamp_problem(record.get("at"), now)
                problem = problem and f"{record['type']} line with {problem}"
            if problem is not None:
                if not line.endswith(b"\n") and record is None:
                    break  # the half-written last line of a run that was killed
                raise TraceLineError(f"{path}:{number}: {problem}")
            book.add(record, path if source is None else source)
            count += 1
    return count


def _refuse_constant(name: str):
    raise ValueError(name)


# The C decoder reads the lines bamasc wrote; only one it refuses goes through the careful parser that says why.
_PLAIN = json.JSONDecoder(parse_constant=_refuse_constant)


def _parsed(line: bytes) -> tuple[dict | None, str | None]:
    try:
        record = _PLAIN.decode(line.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        try:
            record = parse_line(line)
        except RowError as problem:
            return None, str(problem)
    problem = check_record(record)
    return (record, problem) if problem is None else ({}, problem)


class TraceFollower:
    """A trace a server is appending to, read from where the last read stopped, whole lines only.

    A line that is not a record is counted in `bad` and skipped (the server's
    own writer wrote it, so only someone who edited the file could have), and
    the page says how many. A line whose `at` is not a time keeps its money:
    it is read as a line without one, and the page counts it.
    """

    def __init__(self, path: str | None, source: str = "") -> None:
        self.path, self.source = path, source
        self.book = SpendBook()
        self.offset = 0
        self.bad = 0

    def refresh(self) -> SpendBook:
        if not self.path or not os.path.exists(self.path):
            return self.book
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        for line in data[:end].split(b"\n"):
            if line.strip():
                record, problem = _parsed(line)
                if problem is None:
                    if stamp_problem(record.get("at"), time.time()) is not None:
                        record = {name: value for name, value in record.items() if name != "at"}
                        self.book.ignored_stamps += 1
                    self.book.add(record, self.source)
                else:
                    self.bad += 1
        self.offset += end
        return self.book
