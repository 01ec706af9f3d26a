"""What both batch engines share: the run's trace, what it already holds, the total, the pending tasks and the outcome.

A `BatchSession` is one batch run from the opening of its trace to its
outcome. The local engine (`workers.run_batch`) and the Ray engine
(`ray_engine.run_on_ray`) each open one, run its pending tasks their own way
(a pool of workers in this process, or runner actors), give it each result
(`note`) and end with `outcome`. So the two engines skip the same finished
tasks, refuse the same runs, count the same totals and report alike.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator

from bamasc.records import record
from bamasc.runtime.batch import Allocator, BatchBudget, BatchLedger, BatchTotals, Limiter, Selector
from bamasc.runtime.execute import ExecOptions, Recorder, Summary, Task, make_limiter
from bamasc.runtime.interpreter import TaskResult
from bamasc.runtime.shards import DYING_PROCESS_S, merge_shards, shards_of
from bamasc.runtime.threads import Threads, read_threads
from bamasc.runtime.trace import TaskLedger, read_ledgers

# Tasks a policy embeds in one batch: large enough for the embedding model's throughput, small enough to stay flat.
POLICY_CHUNK = 256


@record
class BatchOutcome:
    totals: BatchTotals
    summary: Summary
    done: list  # ids of the tasks skipped because the trace holds them finished
    ledger: BatchLedger | None  # the total budget's ledger, when there is one
    allocator: Allocator | None = None
    stopped: str | None = None  # why the run ended before every task had an outcome (a shared actor died)


class BatchSession:
    """One batch run's shared state; opening it opens the trace, and a failure to open closes it again.

    Opening it, in order: locks the trace (a second run on it is refused),
    merges the shards a killed Ray run left beside it (they hold money spent),
    reads what `--resume` skips and what earlier runs spent, checks that the
    template to run has a binding, makes the total's ledger (the options' own,
    or one of `total_budget` less what the trace holds), and picks the models
    a task may call and, with tasks to run, the rate limiter they share.
    """

    def __init__(self, plan, program, system_name: str | None, tasks, options: ExecOptions,
                 calls: list | None = None, listener: Callable[[str, dict], None] | None = None,
                 on_result: Callable[[TaskResult], None] | None = None,
                 progress: Callable[[int, int, float, float | None], None] | None = None) -> None:
        self.program = program
        self.options = options
        self.system = plan.system(system_name)
        self.template_name = options.template or self.system.selection["selected"]
        self.by_policy = options.selector is not None and options.template is None
        self.on_result, self.progress = on_result, progress
        self.summary = Summary()
        self.totals = BatchTotals()
        # Opened first: the trace's lock keeps a second run of it from reading the
        # same ledgers and paying for the same tasks at the same time.
        self.trace = Recorder(options.trace_path, self.summary, calls, listener)
        try:
            self._open(tasks)
        except BaseException:
            self.trace.close()
            raise

    def _open(self, tasks) -> None:
        options, system = self.options, self.system
        # A Ray run's shards, left by a kill, hold money spent: the trace is whole only with them.
        merge_shards(self.trace, shards_of(options.trace_path), DYING_PROCESS_S)
        ledgers = read_ledgers(options.trace_path) if options.resume else {}
        # A thread's earlier turns (their charges and history) come back with --resume, as its tasks' spend does.
        self.threads = read_threads(options.trace_path, ledgers) if options.resume else Threads()
        budgets = getattr(tasks, "threads", None)
        if budgets is None:  # a list of tasks
            budgets = {task.thread: task.thread_budget for task in tasks if task.thread is not None}
        for thread_id, budget in budgets.items():  # a thread the trace holds with another budget stops the run
            self.threads.open(thread_id, budget)
        self.done = {task_id for task_id, ledger in ledgers.items() if ledger.finished}
        self.earlier_total = sum(ledger.spent for ledger in ledgers.values())
        take_ids = getattr(tasks, "take_ids", None)
        ids = take_ids() if take_ids is not None else [task.id for task in tasks]
        self.pending_count = sum(1 for task_id in ids if task_id not in self.done)
        self.done_here = sorted(self.done.intersection(ids))
        for task_id in self.done:
            del ledgers[task_id]  # only unfinished tasks' ledgers are needed from here on
        self.ledgers: dict[str, TaskLedger] = ledgers  # each used once, by the task's first run here
        if not self.by_policy and not system.template(self.template_name).feasible:
            from bamasc.plan.render import no_binding_text

            raise ValueError(no_binding_text(system, system.template(self.template_name)))
        ledger = options.ledger
        if ledger is None and options.total_budget is not None:
            ledger = BatchBudget(options.total_budget, spent=self.earlier_total)
        if ledger is not None and getattr(self.program.systems.get(system.name), "budget_check", "before") == "after":
            raise ValueError(f"a total budget needs the reserve guard; system '{system.name}' checks its budget "
                             "after each call (budget_check = after)")
        self.ledger: BatchLedger | None = ledger
        # Only models the templates that may run bind need an SDK and an API key;
        # nothing left to run (a finished --resume) needs none.
        self.models = run_models(system, options, self.by_policy)
        self.limiter: Limiter | None = make_limiter(self.program, self.models, options) if self.pending_count else None

    def pending(self, tasks: Iterable[Task]) -> Iterator[tuple[Task, str | None]]:
        """(task, template) for each task of `tasks` the trace does not hold finished, in their order; the
        template is None where a task's level picks it (a policy picks for chunks of tasks at once)."""
        unfinished = (task for task in tasks if task.id not in self.done)
        if self.by_policy:
            return with_templates(unfinished, self.options.selector, None)
        return with_templates(unfinished, None, self.template_name)

    def note(self, result: TaskResult) -> None:
        """A task's outcome: into the totals, to the caller's `on_result`, and onto the progress bar."""
        self.totals.add(result)
        if self.on_result is not None:
            self.on_result(result)
        if self.progress is not None:
            self.progress(self.totals.ended, self.pending_count, self.totals.costs.total.value, self.spend_limit())

    def spend_limit(self) -> float | None:
        """The most this run may spend (µ$): what the total budget had left when it started, or else each
        pending task's budget; None when a task's budget is not known ahead (a system without one)."""
        if self.ledger is not None:
            return max(0.0, self.ledger.total - self.ledger.earlier)
        if self.system.budget is None:
            return None
        return self.pending_count * self.system.budget

    def outcome(self, ledger: BatchLedger | None = None, stopped: str | None = None) -> BatchOutcome:
        """The run's totals and call summary; `ledger` when the engine holds a later view of the total's."""
        return BatchOutcome(self.totals, self.summary, self.done_here, ledger if ledger is not None else self.ledger,
                            self.options.allocator, stopped)

    def close(self) -> None:
        self.trace.close()


def with_templates(tasks: Iterable[Task], selector: Selector | None,
                   chosen_name: str | None) -> Iterator[tuple[Task, str | None]]:
    """(task, template) pairs: a policy picks for chunks of tasks at once; otherwise every task gets `chosen_name`."""
    if selector is None:
        for task in tasks:
            yield task, chosen_name
        return
    source = iter(tasks)
    while chunk := list(itertools.islice(source, POLICY_CHUNK)):
        yield from zip(chunk, selector([task.text for task in chunk]))


def run_models(system, options: ExecOptions, by_policy: bool) -> set[str]:
    """Every model a template that may run binds: the selected one (or, by policy, every feasible one) at each budget."""
    plans = [system] + ([level.system for level in options.budget_plans] if options.total_budget is not None else [])
    models: set[str] = set()
    for plan in plans:
        if options.template is not None:
            names = [options.template]
        elif by_policy or plan.selection["rule"] == "policy":
            names = [t.name for t in plan.templates if t.feasible]
        else:
            names = [plan.selection["selected"]]
        for name in names:
            try:
                plan.template(name)
            except KeyError:
                if plan is system:
                    raise
                continue
            # A task runs its template's binding of the length class that fits it (plan/lengths.py).
            models.update(seat.model for template in plan.bindings(name) if template.feasible
                          for seat in template.binding)
    return models
