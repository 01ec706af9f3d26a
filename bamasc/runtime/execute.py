"""`bamasc exec` as a library call: run tasks on a plan with providers, guard, trace and concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import gc

from bamasc.records import record
from bamasc.runtime.guard import BudgetGuard, PosthocGuard
from bamasc.runtime.interpreter import TaskResult, TaskRun
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.trace import TaskLedger, TraceWriter, read_ledgers

TASK_FIELDS = ("task", "question", "text", "problem", "prompt")
ID_FIELDS = ("id", "task_id")


_RUN_THRESHOLDS = (20_000, 10, 10)
_runs_in_progress = 0
_saved_thresholds = gc.get_threshold()


@contextlib.contextmanager
def fewer_collections():
    """Collect garbage less often while tasks run; the collector is restored afterwards.

    Everything alive when a run starts (modules, the plan, the SDK clients) is
    frozen out of the collector's view, and the youngest generation is scanned
    after 20,000 allocations instead of 700. A run allocates mostly
    short-lived request and reply objects; with the defaults, at concurrency 64,
    the collector re-scanned the same long-lived objects for about a tenth of
    the client's CPU. Runs may nest or overlap: the first to start sets this
    up, the last to finish undoes it.
    """
    global _runs_in_progress, _saved_thresholds
    if _runs_in_progress == 0:
        _saved_thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(*_RUN_THRESHOLDS)
    _runs_in_progress += 1
    try:
        yield
    finally:
        _runs_in_progress -= 1
        if _runs_in_progress == 0:
            gc.set_threshold(*_saved_thresholds)
            gc.unfreeze()


class DatasetError(ValueError):
    """A dataset row that cannot be read; the message names the file, line and field."""


@record
class Task:
    id: str
    text: str


@record
class ExecOptions:
    concurrency: int = 8
    trace_path: str | None = None
    resume: bool = False  # skip finished tasks; continue unfinished ones from what they already spent
    guard: str = "reserve"  # reserve | posthoc (the paper's check; benchmarks only)
    fake_mode: str | None = None  # echo | verbose: answer every model offline
    cassette: str | None = None
    record: bool = False
    retry: RetryPolicy = RetryPolicy()
    seed: int = 0
    template: str | None = None  # run this template instead of the selected one
    selector: object = None  # select = policy(...): task texts -> a template name per task
    limiter: object = None  # a shared runtime.limiter.RateLimiter; None: one for this run from the models' rate_limits


def read_dataset(path: str, skip_bad: bool = False) -> tuple[list[Task], list[str]]:
    """Tasks from JSONL rows with an id (`id`/`task_id`, else the 1-based line number) and a text
    (`task`/`question`/`text`/`problem`/`prompt`); bad rows raise, or are skipped and reported."""
    from bamasc.rows import read_jsonl

    return read_jsonl(path, task_reader(), DatasetError, skip_bad)


def task_reader():
    """`read(row, number, where) -> Task` for one file's rows; it remembers the ids it gave, to refuse a duplicate."""
    seen: set[str] = set()

    def read(row, number: int, where: str) -> Task:
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: a row must be a JSON object")
        field = next((f for f in TASK_FIELDS if isinstance(row.get(f), str)), None)
        if field is None:
            raise DatasetError(f"{where}: no task text (one of the fields {', '.join(TASK_FIELDS)})")
        task_id = str(next((row[f] for f in ID_FIELDS if row.get(f) is not None), number))
        if task_id in seen:
            raise DatasetError(f"{where}: duplicate task id {task_id!r}")
        seen.add(task_id)
        return Task(task_id, row[field])

    return read


class Summary:
    """Totals per role and per model, from the call records as they are written."""

    def __init__(self) -> None:
        self.by_role: dict[str, list[float]] = {}
        self.by_model: dict[str, list[float]] = {}

    def add(self, call: dict) -> None:
        if call["skipped"]:
            return  # never sent: its prompt tokens are a bound, not usage
        for table, key in ((self.by_role, call["role"]), (self.by_model, call["model"])):
            row = table.setdefault(key, [0, 0, 0, 0.0])
            row[0] += 1
            row[1] += call["prompt_tokens"]
            row[2] += call["completion_tokens"]
            row[3] += call["charged"]


class _Recorder(TraceWriter):
    def __init__(self, path, summary: Summary, calls: list | None):
        super().__init__(path)
        self.summary = summary
        self.calls = calls

    def call(self, record: dict, count: bool = True) -> None:
        if count:  # charges of earlier runs are in the trace, not in this run's totals
            self.summary.add(record)
            if self.calls is not None:
                self.calls.append(record)
        super().call(record)


def make_providers(program, system_name: str, options: ExecOptions, models=None) -> dict:
    """A provider for each of `models` (default: every model of the system), which needs their API keys."""
    from bamasc.runtime.providers import make_provider

    names = program.systems[system_name].models if models is None else sorted(models)
    return {
        name: make_provider(program.models[name], fake_mode=options.fake_mode, cassette=options.cassette, record=options.record)
        for name in names
    }


def _settle_interrupted(trace: TraceWriter, task_id: str, ledger: TaskLedger | None) -> float:
    """What a task spent in earlier runs; each reservation left open by a crash is charged in full, in the trace."""
    if ledger is None:
        return 0.0
    for held, reservation in ledger.open.items():
        trace.call(
            {
                "id": held,
                "task_id": task_id,
                "node": reservation.get("node"),
                "role": None,
                "model": reservation.get("model"),
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "reserved": reservation["reserved"],
                "charged": reservation["reserved"],
                "latency_ms": None,
                "attempt": reservation.get("attempt"),
                "clamped": False,
                "skipped": False,
                "error": "interrupted: the run ended with this attempt in flight; reservation kept",
            },
            count=False,
        )
    return ledger.spent


def _broken(task_id: str, template, guard, reason: str, deadline_s: float | None) -> TaskResult:
    return TaskResult(
        task_id=task_id, template=template.name, answer=None, output=None, cost=guard.charged,
        budget=guard.budget, bound=template.worst_case_cost, overran=guard.overran, status="error",
        error=reason[:500], calls=0, deadline_s=deadline_s,
        latency_bound_s=template.worst_case_latency_s,
    )


def _limiter(program, models, options: ExecOptions):
    """The run's rate limiter; none when no call reaches a provider (`--fake`, or a cassette played back)."""
    from bamasc.runtime.limiter import limiter_for

    if options.fake_mode is not None or (options.cassette is not None and not options.record):
        return None
    return limiter_for(program.models[name] for name in sorted(models))


async def _close(providers: dict) -> None:
    """Close every provider, even if one fails to: a close error says nothing
    about the tasks, whose outcomes are already in the trace."""
    await asyncio.gather(*(provider.aclose() for provider in providers.values()), return_exceptions=True)


async def run_tasks(plan, program, system_name: str | None, tasks: list[Task], options: ExecOptions, progress=None, calls=None):
    """Run every task not already in the trace (with `resume`); returns (results, summary, skipped ids)."""
    system = plan.system(system_name)
    template_name = options.template or system.selection["selected"]
    summary = Summary()
    # Opened first: the trace's lock keeps a second run of it from reading the
    # same ledgers and paying for the same tasks at the same time.
    trace = _Recorder(options.trace_path, summary, calls)
    providers: dict = {}
    try:
        ledgers = read_ledgers(options.trace_path) if options.resume else {}
        done = {task_id for task_id, ledger in ledgers.items() if ledger.finished}
        pending = [task for task in tasks if task.id not in done]
        # A policy picks per task (all pending tasks embedded in one batch); otherwise every task runs one template.
        by_policy = options.selector is not None and options.template is None
        if by_policy:
            chosen = dict(zip((task.id for task in pending), options.selector([task.text for task in pending])))
        else:
            chosen = {task.id: template_name for task in pending}
        for name in sorted(set(chosen.values())) if by_policy else [template_name]:
            if not system.template(name).feasible:
                raise ValueError(f"template '{name}' has no binding within {system.budget:g} µ$")
        # Only models the chosen templates bind need an SDK and an API key;
        # nothing left to run (a finished --resume) needs none.
        bound = {seat.model for name in set(chosen.values()) for seat in system.template(name).binding}
        providers = make_providers(program, system.name, options, bound) if pending else {}
        limiter = options.limiter or _limiter(program, bound, options)
    except BaseException:
        trace.close()
        await _close(providers)
        raise
    limit = asyncio.Semaphore(max(1, options.concurrency))
    guard_class = PosthocGuard if options.guard == "posthoc" else BudgetGuard
    results: list[TaskResult] = []
    earlier: dict[str, float] = {}

    async def one(task: Task) -> None:
        async with limit:
            guard = guard_class(system.budget, spent=earlier[task.id])
            template = system.template(chosen[task.id])
            try:
                run = TaskRun(program, system, template, providers, guard, task.id, task.text, trace, options.retry,
                              options.seed, limiter)
                result = await run.run()
            except Exception as problem:
                # A defect outside the providers (whose failures the run records
                # itself) ends this task only; every task still gets its line.
                reason = f"internal error: {type(problem).__name__}: {problem}"
                result = _broken(task.id, template, guard, reason, system.deadline_s)
            trace.task(
                {
                    "task_id": result.task_id,
                    "answer": result.answer,
                    "cost": round(result.cost, 6),
                    "budget": result.budget,
                    "bound": round(result.bound, 6),
                    "template": result.template,
                    "overran": result.overran,
                    "status": result.status,
                    "error": result.error,
                    "calls": result.calls,
                    "guard": guard.kind,
                    "earlier_runs": round(earlier[task.id], 6),
                    "exhausted": result.exhausted,
                    "elapsed_s": round(result.elapsed_s, 6),
                    "deadline_s": result.deadline_s,
                    "latency_bound_s": result.latency_bound_s,
                }
            )
            results.append(result)
            if progress is not None:
                progress(len(results), len(pending))

    try:
        for task in pending:
            earlier[task.id] = _settle_interrupted(trace, task.id, ledgers.get(task.id))
        with fewer_collections():
            await asyncio.gather(*(one(task) for task in pending))
    finally:
        trace.close()
        await _close(providers)
    order = {task.id: i for i, task in enumerate(tasks)}
    results.sort(key=lambda r: order[r.task_id])
    return results, summary, sorted(done & {t.id for t in tasks})
