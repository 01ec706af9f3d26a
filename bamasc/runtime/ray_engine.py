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
"""

from __future__ import annotations

import logging
import os

from bamasc.runtime.batch import BatchBudget, BatchTotals
from bamasc.runtime.execute import ExecOptions, Summary, close_providers, make_limiter, make_providers
from bamasc.runtime.ray_actors import Ledger, Limits, Runner
from bamasc.runtime.shards import merge_shards, shard_path, shards_of
from bamasc.runtime.trace import TraceError, TraceWriter, read_ledgers
from bamasc.runtime.workers import BatchOutcome, run_models, with_templates

QUEUED_PER_SLOT = 2  # tasks sent to a runner per task it runs at once: the next is there when one ends


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
    ray = load_ray()
    if options.allocator is not None:
        raise ValueError("--allocate runs on the local engine only: its estimates are one process's state")
    if options.ledger is not None:
        raise ValueError("a shared ledger object cannot be shared with Ray actors; give the total instead")
    system = plan.system(system_name)
    template_name = options.template or system.selection["selected"]
    trace = TraceWriter(options.trace_path)  # held for the whole run: the lock keeps a second run off it
    started = False
    try:
        leftover = shards_of(options.trace_path)
        if leftover:  # a killed run's: what they hold was spent
            merge_shards(trace, leftover)
        ledgers = read_ledgers(options.trace_path) if options.resume else {}
        done = {task_id for task_id, ledger in ledgers.items() if ledger.finished}
        earlier_total = sum(ledger.spent for ledger in ledgers.values())
        take_ids = getattr(tasks, "take_ids", None)
        ids = take_ids() if take_ids is not None else [task.id for task in tasks]
        pending_count = sum(1 for task_id in ids if task_id not in done)
        done_here = sorted(done.intersection(ids))
        for task_id in done:
            del ledgers[task_id]
        by_policy = options.selector is not None and options.template is None
        if not by_policy and not system.template(template_name).feasible:
            from bamasc.plan.render import no_binding_text

            raise ValueError(no_binding_text(system, system.template(template_name)))
        totals, summary = BatchTotals(), Summary()
        ledger = None if options.total_budget is None else BatchBudget(options.total_budget, spent=earlier_total)
        if not pending_count:
            return BatchOutcome(totals, summary, done_here, ledger)
        models = run_models(system, options, by_policy)
        _check_providers(program, system.name, options, models)  # a missing API key is told here, before Ray starts
        limiter = make_limiter(program, models, options)
        started = start_ray(address, actors)
        shared = ray.remote(Ledger).options(num_cpus=0, max_concurrency=100_000)
        ledger_actor = None if ledger is None else shared.remote(ledger.total, earlier_total)
        limits = ray.remote(Limits).options(num_cpus=0, max_concurrency=100_000)
        limits_actor = None if limiter is None else limits.remote(limiter)
        runner = ray.remote(Runner).options(num_cpus=0, max_concurrency=options.concurrency + 1,
                                            scheduling_strategy="SPREAD")
        plan_ref, program_ref, options_ref = _sendable(ray, (plan, program, options))
        runners = [runner.remote(plan_ref, program_ref, system.name, options_ref, models,
                                 shard_path(options.trace_path, k), ledger_actor, limits_actor, calls is not None)
                   for k in range(actors)]
        finished = False
        try:
            _get(ray, [each.start.remote() for each in runners])
            source = with_templates((task for task in tasks if task.id not in done),
                                    options.selector if by_policy else None, None if by_policy else template_name)

            def note(result) -> None:
                totals.add(result)
                if on_result is not None:
                    on_result(result)
                if progress is not None:
                    progress(totals.tasks + totals.skipped_total, pending_count)

            _dispatch(ray, runners, source, ledgers, options.concurrency * QUEUED_PER_SLOT, note)
            finished = True
        finally:
            finals = _get(ray, [each.close.remote() for each in runners], quiet=not finished)
            for by_role, by_model, kept in finals or ():
                _add_rows(summary.by_role, by_role)
                _add_rows(summary.by_model, by_model)
                if calls is not None and kept:
                    calls.extend(kept)
            for each in runners:
                ray.kill(each)
            try:
                merge_shards(trace, shards_of(options.trace_path))
            except TraceError:
                if finished:
                    raise
                # A runner that failed may still hold its shard: the next run on the trace merges it.
        if ledger_actor is not None:
            total, spent, earlier, held, _, _ = _get(ray, ledger_actor.figures.remote())
            ledger = BatchBudget(total, spent=spent)
            ledger.earlier, ledger.held = earlier, held
        return BatchOutcome(totals, summary, done_here, ledger)
    finally:
        trace.close()
        if started:
            ray.shutdown()


def _dispatch(ray, runners: list, source, ledgers: dict, queued: int, note) -> None:
    """Send each task to the runner with the fewest in flight, at most `queued` each; results go to `note`."""
    load = [0] * len(runners)
    in_flight: dict = {}

    def collect(block: bool) -> None:
        ready, _ = ray.wait(list(in_flight), num_returns=1 if block else len(in_flight), timeout=None if block else 0)
        for ref in ready:
            load[in_flight.pop(ref)] -= 1
            note(_get(ray, ref))

    for task, chosen in source:
        while min(load) >= queued:
            collect(block=True)
        k = load.index(min(load))
        in_flight[runners[k].run.remote(task, chosen, ledgers.pop(task.id, None))] = k
        load[k] += 1
        if in_flight:
            collect(block=False)
    while in_flight:
        collect(block=True)


def _get(ray, refs, quiet: bool = False):
    """`ray.get`, with a task's own exception raised as itself rather than wrapped; `quiet`: None on failure."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as problem:
        if quiet:
            return None
        cause = getattr(problem, "cause", None)
        raise (cause if isinstance(cause, Exception) else problem) from None
    except ray.exceptions.RayError:
        if quiet:
            return None
        raise


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
