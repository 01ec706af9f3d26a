"""`Session`: a plan opened for tasks that arrive one by one (a server), on one trace, one total and one set of providers.

It holds what `run_batch` holds for one batch (the trace, locked; the
providers; the rate limiter; the ledger of the total) for as long as it is
open, and runs each task with `run_one`, the call every batch makes per task.
The trace is the ledger: opening a session on a trace an earlier one left
(killed included) counts everything the trace holds against the total, and
charges each reservation a crash left open in full, as `exec --resume` does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

from bamasc.api import errors
from bamasc.api.checks import checked_budget
from bamasc.api.ids import TaskIds
from bamasc.api.providers import Providers
from bamasc.api.records import BudgetState, Event, Result, TaskDone, ThreadState, events_until_done
from bamasc.api.run import Collector, exec_options, tightened, translated_errors, untyped

INTERRUPTED = "interrupted: the process ended while the task ran; its open reservations are charged in full"


class Session:
    """Runs tasks on one system of a plan until closed. Made by `Plan.session(...)`."""

    def __init__(self, compiled: Any, program: Any, system: Any, *, trace: str | None, total_budget: float | None,
                 concurrency: int, provider: Providers | None, template: str | None, timeout: float = 60.0,
                 retries: int = 3) -> None:
        self._plan = compiled
        self._program = program
        self._system = system
        self.trace = trace
        self.total_budget = None if total_budget is None else checked_budget(total_budget, "total_budget")
        self.concurrency = concurrency
        self._provider = provider
        self._template = template
        self._timeout, self._retries = timeout, retries
        self._batch: Any = None
        self._stack = contextlib.ExitStack()
        self._tools = contextlib.AsyncExitStack()  # the plan's tools, started once for the session
        self._ids = TaskIds()
        self._collector = Collector(self._event)
        self._followers: dict[str, Callable[[Event], None]] = {}  # task id -> where a stream's events go
        self._streamed: set[asyncio.Future[Result]] = set()  # tasks of streams, kept until they end
        self.statuses: Counter[str] = Counter()  # tasks ended this session, by status
        self.spent_here = 0.0  # µ$ charged by this session's tasks
        self.open_reservations = 0  # call attempts reserved and not yet settled
        self.rate_waits = 0  # attempts that waited for a provider key's rate limit
        self.rate_wait_s = 0.0
        self.in_flight = 0  # tasks running or waiting for a turn
        self.watchers: list[Any] = []  # more listeners of this session's trace lines, (kind, line) (serve's /metrics)

    async def __aenter__(self) -> Session:
        await self.open()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, problem: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()

    async def open(self) -> None:
        """Lock the trace, count what it holds, settle what a crash left open, make the providers."""
        from bamasc.runtime.batch import BatchBudget
        from bamasc.runtime.execute import Recorder, Summary, close_providers, fewer_collections, make_limiter
        from bamasc.runtime.execute import make_providers, settle_interrupted
        from bamasc.runtime.threads import read_threads
        from bamasc.runtime.trace import read_ledgers
        from bamasc.runtime.batch_session import run_models
        from bamasc.runtime.tool_loop import tool_session
        from bamasc.runtime.workers import Batch

        if self._batch is not None:
            return
        options = exec_options(self._system, self._program, provider=self._provider, template=self._template,
                               trace=self.trace, concurrency=self.concurrency, listener=self._listen, timeout=self._timeout,
                               retries=self._retries)
        with translated_errors():
            recorder = Recorder(self.trace, Summary(), None, self._listen)
            providers: dict[str, Any] = {}
            try:
                ledgers = read_ledgers(self.trace)
                threads = read_threads(self.trace, ledgers)
                self._ids.update(ledgers)
                earlier = sum(ledger.spent for ledger in ledgers.values())
                for task_id, found in ledgers.items():
                    if not found.finished and found.open:
                        settle_interrupted(recorder, task_id, found)
                        recorder.task(self._interrupted_line(task_id, found.spent))
                ledger = None if self.total_budget is None else BatchBudget(self.total_budget, spent=earlier)
                by_policy = options.selector is not None and options.template is None
                models = run_models(self._system, options, by_policy)
                providers = make_providers(self._program, self._system.name, options, models)
                limiter = make_limiter(self._program, models, options)
            except BaseException:
                recorder.close()
                await close_providers(providers)
                raise
        try:
            with translated_errors():
                tools = await self._tools.enter_async_context(untyped(tool_session)(self._program, [self._system]))
        except BaseException:
            recorder.close()
            await close_providers(providers)
            raise
        self._batch = Batch(self._program, self._system, options, providers, recorder, {}, ledger, limiter, tools,
                            threads)
        self._earlier = earlier
        self._turns = asyncio.Semaphore(self.concurrency)
        self._stack.enter_context(fewer_collections())

    async def close(self) -> None:
        """Close the trace and the providers; tasks still running keep their reservations in the trace."""
        from bamasc.runtime.execute import close_providers

        batch, self._batch = self._batch, None
        if batch is None:
            return
        try:
            await self._tools.aclose()
        finally:
            batch.trace.close()
            await close_providers(batch.providers)
            self._stack.close()

    @property
    def budget(self) -> BudgetState:
        """What the total holds now: spent (the trace's earlier runs included), held by tasks in flight, left."""
        ledger = self._opened().ledger
        if ledger is None:
            return BudgetState(None, self._earlier + self.spent_here, 0.0, None)
        return BudgetState(ledger.total, ledger.spent, ledger.held, max(0.0, ledger.remaining))

    @property
    def models(self) -> tuple[str, ...]:
        """The names of the models the session's tasks may call (one provider each)."""
        return tuple(sorted(self._opened().providers))

    def new_task_id(self) -> str:
        """An id no task of the trace has (16 hex digits)."""
        return self._ids.new()

    def thread(self, thread_id: str, budget: float | None = None) -> Thread:
        """The thread `thread_id` (a conversation, a ticket): its `run(task)` runs the next turn, which sees the
        earlier ones through `{{history}}`, and every turn's worst case is reserved from the thread's `budget` (µ$;
        None: no cap beyond each turn's own). A thread the trace already holds keeps its turns, charges and
        budget; naming it with another budget is a UsageError."""
        from bamasc.runtime.threads import ThreadError

        batch = self._opened()
        try:
            batch.threads.open(thread_id, budget)
        except ThreadError as problem:
            raise errors.UsageError(str(problem)) from None
        return Thread(self, thread_id)

    def thread_state(self, thread_id: str) -> ThreadState | None:
        """What the session knows of the thread (its turns from the trace included); None for an unknown id."""
        found = self._opened().threads.get(thread_id) if isinstance(thread_id, str) else None
        return None if found is None else thread_state(found)

    async def run(self, task: str, *, budget: float | None = None, deadline: float | None = None,
                  task_id: str | None = None, key: str | None = None, team: str | None = None) -> Result:
        """Run one task under the plan's budget (or a tighter `budget`, µ$, and `deadline`, s) and the
        session's total: its worst case is held from the total before it starts. `key` and `team` name who
        sent it (a client key of `bamasc serve`); its task line records them."""
        return await self._run(task, budget, deadline, task_id, None, _sender(key, team))

    async def stream(self, task: str, *, budget: float | None = None, deadline: float | None = None,
                     task_id: str | None = None, key: str | None = None, team: str | None = None
                     ) -> AsyncIterator[Event]:
        """Run one task as `run` does, yielding CallStarted, CallSettled and ToolCalled as they happen, then
        TaskDone with the result. Leaving the loop early stops the listening, not the task: it runs on to its end,
        settled and traced as a `run`'s, so a listener that goes away leaves nothing held."""
        async for event in self._stream(task, budget, deadline, task_id, None, _sender(key, team)):
            yield event

    async def _stream(self, task: str, budget: float | None, deadline: float | None, task_id: str | None,
                      thread_id: str | None, sender: dict[str, str] | None = None) -> AsyncIterator[Event]:
        self._opened()
        if task_id is None:
            task_id = self.new_task_id()
        elif task_id in self._ids or task_id in self._followers:  # never another stream's events
            raise errors.UsageError(f"task id {task_id!r} is already in the trace")
        queue: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        self._followers[task_id] = queue.put_nowait
        runner = asyncio.ensure_future(self._run(task, budget, deadline, task_id, thread_id, sender))
        self._streamed.add(runner)

        def ended(done: asyncio.Future[Result]) -> None:  # after every event of the run: its last line came first
            self._streamed.discard(done)
            self._followers.pop(task_id, None)
            if done.cancelled():
                queue.put_nowait(asyncio.CancelledError())
            else:
                problem = done.exception()
                queue.put_nowait(TaskDone(done.result()) if problem is None else problem)

        runner.add_done_callback(ended)
        async for event in events_until_done(queue):
            yield event

    def _event(self, event: Event) -> None:
        follower = self._followers.get(event.task_id) if not isinstance(event, TaskDone) else None
        if follower is not None:
            follower(event)

    async def _run(self, task: str, budget: float | None, deadline: float | None, task_id: str | None,
                   thread_id: str | None, sender: dict[str, str] | None = None) -> Result:
        from bamasc.runtime.execute import Task as RuntimeTask
        from bamasc.runtime.workers import Batch, run_one

        RunTask = untyped(RuntimeTask)
        batch = self._opened()
        if not isinstance(task, str):
            raise errors.UsageError(f"task must be a str, not {type(task).__name__}")
        if not task.strip():
            raise errors.UsageError("the task is empty: there is nothing to run (and nothing to charge)")
        if task_id is None:
            task_id = self.new_task_id()
        elif task_id in self._ids:
            raise errors.UsageError(f"task id {task_id!r} is already in the trace")
        _, system = tightened(self._plan, self._system, budget, deadline)
        if system is not self._system:
            batch = Batch(batch.program, system, batch.options, batch.providers, batch.trace, {}, batch.ledger,
                          batch.limiter, batch.tools, batch.threads)
        options = batch.options
        chosen = None
        if options.selector is not None and options.template is None:
            (chosen,) = options.selector([task])
        self._ids.add(task_id)
        self.in_flight += 1
        if sender:
            batch.trace.labels[task_id] = sender
        try:
            async with self._turns:
                with translated_errors():
                    outcome = await run_one(batch, RunTask(task_id, task, thread_id), chosen)
        finally:
            self.in_flight -= 1
            batch.trace.labels.pop(task_id, None)
        result = self._collector.result(outcome)
        self.statuses[result.status] += 1
        return result

    def _opened(self) -> Any:
        if self._batch is None:
            raise errors.UsageError("the session is not open: use `async with plan.session(...) as session`")
        return self._batch

    def _listen(self, kind: str, line: dict[str, Any]) -> None:
        if kind == "reserve":
            self.open_reservations += 1
        elif kind in ("call", "tool"):  # a tool call's line settles its price's reservation, if it had one
            if line.get("id") is not None:
                self.open_reservations -= 1
            self.spent_here += line["charged"]
            if line.get("rate_wait_s") is not None:
                self.rate_waits += 1
                self.rate_wait_s += line["rate_wait_s"]
        self._collector(kind, line)
        for watcher in self.watchers:
            watcher(kind, line)

    def _interrupted_line(self, task_id: str, spent: float) -> dict[str, Any]:
        """The task line of a task a crash cut short (its fields as `exec` writes them; docs/trace.md)."""
        return {
            "task_id": task_id, "answer": None, "cost": round(spent, 6), "budget": None, "bound": None,
            "template": None, "overran": False, "status": "interrupted", "error": INTERRUPTED, "calls": 0,
            "guard": "reserve", "earlier_runs": round(spent, 6), "exhausted": None, "elapsed_s": 0.0,
            "deadline_s": self._system.deadline_s, "latency_bound_s": None,
        }


class Thread:
    """A conversation on a session: turns (tasks) run one after another, each seeing the earlier ones through
    `{{history}}`, all within one budget. Made by `session.thread(thread_id, budget=...)`."""

    def __init__(self, session: Session, thread_id: str) -> None:
        self.session = session
        self.id = thread_id

    def __repr__(self) -> str:
        return f"<bamasc.Thread {self.id[:80]!r}>"

    async def run(self, task: str, *, budget: float | None = None, deadline: float | None = None,
                  task_id: str | None = None, key: str | None = None, team: str | None = None) -> Result:
        """Run the thread's next turn (after any turn of it still running). Its worst case (at most `budget`, µ$)
        is reserved from what the thread has left; one that does not fit ends `thread_exhausted`, spending nothing.
        `key` and `team`: as for `Session.run`."""
        return await self.session._run(task, budget, deadline, task_id, self.id, _sender(key, team))

    async def stream(self, task: str, *, budget: float | None = None, deadline: float | None = None,
                     task_id: str | None = None, key: str | None = None, team: str | None = None
                     ) -> AsyncIterator[Event]:
        """`run` of the next turn, yielding its events as `Session.stream` does (the turn runs on if the loop is
        left early)."""
        async for event in self.session._stream(task, budget, deadline, task_id, self.id, _sender(key, team)):
            yield event

    @property
    def state(self) -> ThreadState:
        """Its turns, statuses, answers, charges, budget and what is left."""
        found = self.session.thread_state(self.id)
        assert found is not None  # opened by session.thread
        return found


def _sender(key: str | None, team: str | None) -> dict[str, str]:
    """The fields a task's line records of who sent it."""
    for name, value in (("key", key), ("team", team)):
        if value is not None and not isinstance(value, str):
            raise errors.UsageError(f"{name} must be a str, not {type(value).__name__}")
    return {name: value for name, value in (("key", key), ("team", team)) if value is not None}


def thread_state(thread: Any) -> ThreadState:
    """The API's record of a runtime thread (runtime/threads.py)."""
    from bamasc.api.records import ThreadTurn

    turns = tuple(ThreadTurn(turn.number, turn.task_id, turn.status or "running", turn.answer, turn.charged)
                  for turn in thread.turns.values())
    return ThreadState(thread.id, thread.budget, thread.charged, thread.ledger.held, thread.ledger.left, turns)
