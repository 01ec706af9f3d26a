"""Threads: conversations whose turns (tasks) share a budget and see the earlier turns, as the trace records them.

A thread is named by its id and holds a budget (metering/threads.py owns
the money: each turn's worst case is reserved from what the thread has
left). Its turns run one at a time, in the order they arrived: a turn waits
for the one before it to end, so each sees every earlier answer. A role
that declares `history = N` shows the earlier turns in `{{history}}`, cut to
their last N bytes of UTF-8 (so at most N tokens for any tokenizer, which is
what every call's bound counts).

The trace is the thread's memory: a `turn` line before a turn starts
(thread, number, budget, the customer's text) and its task line (with
`thread_id` and `turn`) when it ends. A session, server or `exec --resume`
started on the trace reads both back (`read_threads`) and knows each
thread's turns, charges (every call a turn's task holds, a crash's open
reservations in full) and history.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

from bamasc.metering.threads import ThreadBudget, ThreadLink, thread_budget_problem, thread_id_problem
from bamasc.records import record


class ThreadError(ValueError):
    """A thread id that cannot be used, or a thread opened again with another budget; the message says which."""


def storable(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate (valid in a Python or JSON string, not in UTF-8) becomes '?'.
    A turn's text goes to the trace and into later prompts; its own task is refused before any call
    (runtime/render.py, `unencodable`)."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def history_within(text: str, cap: int) -> str:
    """The last `cap` bytes of `text` (UTF-8), cut at a character's start: the most recent turns are kept."""
    text = storable(text)
    encoded = text.encode("utf-8")
    if len(encoded) <= cap:
        return text
    return encoded[len(encoded) - cap:].decode("utf-8", "ignore")


@record
class Turn:
    """One turn of a thread: its task, number (1, 2, ...), the customer's text and how it ended."""

    task_id: str
    number: int
    text: str
    status: str | None = None  # None: running (or cut short by a crash the trace has not settled)
    answer: str | None = None
    charged: float = 0.0  # µ$, every run of the turn's task included


class Thread:
    """One thread's turns, its budget's ledger and the order its turns run in."""

    def __init__(self, thread_id: str, budget: float | None, spent: float = 0.0) -> None:
        self.id = thread_id
        self.ledger = ThreadBudget(thread_id, budget, spent)
        self.link = ThreadLink(self.ledger)
        self.turns: dict[str, Turn] = {}  # by task id, in turn order
        self._last: asyncio.Future | None = None  # the end of the latest turn to arrive

    @property
    def budget(self) -> float | None:
        return self.ledger.budget

    @property
    def charged(self) -> float:
        return self.ledger.spent

    def number_for(self, task_id: str) -> int:
        """The turn's number: its own when the trace has it (a rerun), else the next one."""
        found = self.turns.get(task_id)
        return found.number if found is not None else len(self.turns) + 1

    def history(self, before: int) -> str:
        """The turns before number `before`, oldest first: what `{{history}}` shows, before its cap."""
        parts = []
        for turn in self.turns.values():
            if turn.number >= before:
                continue
            answer = turn.answer if turn.answer is not None else f"(no answer: {turn.status or 'interrupted'})"
            parts.append(f"Turn {turn.number}\nCustomer: {turn.text}\nAnswer: {answer}")
        return "\n\n".join(parts)

    def queue(self) -> tuple[asyncio.Future | None, asyncio.Future]:
        """(the end of the turn before, this turn's end): taken without awaiting, so turns run as they arrived."""
        before, done = self._last, asyncio.get_running_loop().create_future()
        self._last = done
        return before, done

    def began(self, task_id: str, number: int, text: str) -> None:
        self.turns[task_id] = Turn(task_id, number, text, charged=self.turns[task_id].charged
                                   if task_id in self.turns else 0.0)

    def ended(self, turn: Turn) -> None:
        self.turns[turn.task_id] = turn


@contextlib.asynccontextmanager
async def in_order(thread: Thread):
    """The turn's place in its thread: it waits for the turn before to end (however it ends). The place is
    taken before the first await, so turns run in the order they arrived."""
    before, done = thread.queue()
    try:
        await in_turn(before)
        yield
    finally:
        end_turn(before, done)


async def run_turn(thread: Thread, trace, task, run_task):
    """`task` as the next turn of `thread`: in its order, its `turn` line written, then `run_task((thread, number,
    history))` (the task, its worst case held from the thread), whose result joins the thread."""
    async with in_order(thread):
        number, text = thread.number_for(task.id), storable(task.text)
        trace.turn({"task_id": task.id, "thread_id": thread.id, "turn": number, "thread_budget": thread.budget,
                    "task": text})
        history = thread.history(number)
        thread.began(task.id, number, text)
        result = await run_task((thread, number, history))
        thread.ended(Turn(task.id, number, text, result.status, result.answer, result.cost))
        return result


async def in_turn(before: asyncio.Future | None) -> None:
    """Wait for the turn before to end (however it ends)."""
    if before is not None:
        await asyncio.shield(before)


def end_turn(before: asyncio.Future | None, done: asyncio.Future) -> None:
    """This turn is over: the next may start, but never before the one before it ended (a cancelled wait)."""
    def finish(_=None) -> None:
        if not done.done():
            done.set_result(None)

    if before is None or before.done():
        finish()
    else:
        before.add_done_callback(finish)


class Threads:
    """Every thread a run knows: those the trace holds and those opened since."""

    def __init__(self, found: dict[str, Thread] | None = None) -> None:
        self.found: dict[str, Thread] = found or {}

    def get(self, thread_id: str) -> Thread | None:
        return self.found.get(thread_id)

    def open(self, thread_id: str, budget: float | None) -> Thread:
        """The thread of that id, made if new; a budget that differs from the one it has is a ThreadError.
        A later turn may leave the budget out (None): it keeps the thread's."""
        problem = thread_id_problem(thread_id) or thread_budget_problem(budget)
        if problem is not None:
            raise ThreadError(problem)
        thread = self.found.get(thread_id)
        if thread is None:
            thread = self.found[thread_id] = Thread(thread_id, None if budget is None else float(budget))
            return thread
        if budget is not None and (thread.budget is None or abs(float(budget) - thread.budget) > 1e-9):
            had = "no budget" if thread.budget is None else f"a budget of {thread.budget:g} µ$"
            raise ThreadError(f"thread {thread_id[:80]!r} has {had}; a turn cannot give it {float(budget):g} µ$ "
                              "(leave thread_budget out, or use a new thread id)")
        return thread


def read_threads(path: str | None, ledgers: dict) -> Threads:
    """The threads an existing trace holds: their turn lines and task lines, charged as `ledgers` (by task id,
    runtime/trace.read_ledgers) say. Only lines that name a thread are decoded."""
    from bamasc.runtime.trace import TraceError

    threads: dict[str, Thread] = {}
    if not path or not os.path.exists(path):
        return Threads(threads)
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if b'"thread_id"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # the torn last line of a killed run (read_ledgers refuses any other)
            if not isinstance(record, dict) or record.get("type") not in ("turn", "task"):
                continue
            thread_id, task_id = record.get("thread_id"), record.get("task_id")
            if thread_id is None:
                continue
            problem = thread_id_problem(thread_id) or (None if isinstance(task_id, str) else "no task_id")
            if record["type"] == "turn":
                problem = problem or thread_budget_problem(record.get("thread_budget"))
                if not problem and (type(record.get("turn")) is not int or not isinstance(record.get("task"), str)):
                    problem = "a turn line needs `turn` (a whole number) and `task` (the text)"
            if problem:
                raise TraceError(f"{path}:{number}: {problem}")
            thread = threads.get(thread_id)
            if thread is None:
                thread = threads[thread_id] = Thread(thread_id, record.get("thread_budget"))
            if record["type"] == "turn":
                thread.turns[task_id] = Turn(task_id, record["turn"], record["task"])
            elif task_id in thread.turns:
                turn = thread.turns[task_id]
                thread.turns[task_id] = Turn(task_id, turn.number, turn.text, record.get("status"),
                                             record.get("answer"))
    for thread in threads.values():
        for task_id, turn in thread.turns.items():
            ledger = ledgers.get(task_id)
            charged = ledger.spent if ledger is not None else 0.0
            # Nothing runs while the trace is read (a run holds its lock): a turn without an outcome was cut short.
            status = turn.status if turn.status is not None else "interrupted"
            thread.turns[task_id] = Turn(turn.task_id, turn.number, turn.text, status, turn.answer, charged)
            thread.ledger.spent += charged
        thread.turns = dict(sorted(thread.turns.items(), key=lambda item: item[1].number))
    return Threads(threads)

