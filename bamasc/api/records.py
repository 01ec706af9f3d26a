"""The API's public records: templates and seats of a plan, tasks, calls, results and the events of a run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Union


@dataclass(frozen=True)
class Seat:
    """One slot instance of a template and the model bound to it."""

    slot: str
    instance: int
    model: str
    cap: int | None = None  # the output cap the compiler chose in its role's `max_output = lo..hi`; None: fixed


@dataclass(frozen=True)
class Template:
    """One template of a compiled system: its binding and its proven worst case."""

    name: str
    feasible: bool
    bound: float | None  # µ$: the proven worst-case cost of the binding; None when infeasible
    latency_bound_s: float | None  # seconds on the critical path; None without latencies or when infeasible
    binding: tuple[Seat, ...]
    selected: bool  # the template the system's rule picks
    cheapest: float | None = None  # when infeasible: the budget (µ$) from which it binds, if any


@dataclass(frozen=True)
class Task:
    """A task to run: its id (in the trace and the results) and its text."""

    id: str
    text: str


@dataclass(frozen=True)
class Call:
    """One attempt at a call, as its trace line records it (docs/trace.md)."""

    node: str  # the plan node, slot[instance]@statement.label
    role: str | None
    model: str
    attempt: int
    prompt_tokens: int
    completion_tokens: int
    reserved: float  # µ$ held before the attempt
    charged: float  # µ$ charged for it
    latency_ms: float | None
    clamped: bool  # max_tokens was lowered to fit the budget
    skipped: bool  # not made: the budget or the deadline left no room
    error: str | None
    rate_wait_s: float | None = None  # seconds waited for the provider key's rate limit


@dataclass(frozen=True)
class Result:
    """How one task ended (the task line of the trace) and its calls."""

    task_id: str
    answer: str | None  # the answer extracted as the system's `answer` kind says, or None
    output: str | None  # the raw text the answer came from
    status: str  # ok | exhausted | failed | error | overbilled | skipped_total | skipped_budget | too_long | interrupted
    # | thread_exhausted (a thread's turn whose worst case did not fit what the thread had left; nothing spent)
    cost: float  # µ$ charged, earlier runs of the task included
    budget: float | None  # µ$ the task ran under; None when skipped for the total
    bound: float | None  # µ$: the proven worst case of the binding that ran, at the task's own length
    template: str | None
    error: str | None
    exhausted: str | None  # "budget" or "deadline" when that ran out
    elapsed_s: float
    calls: tuple[Call, ...]  # every attempt, in the order they ended
    task_tokens: int | None = None  # the task's length in tokens, at which `bound` is taken
    length_class: int | None = None  # the `task_tokens` of the length class whose binding ran
    fits_up_to: int | None = None  # `too_long`: the longest task a binding fits at the budget
    thread_id: str | None = None  # the thread the task was a turn of (`session.thread`)
    turn: int | None = None  # its number in the thread, from 1

    @property
    def ok(self) -> bool:
        """An answer, within the budget: what `bamasc exec` exits 0 for (ok or exhausted with an answer)."""
        return self.status in ("ok", "exhausted")


@dataclass(frozen=True)
class CallStarted:
    """A call attempt is about to be sent: its worst case is reserved."""

    task_id: str
    node: str
    model: str
    attempt: int
    reserved: float


@dataclass(frozen=True)
class CallSettled:
    """A call attempt ended and was charged."""

    task_id: str
    call: Call


@dataclass(frozen=True)
class ToolCalled:
    """A tool call of a tool loop ended (its trace line, docs/trace.md): its price charged, or 0 if refused."""

    task_id: str
    node: str  # the plan node of the call that asked for it
    name: str  # the tool as the role names it
    round: int | None  # the tool loop's round that asked for it
    reserved: float  # µ$ held for its price (0 without one)
    charged: float  # µ$ charged
    error: str | None  # why it ended as an error result, else None


@dataclass(frozen=True)
class TaskDone:
    """The task ended; the last event of a stream."""

    result: Result


Event = Union[CallStarted, CallSettled, ToolCalled, TaskDone]


@dataclass(frozen=True)
class ThreadTurn:
    """One turn of a thread: its number, task, how it ended and what it charged (µ$)."""

    turn: int
    task_id: str
    status: str  # as a Result's, or `running`
    answer: str | None
    charged: float


@dataclass(frozen=True)
class ThreadState:
    """A thread now: its budget (None: no cap of its own), µ$ charged by its turns, held by the turn in flight, left."""

    thread_id: str
    budget: float | None
    charged: float
    held: float
    left: float | None
    turns: tuple[ThreadTurn, ...]


@dataclass(frozen=True)
class BudgetState:
    """What a session's total budget holds: µ$ in all, spent (earlier runs included), held by tasks in flight, left."""

    total: float | None  # None: no total, each task has only its own budget
    spent: float
    held: float
    left: float | None


def call_of(line: dict[str, Any]) -> Call:
    """The Call a trace call line records."""
    return Call(
        node=line["node"], role=line.get("role"), model=line["model"], attempt=line.get("attempt") or 1,
        prompt_tokens=line["prompt_tokens"], completion_tokens=line["completion_tokens"],
        reserved=line["reserved"], charged=line["charged"], latency_ms=line.get("latency_ms"),
        clamped=bool(line.get("clamped")), skipped=bool(line.get("skipped")), error=line.get("error"),
        rate_wait_s=line.get("rate_wait_s"),
    )


def result_of(outcome: Any, calls: tuple[Call, ...]) -> Result:
    """The Result of the runtime's TaskResult."""
    return Result(
        task_id=outcome.task_id, answer=outcome.answer, output=outcome.output, status=outcome.status,
        cost=outcome.cost, budget=outcome.budget, bound=outcome.bound, template=outcome.template,
        error=outcome.error, exhausted=outcome.exhausted, elapsed_s=outcome.elapsed_s, calls=calls,
        task_tokens=getattr(outcome, "task_tokens", None), length_class=getattr(outcome, "length_class", None),
        fits_up_to=getattr(outcome, "fits_up_to", None), thread_id=getattr(outcome, "thread_id", None),
        turn=getattr(outcome, "turn", None),
    )


async def events_until_done(queue: asyncio.Queue[Event | BaseException]) -> AsyncIterator[Event]:
    """A run's events as its queue gets them, up to and with TaskDone; an exception put in the queue is raised."""
    while True:
        event = await queue.get()
        if isinstance(event, BaseException):
            raise event
        yield event
        if isinstance(event, TaskDone):
            return
