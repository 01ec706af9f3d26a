"""How the API runs tasks: the ExecOptions `bamasc exec` would build, one run of `run_batch`, and its results.

Every run goes through `runtime.workers.run_batch`, the call `bamasc exec`
makes, so a task run here is reserved, traced, retried and resumed exactly
as there; what the command line prints, this returns as records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from bamasc.api import errors
from bamasc.api.checks import checked_budget, checked_deadline
from bamasc.api.providers import Providers, exec_fields
from bamasc.api.records import Call, CallSettled, CallStarted, Event, Result, Task, ToolCalled, call_of, result_of


def untyped(value: object) -> Any:
    """The runtime's records, made by `records.record`, which type checkers cannot read: Any to the API's modules."""
    return value


def tightened(plan: Any, system: Any, budget: object, deadline: object) -> tuple[Any, Any]:
    """(plan, system) with the system's budget and deadline lowered to those given (None: as compiled)."""
    from bamasc.records import replace as replace_record

    replace = untyped(replace_record)

    changes: dict[str, float] = {}
    if budget is not None:
        changes["budget"] = checked_budget(budget, "budget", above=system.budget)
    if deadline is not None:
        changes["deadline_s"] = checked_deadline(deadline, "deadline", system.deadline_s)
    if not changes:
        return plan, system
    narrowed = replace(system, **changes)
    systems = tuple(narrowed if s is system else s for s in plan.systems)
    return replace(plan, systems=systems), narrowed


def exec_options(system: Any, program: Any, *, provider: Providers | None, template: str | None,
                 trace: str | None, resume: bool = False, concurrency: int = 8,
                 listener: Callable[[str, dict[str, Any]], None] | None = None, timeout: float = 60.0,
                 retries: int = 3) -> Any:
    """The ExecOptions of `bamasc exec` with these options (a policy's selector included)."""
    from bamasc.records import replace as replace_record
    from bamasc.runtime.execute import ExecOptions as Options

    replace, ExecOptions = untyped(replace_record), untyped(Options)
    if template is not None:
        try:
            system.template(template)
        except KeyError as problem:
            raise errors.UsageError(f"unknown system or template: {problem}") from None
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise errors.UsageError(f"concurrency must be a whole number of at least 1, not {concurrency!r}")
    from bamasc.runtime.retry import RetryPolicy as Policy

    RetryPolicy = untyped(Policy)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise errors.UsageError(f"timeout must be seconds above 0 (at most 3600), not {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise errors.UsageError(f"retries must be a whole number of at least 0, not {retries!r}")
    options = ExecOptions(concurrency=concurrency, trace_path=trace, resume=resume, template=template,
                          listener=listener, retry=RetryPolicy(max_attempts=1 + retries, timeout=float(timeout)),
                          **exec_fields(provider))
    if system.selection["rule"] == "policy" and template is None:
        from bamasc.policy.errors import PolicyError
        from bamasc.policy.select import selector_for

        try:
            options = replace(options, selector=selector_for(system, program))
        except PolicyError as problem:
            raise errors.BamError(str(problem)) from None
    return options


def tasks_of(tasks: Iterable[str | Task]) -> list[Any]:
    """The runtime's tasks: a Task keeps its id, a text gets its 1-based position; ids must differ."""
    from bamasc.runtime.execute import Task as RuntimeTask

    RunTask = untyped(RuntimeTask)
    made = []
    seen: set[str] = set()
    for number, task in enumerate(tasks, start=1):
        if isinstance(task, Task):
            item = RunTask(str(task.id), task.text)
        elif isinstance(task, str):
            item = RunTask(str(number), task)
        else:
            raise errors.UsageError(f"task {number} must be a str or a bamasc.Task, not {type(task).__name__}")
        if not isinstance(item.text, str):
            raise errors.UsageError(f"task {item.id!r}: its text must be a str, not {type(item.text).__name__}")
        if not item.text.strip():
            raise errors.UsageError(f"task {item.id!r} is empty: there is nothing to run (and nothing to charge)")
        if item.id in seen:
            raise errors.UsageError(f"duplicate task id {item.id!r}")
        seen.add(item.id)
        made.append(item)
    return made


class Collector:
    """Listens to a run's trace lines: keeps each task's calls, and hands each event to `on_event`."""

    def __init__(self, on_event: Callable[[Event], None] | None = None) -> None:
        self.calls: dict[str, list[Call]] = {}
        self.on_event = on_event

    def __call__(self, kind: str, line: dict[str, Any]) -> None:
        if kind == "call":
            call = call_of(line)
            self.calls.setdefault(line["task_id"], []).append(call)
            if self.on_event is not None:
                self.on_event(CallSettled(line["task_id"], call))
        elif kind == "reserve" and self.on_event is not None and "tool" not in line:  # a tool's price is no call
            self.on_event(CallStarted(line["task_id"], line["node"], line["model"], line["attempt"], line["reserved"]))
        elif kind == "tool" and self.on_event is not None:
            self.on_event(ToolCalled(line["task_id"], line["node"], line["name"], line.get("round"), line["reserved"],
                                     line["charged"], line.get("error")))

    def result(self, outcome: Any) -> Result:
        return result_of(outcome, tuple(self.calls.pop(outcome.task_id, ())))


async def run_tasks(plan: Any, program: Any, system: Any, tasks: list[Any], options: Any,
                    collector: Collector) -> list[Result]:
    """Run `tasks` with `run_batch`, as `bamasc exec` does; the results in the order of `tasks`."""
    from bamasc.runtime.workers import run_batch

    results: dict[str, Result] = {}

    def keep(outcome: Any) -> None:
        results[outcome.task_id] = collector.result(outcome)

    with translated_errors():
        await run_batch(plan, program, system.name, tasks, options, None, None, keep)
    # A task --resume found finished in the trace is not run again, and has no result here.
    return [results[task.id] for task in tasks if task.id in results]


class translated_errors:
    """Turns the runtime's exceptions into the API's, with the messages `bamasc exec` prints."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, problem: BaseException | None, _: Any) -> None:
        if problem is None or not isinstance(problem, Exception) or isinstance(problem, errors.BamError):
            return
        from bamasc.extras import ExtraMissing
        from bamasc.runtime.providers.base import ProviderError
        from bamasc.runtime.tools import ToolStartError
        from bamasc.runtime.trace import TraceError

        if isinstance(problem, (ToolStartError, ExtraMissing)):  # the tools cannot start: nothing was spent
            raise errors.BamError(str(problem)) from None

        if isinstance(problem, KeyError):
            raise errors.UsageError(f"unknown system or template: {problem}") from None
        if isinstance(problem, TraceError):
            raise errors.TraceError(str(problem)) from None
        if isinstance(problem, ProviderError):
            raise errors.ProviderError(str(problem)) from None
        if isinstance(problem, OSError):
            raise errors.UsageError(f"cannot write the trace: {problem.strerror or problem}") from None
        if isinstance(problem, ValueError):
            raise errors.BamError(str(problem)) from None
