"""`--engine ray`: a batch's tasks spread over Ray actors, on one machine or a cluster, under one total and one limiter.

The driver (this process) reads what the trace holds, picks templates (a
policy runs here), and hands each task to the runner actor with the fewest
tasks in flight, keeping at most twice `concurrency` queued at each; Ray
runs them, `concurrency` at a time per runner. One `Ledger` actor holds the
total budget and one `Limits` actor the rate limiter, so the total and the
rate limits hold across every runner. Each runner writes its own trace shard;
the shards are merged into the trace, by task id, when the run ends (and,
left by a killed run, before the next one reads the trace). Ray is imported
here only, when a run starts: it is the optional `ray` extra.

The driver outlives its actors. A runner that dies takes no more tasks; the
ledger keeps in full what its tasks held, its shard is merged at once, and
each of its tasks without a task line there gets an `interrupted` one
(--resume runs it again, its open reservations counted in full); the others
run on. A dead ledger or limiter stops the run: tasks running end under
their guards, no other starts, and the run ends saying how many did not.
"""

from __future__ import annotations

import json
import logging
import os

from bamasc.runtime.batch import BatchBudget
from bamasc.runtime.batch_session import BatchOutcome, BatchSession
from bamasc.runtime.execute import ExecOptions, close_providers, make_providers
from bamasc.runtime.interpreter import TaskResult
from bamasc.runtime.ray_actors import Ledger, Limits, Runner, SharedActorLost
from bamasc.runtime.shards import DYING_PROCESS_S, merge_shards, shard_path, shards_of
from bamasc.runtime.trace import TaskLedger, TraceError, TraceWriter
from bamasc.runtime.workers import task_line

QUEUED_PER_SLOT = 2  # tasks sent to a runner per task it runs at once: the next is there when one ends
DEAD_SHARD_S = 5.0  # how long the driver waits for a dead runner's shard lock before leaving it to the run's end


class RayUnavailable(ValueError):
    """Ray is not installed, or no Ray instance could be started or reached."""


def load_ray():
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--engine ray needs Ray: pip install 'bamasc[ray]'") from None
    return ray


def start_ray(address: str | None, actors: int) -> bool:
    """Connect to the cluster at `address`, or start a local instance on 127.0.0.1; True if this call started
    it (and so should shut it down). An instance this process already has is used as it is."""
    ray = load_ray()
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network at run time
    try:
        if address:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        else:
            ray.init(address="local", num_cpus=max(actors, os.cpu_count() or 1), include_dashboard=False,
                     _node_ip_address="127.0.0.1", logging_level=logging.WARNING, log_to_driver=False)
    except Exception as problem:  # Ray raises ConnectionError, RuntimeError, ValueError...
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise RayUnavailable(f"cannot start or reach {where}: {problem}") from None
    return True


def run_on_ray(plan, program, system_name: str | None, tasks, options: ExecOptions, *, actors: int = 4,
               address: str | None = None, progress=None, calls: list | None = None,
               on_result=None) -> BatchOutcome:
    """`workers.run_batch` on Ray: the same tasks, answers, costs and trace lines, run by `actors` runners."""
    from bamasc.runtime.tool_loop import declarations

    used = declarations(program, [plan.system(system_name), *(level.system for level in options.budget_plans)])
    if used:  # each actor would need its own MCP servers and python tools: not yet
        raise ValueError(f"the Ray engine does not run tools yet (the plan uses {', '.join(t.name for t in used)}): "
                         "run it on the local engine (--engine local)")
    ray = load_ray()
    if options.allocator is not None:
        raise ValueError("--allocate runs on the local engine only: its estimates are one process's state")
    if options.ledger is not None:
        raise ValueError("a shared ledger object cannot be shared with Ray actors; give the total instead")
    # Its trace is held for the whole run: the lock keeps a second run off it. The runners write shards.
    session = BatchSession(plan, program, system_name, tasks, options, on_result=on_result, progress=progress)
    system, trace = session.system, session.trace
    started = False
    try:
        if not session.pending_count:
            return session.outcome()
        # A missing API key is told here, before Ray starts.
        _check_providers(program, system.name, options, session.models)
        started = start_ray(address, actors)
        shared = ray.remote(Ledger).options(num_cpus=0, max_concurrency=100_000)
        ledger_actor = None if session.ledger is None else shared.remote(session.ledger.total, session.earlier_total)
        limits = ray.remote(Limits).options(num_cpus=0, max_concurrency=100_000)
        limits_actor = None if session.limiter is None else limits.remote(session.limiter)
        runner = ray.remote(Runner).options(num_cpus=0, max_concurrency=options.concurrency + 1,
                                            scheduling_strategy="SPREAD")
        plan_ref, program_ref, options_ref = _sendable(ray, (plan, program, options))
        shards = [shard_path(options.trace_path, k) for k in range(actors)]
        runners = [runner.remote(plan_ref, program_ref, system.name, options_ref, session.models, shard, ledger_actor,
                                 limits_actor, calls is not None, k)
                   for k, shard in enumerate(shards)]
        fleet = Fleet(ray, runners, shards, ledger_actor, trace, options.guard, system.deadline_s, session.note)
        finished = False
        try:
            fleet.start()
            fleet.dispatch(session.pending(tasks), session.ledgers, options.concurrency * QUEUED_PER_SLOT)
            finished = True
        finally:
            for by_role, by_model, kept in fleet.close():
                _add_rows(session.summary.by_role, by_role)
                _add_rows(session.summary.by_model, by_model)
                if calls is not None and kept:
                    calls.extend(kept)
            try:
                merge_shards(trace, shards_of(options.trace_path), DYING_PROCESS_S)
            except TraceError as problem:
                if finished:  # else the run's own failure is the one to tell
                    fleet.stop(str(problem))
        stopped = fleet.stopped
        not_started = session.pending_count - session.totals.ended
        if not_started > 0:
            stopped = f"{stopped or 'the run stopped'}: {not_started} tasks not started; --resume runs them"
        ledger = None
        if session.ledger is not None:
            ledger = _final_ledger(ray, ledger_actor, session.ledger.total, session.earlier_total, fleet.spent)
        return session.outcome(ledger, stopped)
    finally:
        session.close()
        if started:
            ray.shutdown()


class Fleet:
    """The runners of a run as the driver sees them: which are alive, what each has in flight, and what
    becomes of a task whose runner dies (interrupted) or that a dead ledger or limiter keeps from starting
    (not started; the run stops sending tasks)."""

    def __init__(self, ray, runners: list, shards: list, ledger, trace: TraceWriter, guard_kind: str,
                 deadline_s: float | None, note) -> None:
        self.ray, self.runners, self.shards, self.ledger, self.trace = ray, runners, shards, ledger, trace
        self.guard_kind, self.deadline_s, self.note = guard_kind, deadline_s, note
        self.alive = [True] * len(runners)
        self.load = [0] * len(runners)
        self.in_flight: dict = {}  # object ref -> (runner number, task, chosen template, its earlier ledger)
        self.merged: dict[int, dict] = {}  # a dead runner's shard, merged at once: its lines by task id
        self.stopped: str | None = None  # why no more tasks are sent
        self.spent = 0.0  # what this run charged, over every task with an outcome (for a ledger that died)

    def start(self) -> None:
        try:
            _get(self.ray, [each.start.remote() for each in self.runners])
        except self.ray.exceptions.RayError as problem:
            raise ValueError(f"a runner actor did not start: {type(problem).__name__}: {problem}") from None

    def stop(self, why: str) -> None:
        self.stopped = self.stopped or why

    def dispatch(self, source, ledgers: dict, queued: int) -> None:
        """Send each task to the live runner with the fewest in flight, at most `queued` each, until the
        tasks run out or the run stops; then wait for those in flight."""
        for task, chosen in source:
            while self.stopped is None and self._least_loaded()[1] >= queued:
                self._collect(block=True)
            if self.stopped is not None:
                break
            k, _ = self._least_loaded()
            earlier = ledgers.pop(task.id, None)
            self.in_flight[self.runners[k].run.remote(task, chosen, earlier)] = (k, task, chosen, earlier)
            self.load[k] += 1
            self._collect(block=False)
        while self.in_flight:
            self._collect(block=True)

    def _least_loaded(self) -> tuple[int, int]:
        live = [(load, k) for k, load in enumerate(self.load) if self.alive[k]]
        if not live:
            self.stop("every runner actor died")
            return -1, 0
        load, k = min(live)
        return k, load

    def _collect(self, block: bool) -> None:
        if not self.in_flight:
            return
        ready, _ = self.ray.wait(list(self.in_flight), num_returns=1 if block else len(self.in_flight),
                                 timeout=None if block else 0)
        for ref in ready:
            k, task, chosen, earlier = self.in_flight.pop(ref)
            self.load[k] -= 1
            try:
                result = self.ray.get(ref)
            except self.ray.exceptions.RayTaskError as problem:
                cause = getattr(problem, "cause", None)
                if isinstance(cause, SharedActorLost):
                    self.stop(str(cause))  # the task did not start: it has no outcome, and no line
                    continue
                why = f"its runner failed: {type(cause or problem).__name__}: {cause or problem}"
                result = self._interrupted(k, task, chosen, earlier, why)
            except self.ray.exceptions.RayError as problem:
                self._gone(k)
                why = f"runner {k} died with it in flight ({type(problem).__name__})"
                result = self._interrupted(k, task, chosen, earlier, why)
            self.spent += result.cost - (earlier.spent if earlier is not None else 0.0)
            self.note(result)

    def _gone(self, k: int) -> None:
        """Runner `k` died (or cannot be reached, and is stopped so that it stays so): no task goes to it,
        the ledger keeps what its tasks hold, and its shard goes into the trace now, so that its tasks'
        lines come before their outcome."""
        if not self.alive[k]:
            return
        self.alive[k] = False
        try:
            self.ray.kill(self.runners[k])
        except Exception:  # already gone
            pass
        if self.ledger is not None:
            try:
                self.ray.get(self.ledger.keep.remote(k))
            except self.ray.exceptions.RayError:
                pass  # the ledger died too: no task starts any more (SharedActorLost)
        if self.shards[k] is not None and os.path.exists(self.shards[k]):
            try:
                self.merged[k] = merge_shards(self.trace, [self.shards[k]], DEAD_SHARD_S)
            except TraceError:
                pass  # still locked: the merge when the run ends takes it

    def _interrupted(self, k: int, task, chosen, earlier, why: str) -> TaskResult:
        """The outcome of a task whose runner gave none: the task line its shard holds, when the runner
        wrote one before it died; else an `interrupted` line, its open reservations counted in full."""
        ledger = TaskLedger()
        if earlier is not None:
            ledger.charged, ledger.open = earlier.charged, dict(earlier.open)
        before = ledger.spent
        last = None
        for line in self.merged.get(k, {}).get(task.id, ()):
            record = _record(line)
            if record is not None:
                ledger.add(record)
                last = record if record["type"] == "task" else last
        if last is not None:
            return _from_line(last)
        unknown = "" if k in self.merged else " (what it spent in this run is in its runner's shard)"
        result = TaskResult(
            task_id=task.id, template=chosen, answer=None, output=None, cost=ledger.spent, budget=None, bound=None,
            overran=False, status="interrupted", calls=0, deadline_s=self.deadline_s,
            error=f"interrupted: {why}; its open reservations count in full{unknown}; --resume runs it again",
        )
        self.trace.task(task_line(result, self.guard_kind, before))
        return result

    def close(self) -> list:
        """Close every live runner (its shard and providers) and stop them all; the live ones' call totals."""
        finals = []
        for k, each in enumerate(self.runners):
            if self.alive[k]:
                try:
                    finals.append(self.ray.get(each.close.remote()))
                except self.ray.exceptions.RayError:
                    self.alive[k] = False
        for each in self.runners:
            try:
                self.ray.kill(each)
            except Exception:  # already gone, or the cluster with it
                pass
        return finals


def _final_ledger(ray, actor, total: float, earlier: float, spent_here: float) -> BatchBudget:
    """The total's figures when the run ends: the ledger actor's; if it died, what the run's outcomes charged."""
    try:
        total, spent, earlier, held, _, _ = ray.get(actor.figures.remote())
        ledger = BatchBudget(total, spent=spent)
        ledger.earlier, ledger.held = earlier, held
    except ray.exceptions.RayError:
        ledger = BatchBudget(total, spent=earlier + spent_here)
        ledger.earlier = earlier
    return ledger


def _record(line: str) -> dict | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and record.get("type") in ("reserve", "call", "task") else None


def _from_line(line: dict) -> TaskResult:
    """A task's outcome as its task line tells it (the runner wrote it, then died before it could answer)."""
    return TaskResult(
        task_id=line["task_id"], template=line.get("template"), answer=line.get("answer"), output=None,
        cost=line.get("cost") or 0.0, budget=line.get("budget"), bound=line.get("bound"),
        overran=bool(line.get("overran")), status=line.get("status") or "error", error=line.get("error"),
        calls=line.get("calls") or 0, exhausted=line.get("exhausted"), elapsed_s=line.get("elapsed_s") or 0.0,
        deadline_s=line.get("deadline_s"), latency_bound_s=line.get("latency_bound_s"),
    )


def _get(ray, refs):
    """`ray.get`, with a task's own exception raised as itself rather than wrapped."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as problem:
        cause = getattr(problem, "cause", None)
        raise (cause if isinstance(cause, Exception) else problem) from None


def _sendable(ray, values: tuple) -> list:
    """`values` put in Ray's object store once for every runner; what cannot be pickled is told, not traced back."""
    try:
        return [ray.put(value) for value in values]
    except Exception as problem:
        raise ValueError(f"the run cannot be sent to Ray actors: {type(problem).__name__}: {problem}") from None


def _check_providers(program, system_name: str, options: ExecOptions, models: set) -> None:
    import asyncio

    asyncio.run(close_providers(make_providers(program, system_name, options, models)))


def _add_rows(table: dict, rows: dict) -> None:
    for key, row in rows.items():
        mine = table.setdefault(key, [0, 0, 0, 0.0])
        for i, value in enumerate(row):
            mine[i] += value
