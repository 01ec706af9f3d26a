"""`bamasc exec` as a library call: run tasks on a plan with providers, guard, trace and concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json

from bamasc.records import record
from bamasc.runtime.guard import BudgetGuard, PosthocGuard
from bamasc.runtime.interpreter import TaskResult, TaskRun
from bamasc.runtime.retry import RetryPolicy
from bamasc.runtime.trace import TraceWriter, finished_tasks

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
    resume: bool = False
    guard: str = "reserve"  # reserve | posthoc (the paper's check; benchmarks only)
    fake_mode: str | None = None  # echo | verbose: answer every model offline
    cassette: str | None = None
    record: bool = False
    retry: RetryPolicy = RetryPolicy()
    seed: int = 0
    template: str | None = None  # run this template instead of the selected one
    selector: object = None  # select = policy(...): task texts -> a template name per task


def read_dataset(path: str, skip_bad: bool = False) -> tuple[list[Task], list[str]]:
    """Tasks from JSONL rows with an id (`id`/`task_id`, else the 1-based line number) and a text
    (`task`/`question`/`text`/`problem`/`prompt`); bad rows raise, or are skipped and reported."""
    tasks, problems, seen = [], [], set()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise DatasetError(f"{path}:{number}: a row must be a JSON object")
                field = next((f for f in TASK_FIELDS if isinstance(row.get(f), str)), None)
                if field is None:
                    raise DatasetError(f"{path}:{number}: no task text (one of the fields {', '.join(TASK_FIELDS)})")
                key = next((row[f] for f in ID_FIELDS if row.get(f) is not None), number)
                task_id = str(key)
                if task_id in seen:
                    raise DatasetError(f"{path}:{number}: duplicate task id {task_id!r}")
                seen.add(task_id)
                tasks.append(Task(task_id, row[field]))
            except json.JSONDecodeError as problem:
                message = f"{path}:{number}:{problem.colno}: not JSON: {problem.msg}"
                if not skip_bad:
                    raise DatasetError(message) from None
                problems.append(message)
            except DatasetError as problem:
                if not skip_bad:
                    raise
                problems.append(str(problem))
    return tasks, problems


class Summary:
    """Totals per role and per model, from the call records as they are written."""

    def __init__(self) -> None:
        self.by_role: dict[str, list[float]] = {}
        self.by_model: dict[str, list[float]] = {}

    def add(self, call: dict) -> None:
        for table, key in ((self.by_role, call["role"]), (self.by_model, call["model"])):
            row = table.setdefault(key, [0, 0, 0, 0.0])
            row[0] += 0 if call["skipped"] else 1
            row[1] += call["prompt_tokens"]
            row[2] += call["completion_tokens"]
            row[3] += call["charged"]


class _Recorder(TraceWriter):
    def __init__(self, path, summary: Summary, calls: list | None):
        super().__init__(path)
        self.summary = summary
        self.calls = calls

    def call(self, record: dict) -> None:
        self.summary.add(record)
        if self.calls is not None:
            self.calls.append(record)
        super().call(record)


def make_providers(program, system_name: str, options: ExecOptions) -> dict:
    from bamasc.runtime.providers import make_provider

    return {
        name: make_provider(program.models[name], fake_mode=options.fake_mode, cassette=options.cassette, record=options.record)
        for name in program.systems[system_name].models
    }


async def _close(providers: dict) -> None:
    """Close every provider, even if one fails to: a close error says nothing
    about the tasks, whose outcomes are already in the trace."""
    await asyncio.gather(*(provider.aclose() for provider in providers.values()), return_exceptions=True)


async def run_tasks(plan, program, system_name: str | None, tasks: list[Task], options: ExecOptions, progress=None, calls=None):
    """Run every task not already in the trace (with `resume`); returns (results, summary, skipped ids)."""
    system = plan.system(system_name)
    template_name = options.template or system.selection["selected"]
    done = finished_tasks(options.trace_path) if options.resume else set()
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
    summary = Summary()
    # Nothing left to run (a finished --resume) needs no SDK and no API key.
    providers = make_providers(program, system.name, options) if pending else {}
    try:
        trace = _Recorder(options.trace_path, summary, calls)
    except BaseException:
        await _close(providers)
        raise
    limit = asyncio.Semaphore(max(1, options.concurrency))
    guard_class = PosthocGuard if options.guard == "posthoc" else BudgetGuard
    results: list[TaskResult] = []

    async def one(task: Task) -> None:
        async with limit:
            guard = guard_class(system.budget)
            template = system.template(chosen[task.id])
            run = TaskRun(program, system, template, providers, guard, task.id, task.text, trace, options.retry, options.seed)
            result = await run.run()
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
                }
            )
            results.append(result)
            if progress is not None:
                progress(len(results), len(pending))

    try:
        with fewer_collections():
            await asyncio.gather(*(one(task) for task in pending))
    finally:
        trace.close()
        await _close(providers)
    order = {task.id: i for i, task in enumerate(tasks)}
    results.sort(key=lambda r: order[r.task_id])
    return results, summary, sorted(done & {t.id for t in tasks})
