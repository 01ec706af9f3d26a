"""A batch of tasks run by a bounded pool of workers, each task under its guard and, given one, the batch's total.

Memory stays flat however many tasks there are: `concurrency` workers pull
tasks from one iterator (a dataset is read as it is run), each result goes to
the running totals and the caller's `on_result`, and nothing per task is kept
once its task line is written. `run_one` is one task from start to task line;
`run_chunk` runs a list of them. Both take a `Batch`, the state the tasks of a
run share, so a process other than the one that opened the trace can run a
chunk of tasks with its own `Batch` and one shared ledger. `run_batch` is a
whole run on this engine: its start, totals and outcome are the
`BatchSession`'s (runtime/batch_session.py), which the Ray engine shares.
"""

from __future__ import annotations

import asyncio
import time

from bamasc.plan.lengths import Fitted, LengthFit, TooLong
from bamasc.records import record
from bamasc.metering.admission import TaskHold, TotalLink
from bamasc.metering.refusals import ShortOfTotal
from bamasc.metering.threads import hold_for_turn
from bamasc.runtime.batch import BatchLedger, BudgetLevel, Limiter, budget_levels
from bamasc.runtime import execute
from bamasc.runtime.batch_session import BatchOutcome, BatchSession
from bamasc.runtime.execute import ExecOptions, Task, broken, close_providers, fewer_collections, settle_interrupted
from bamasc.metering.guard import guard_class
from bamasc.metering.refusals import DeadlineReached
from bamasc.runtime.interpreter import TaskResult, TaskRun
from bamasc.records import replace
from bamasc.runtime.threads import ThreadError, Threads, run_turn
from bamasc.runtime.tokens import task_tokens
from bamasc.runtime.tool_loop import tool_session


class Batch:
    """What the tasks of one run share: the plans per budget, providers, trace, earlier spend and the ledger."""

    def __init__(self, program, system, options: ExecOptions, providers: dict, trace, ledgers: dict,
                 ledger: BatchLedger | None, limiter: Limiter | None = None, tools=None,
                 threads: Threads | None = None) -> None:
        self.program = program
        self.threads = threads if threads is not None else Threads()  # conversations' turns (runtime/threads.py)
        self.tools = tools  # the run's started ToolSet (runtime/tools.py), when its roles have tools
        self.limiter = limiter  # the rate limiter every call to a provider key waits on (metering/limiter.py)
        self.system = system
        self.options = options
        self.providers = providers
        self.trace = trace
        self.ledgers = ledgers  # unfinished tasks' ledgers from earlier runs, by task id (each used once)
        self.ledger = ledger
        self.total = TotalLink(ledger) if ledger is not None else None  # each task's hold on it (metering/admission.py)
        declared = program.systems.get(system.name) if hasattr(program, "systems") else None
        self.guard_class = guard_class(options.guard, getattr(declared, "budget_check", "before"))
        # A system that checks its budget after each call, or never (the reference's check, a baseline's real
        # cost), may spend past its budget: its bound is no test of what fits, so its template's first length
        # class runs whatever the task's length (its bound still taken at that length).
        self.fit_lengths = getattr(declared, "budget_check", "before") == "before"
        # Every per-task budget a task may run at, largest first.
        self.levels = budget_levels(system, options.selector, options.budget_plans)
        self.main = next(level for level in self.levels if level.system is system)
        self.lengths: dict[int, LengthFit] = {}  # by id of each level's system plan

    def length_of(self, task: Task) -> int:
        """The task's length in tokens: the most any of the run's providers counts (runtime/tokens.py)."""
        return task_tokens(task.text, self.providers.values())

    def template_at(self, level: BudgetLevel, task: Task, chosen: str | None, length: int):
        """The binding `task`, `length` tokens long, runs at a budget level (plan/lengths.py): Fitted, TooLong,
        or None when its template has no binding there. A template given, or picked by a policy, keeps to its
        own bindings; a system's rule (`strongest`, `cheapest`) picks among every template's that fit."""
        plan, lengths = level.system, self._lengths(level.system)
        rule = "cheapest" if plan.selection["rule"] == "cheapest" else "strongest"
        if self.options.template is not None:
            picked = self.options.template
        elif level.selector is None and plan.selection["rule"] != "policy":
            picked = plan.selection["selected"]
        elif plan is self.system and chosen is not None:
            picked = chosen
        elif level.selector is not None:
            (picked,) = level.selector([task.text])
        else:
            picked = plan.selection["selected"]
        if not picked:
            return None
        if not self.fit_lengths:
            template = plan.template(picked)
            return Fitted(lengths.at_length(template, length), length, plan.task_tokens) if template.feasible else None
        if self.options.template is not None:
            return lengths.fit(picked, length, level.budget)
        others = [picked] + [template.name for template in plan.templates if template.name != picked]
        if level.selector is None and plan.selection["rule"] != "policy":
            return lengths.choose(others, length, level.budget, rule)
        # A policy's pick that does not fit at the task's length gives way to the best binding that does.
        fitted = lengths.fit(picked, length, level.budget)
        if isinstance(fitted, TooLong):
            instead = lengths.choose(others, length, level.budget)
            return instead if isinstance(instead, Fitted) else fitted
        return fitted

    def _lengths(self, plan) -> LengthFit:
        if id(plan) not in self.lengths:
            self.lengths[id(plan)] = LengthFit(self.program, plan)
        return self.lengths[id(plan)]


async def run_one(batch: Batch, task: Task, chosen: str | None = None) -> TaskResult:
    """One task: its per-task budget, its worst case reserved from the total, the run, its task line.
    A task of a thread is its next turn (runtime/threads.py): it waits for the turn before it, sees the earlier
    ones as its history, and its worst case is held from the thread's budget too."""
    if task.thread is None:
        return await _run_task(batch, task, chosen)
    try:
        thread = batch.threads.open(task.thread, task.thread_budget)
    except ThreadError as problem:
        result = _skipped(task, batch.system, Skip("failed", str(problem)), 0.0)
        batch.trace.task(task_line(result, batch.guard_class.kind, 0.0))
        return result
    return await run_turn(thread, batch.trace, task, lambda turn: _run_task(batch, task, chosen, turn))


async def _run_task(batch: Batch, task: Task, chosen: str | None = None, turn=None) -> TaskResult:
    """`run_one` of a task; `turn` (thread, number, history) for a thread's turn."""
    earlier = settle_interrupted(batch.trace, task.id, batch.ledgers.pop(task.id, None))
    system = batch.system
    arrived = time.perf_counter()  # the task's deadline counts from here: the total's waiting room is part of its time
    length = batch.length_of(task)
    if batch.ledger is None:
        level, cap, held, why = batch.main, system.budget, None, None
        fitted = batch.template_at(batch.main, task, chosen, length)
        if isinstance(fitted, TooLong):
            fitted, why = None, _too_long(fitted)
        if earlier >= cap - 1e-9:  # nothing of its budget is left to run on
            fitted, why = None, _spent(earlier, cap)
    else:
        try:
            level, fitted, cap, held, why = await _reserve(batch, task, earlier, chosen, length, arrived)
        except DeadlineReached as late:
            level, fitted, cap, held, why = batch.levels[-1], None, 0.0, None, late
    thread_hold = None
    if turn is not None and not isinstance(why, DeadlineReached) and fitted is not None:
        thread_hold, refused = await hold_for_turn(turn[0].link, task.id, cap - earlier,
                                                   fitted.template.worst_case_cost)
        if thread_hold is None:
            why = Skip("thread_exhausted", refused)
            fitted = None
            if held is not None:  # the total's hold goes back: the turn spends nothing
                await batch.total.release(held)
                held = None
        else:
            cap = earlier + thread_hold.amount  # the guard keeps the turn within what the thread holds for it
    if isinstance(why, DeadlineReached):
        result = _late(task, system, earlier, time.perf_counter() - arrived)
    elif fitted is None:
        result = _skipped(task, system, why or _no_binding(), earlier, length)
    else:
        template = fitted.template
        guard = batch.guard_class(cap, spent=earlier)
        try:
            run = TaskRun(batch.program, level.system, template, batch.providers, guard, task.id, task.text, batch.trace,
                          batch.options.retry, batch.options.seed, batch.limiter, arrived=arrived, tools=batch.tools,
                          length=(fitted.tokens, fitted.length_class), history=turn[2] if turn is not None else "")
            result = await run.run()
        except Exception as problem:
            # A defect outside the providers (whose failures the run records
            # itself) ends this task only; every task still gets its line.
            reason = f"internal error: {type(problem).__name__}: {problem}"
            result = broken(task.id, template, guard, reason, system.deadline_s)
        finally:
            if held is not None:
                await batch.total.settle(held, guard.charged - earlier)
            if thread_hold is not None:
                await turn[0].link.settle(thread_hold, guard.charged - earlier)
        if batch.options.allocator is not None:
            batch.options.allocator.observe(level.budget, guard.charged - earlier)
    if turn is not None:
        result = replace(result, thread_id=turn[0].id, turn=turn[1])
    batch.trace.task(task_line(result, batch.guard_class.kind, earlier))
    return result


async def _reserve(batch: Batch, task: Task, earlier: float, chosen: str | None, length: int,
                   arrived: float | None = None):
    """(level, Fitted template, guard cap, the task's hold on the total, why not) for a task under the total.

    From the allocated budget down: at a level whose budget's rest (budget
    less what earlier runs spent on the task) fits in what is left, the task
    runs at that budget; else, where the template's proven bound fits, it runs
    capped at that bound. A level the task's earlier runs already spent is no
    level to run at. Nothing fitting, the task is skipped, with why.
    """
    allocator = batch.options.allocator
    wanted = allocator.choose(task.id) if allocator is not None else batch.system.budget
    while True:
        smallest, spent_at, too_long = None, None, None
        for level in batch.levels:
            if level.budget > wanted + 1e-9:
                continue
            fitted = batch.template_at(level, task, chosen, length)
            if isinstance(fitted, TooLong):
                too_long = too_long or fitted  # the largest budget's: it fits the longest tasks
                continue
            if fitted is None:
                continue
            rest = level.budget - earlier
            if rest <= 1e-9:
                spent_at = level.budget if spent_at is None else max(spent_at, level.budget)
                continue
            if (held := await _hold(batch.total, task, rest)) is not None:
                return level, fitted, level.budget, held, None
            bound = fitted.template.worst_case_cost
            if bound is not None and bound < rest and (held := await _hold(batch.total, task, bound)) is not None:
                return level, fitted, earlier + bound, held, None
            least = rest if bound is None else min(rest, bound)
            smallest = least if smallest is None else min(smallest, least)
        if smallest is None:
            if spent_at is not None:
                return batch.levels[-1], None, 0.0, None, _spent(earlier, spent_at)
            if too_long is not None:
                return batch.levels[-1], None, 0.0, None, _too_long(too_long)
            why = _short_of_total(f"no template has a binding at a per-task budget up to {wanted:g} µ$")
            break
        # What tasks in flight hold comes back, less what they charge: wait while that could make room.
        if batch.ledger.held <= 1e-9 or smallest > batch.ledger.remaining + batch.ledger.held + 1e-9:
            why = _short_of_total(f"the total budget has {max(0.0, batch.ledger.remaining):.1f} µ$ left; "
                                  f"the smallest worst case is {smallest:.1f} µ$")
            break
        await _wait_for_room(batch.ledger, batch.system.deadline_s, arrived)
    return batch.levels[-1], None, 0.0, None, why


async def _hold(total: TotalLink, task: Task, amount: float) -> TaskHold | None:
    """The task's hold of `amount` µ$ on the total, or None when the total has no room for it now."""
    hold = TaskHold(task.id, amount)
    try:
        await total.admit(hold)
    except ShortOfTotal:
        return None
    return hold


async def _wait_for_room(ledger, deadline_s: float | None, arrived: float | None) -> None:
    """Until the next settle of the total; DeadlineReached when the task's deadline (from `arrived`) comes first.
    Nothing is held while it waits, so giving up leaves the total as it was."""
    if deadline_s is None or arrived is None:
        await ledger.wait()
        return
    left = arrived + deadline_s - time.perf_counter()
    try:
        if left <= 0:
            raise TimeoutError
        await asyncio.wait_for(ledger.wait(), left)
    except TimeoutError:
        raise DeadlineReached("the total budget's waiting room") from None


def _late(task: Task, system, earlier: float, waited: float) -> TaskResult:
    """A task whose deadline passed while it waited for room in the total: it stops as the deadline stops a run."""
    return TaskResult(
        task_id=task.id, template=None, answer=None, output=None, cost=earlier, budget=None, bound=None,
        overran=False, status="failed", calls=0, exhausted="deadline", elapsed_s=waited, deadline_s=system.deadline_s,
        error=f"deadline: {waited:.3f} s of {system.deadline_s:g} s went waiting for room in the total budget",
    )


@record
class Skip:
    """Why a task does not start: its status (`skipped_total` or `skipped_budget`) and the reason."""

    status: str
    reason: str
    fits_up_to: int | None = None  # `too_long`: the longest task a binding fits at the budget


def _spent(earlier: float, budget: float) -> Skip:
    return Skip("skipped_budget", f"skipped for its budget: earlier runs charged it {earlier:.1f} µ$ "
                                  f"of a {budget:g} µ$ budget, which leaves nothing to run on")


def _short_of_total(reason: str) -> Skip:
    return Skip("skipped_total", f"skipped for the total budget: {reason}")


def _too_long(why: TooLong) -> Skip:
    return Skip("too_long", why.reason, why.fits_up_to)


def _no_binding() -> Skip:
    return Skip("failed", "the template has no binding at this budget")


def _skipped(task: Task, system, why: Skip, earlier: float, length: int | None = None) -> TaskResult:
    """A task that did not start; its cost is what earlier runs spent on it, as a task line's cost always is."""
    return TaskResult(
        task_id=task.id, template=None, answer=None, output=None, cost=earlier, budget=None, bound=None,
        overran=False, status=why.status, error=why.reason, calls=0, deadline_s=system.deadline_s,
        task_tokens=length, fits_up_to=why.fits_up_to,
    )


def task_line(result: TaskResult, guard_kind: str, earlier: float) -> dict:
    return {
        "task_id": result.task_id,
        "answer": result.answer,
        "cost": round(result.cost, 6),
        "budget": result.budget,
        "bound": None if result.bound is None else round(result.bound, 6),
        "template": result.template,
        "overran": result.overran,
        "status": result.status,
        "error": result.error,
        "calls": result.calls,
        "guard": guard_kind,
        "earlier_runs": round(earlier, 6),
        "exhausted": result.exhausted,
        "elapsed_s": round(result.elapsed_s, 6),
        "deadline_s": result.deadline_s,
        "latency_bound_s": result.latency_bound_s,
        "task_tokens": result.task_tokens,
        "assumed_task_tokens": result.assumed_task_tokens,
        "longer_than_assumed": result.longer_than_assumed,
        "length_class": result.length_class,
        "fits_up_to": result.fits_up_to,
        # A thread's turn names its thread and number (absent otherwise, so other lines keep their form).
        **({"thread_id": result.thread_id, "turn": result.turn} if result.thread_id is not None else {}),
    }


async def run_chunk(batch: Batch, tasks, concurrency: int, on_result=None) -> list[TaskResult] | None:
    """Run `tasks` (an iterable of Task or (Task, chosen template) pairs) `concurrency` at a time.

    Each worker takes the next task when its last one ends, so at most
    `concurrency` tasks are alive. Results go to `on_result` as they come;
    without one they are returned, in the order they finished.
    """
    kept: list[TaskResult] | None = [] if on_result is None else None
    report = on_result if on_result is not None else kept.append
    source = iter(tasks)

    async def worker() -> None:
        # One iterator for every worker: `next` does not await, so no two take the same task.
        for item in source:
            task, chosen = item if isinstance(item, tuple) else (item, None)
            report(await run_one(batch, task, chosen))

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    return kept


async def run_batch(plan, program, system_name: str | None, tasks, options: ExecOptions, progress=None, calls=None,
                    on_result=None) -> BatchOutcome:
    """Run every task of `tasks` not finished in the trace (with `resume`).

    `tasks` (a list, or a DatasetStream read as the run goes) is iterated
    once for the run; the ids of a list, or those a stream hands over, give
    the progress bar its total. Returns the
    running totals; each result also goes to `on_result`, and then
    `progress(done, total, spent, limit)` hears the tasks ended and to run, the
    µ$ they spent and the most the run may spend (`BatchSession.spend_limit`).
    """
    session = BatchSession(plan, program, system_name, tasks, options, calls, options.listener, on_result, progress)
    providers: dict = {}
    try:
        if session.pending_count:
            providers = execute.make_providers(program, session.system.name, options, session.models)
        # The tools start once, before the first call, and stop however the run ends (a ToolStartError spends nothing).
        plans = [session.system, *(level.system for level in options.budget_plans)] if session.pending_count else []
        async with tool_session(program, plans) as tools:
            batch = Batch(program, session.system, options, providers, session.trace, session.ledgers, session.ledger,
                          session.limiter, tools, session.threads)
            with fewer_collections():
                await run_chunk(batch, session.pending(tasks), options.concurrency, session.note)
    finally:
        session.close()
        await close_providers(providers)
    return session.outcome()


async def run_tasks(plan, program, system_name: str | None, tasks: list[Task], options: ExecOptions, progress=None, calls=None):
    """Run every task not already in the trace (with `resume`); returns (results in the order of `tasks`,
    summary, skipped ids). It keeps every result: `run_batch` is the same run with running totals only."""
    results: list[TaskResult] = []
    outcome = await run_batch(plan, program, system_name, tasks, options, progress, calls, results.append)
    order = {task.id: i for i, task in enumerate(tasks)}
    results.sort(key=lambda r: order[r.task_id])
    return results, outcome.summary, outcome.done
