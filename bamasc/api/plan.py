"""`Plan`: a compiled, verified system: its templates and bounds, saved and loaded as `bamasc compile -o` and
`bamasc exec` do, and run on tasks under its budget."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from bamasc.api import errors
from bamasc.api.providers import Providers
from bamasc.api.records import Event, Result, Seat, Task, TaskDone, Template, events_until_done
from bamasc.api.run import Collector, exec_options, run_tasks, tasks_of, tightened, untyped

if TYPE_CHECKING:
    from bamasc.api.session import Session


class Plan:
    """One system of a compiled plan (the first, unless named), proven within its budget.

    Made by `Program.compile` or `Plan.load`; a plan file holds every system
    it was compiled with, and `for_system` gives another of them.
    """

    def __init__(self, compiled: Any, program: Any, system: str | None = None,
                 diagnostics: tuple[errors.Diagnostic, ...] = (), plan_dir: str | None = None,
                 diagnostics_text: str = "") -> None:
        try:
            self._system = compiled.system(system)
        except KeyError:
            names = ", ".join(s.name for s in compiled.systems)
            raise errors.UsageError(f"no system '{system}'; the plan holds: {names}") from None
        self._plan = compiled
        self._program = program
        self._plan_dir = plan_dir or os.getcwd()  # the folder its source paths are relative to
        self.diagnostics = diagnostics  # the compile's warnings
        self.diagnostics_text = diagnostics_text  # the same as `bamasc compile` prints them ("" if none)

    def __repr__(self) -> str:
        return f"bamasc.Plan(system={self.system!r}, budget={self.budget:g}, template={self.template!r}, bound={self.bound!r})"

    # ------------------------------------------------------------ what it is

    @property
    def system(self) -> str:
        return str(self._system.name)

    @property
    def systems(self) -> tuple[str, ...]:
        """Every system the plan holds."""
        return tuple(s.name for s in self._plan.systems)

    def for_system(self, name: str) -> Plan:
        """The same plan, running another of its systems."""
        return Plan(self._plan, self._program, name, self.diagnostics, self._plan_dir, self.diagnostics_text)

    @property
    def budget(self) -> float:
        """µ$ per task the system was compiled for."""
        return float(self._system.budget)

    @property
    def deadline_s(self) -> float | None:
        seconds = self._system.deadline_s
        return None if seconds is None else float(seconds)

    @property
    def template(self) -> str | None:
        """The template the system's rule selects (for `select = policy(...)`, the default until the policy picks)."""
        selected = self._system.selection["selected"]
        return None if selected is None else str(selected)

    @property
    def bound(self) -> float:
        """µ$: the proven worst case of the selected template. A plan always has one: compiling refuses a
        system no template fits (BAM502), and loading re-verifies every bound."""
        selected = self._selected()
        if selected is None or selected.bound is None:
            raise errors.PlanError(f"system '{self.system}' of the plan has no feasible template selected")
        return selected.bound

    @property
    def latency_bound_s(self) -> float | None:
        selected = self._selected()
        return None if selected is None else selected.latency_bound_s

    @property
    def templates(self) -> tuple[Template, ...]:
        """Every template of the system: its binding, its bound and whether it is feasible."""
        chosen = self.template
        return tuple(
            Template(
                name=t.name, feasible=t.feasible, bound=t.worst_case_cost if t.feasible else None,
                latency_bound_s=t.worst_case_latency_s if t.feasible else None,
                binding=tuple(Seat(s.slot, s.instance, s.model, s.cap) for s in t.binding),
                selected=t.name == chosen, cheapest=t.cheapest_cost,
            )
            for t in self._system.templates
        )

    def _selected(self) -> Template | None:
        return next((t for t in self.templates if t.selected), None)

    # ------------------------------------------------------------ files

    def to_json(self) -> str:
        """The plan file's text (docs/plan.md), every system included."""
        from bamasc.plan.schema import dumps

        return str(dumps(self._plan))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan file, then read it back and re-verify every bound, as `bamasc compile -o` does."""
        from bamasc.plan.load import REFUSALS, check_written_plan

        target = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(target))
        compiled, program = self._plan, self._program
        if os.path.realpath(folder) != os.path.realpath(self._plan_dir):
            # Source paths are relative to the plan's folder: compiled again for the new one, as `compile -o` does.
            compiled, program = _compiled_for(self._plan, program, folder)
        temporary = target + ".tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as handle:
                from bamasc.plan.schema import dumps

                handle.write(dumps(compiled))
            os.replace(temporary, target)
        except OSError as problem:
            raise errors.UsageError(f"cannot write the plan to {target}: {problem.strerror or problem}") from None
        try:
            check_written_plan(target, compiled, program)
        except REFUSALS as problem:
            raise errors.PlanError(str(problem)) from None

    @classmethod
    def load(cls, path: str | os.PathLike[str], system: str | None = None) -> Plan:
        """A plan file, compiled again from its sources and verified field for field, as `bamasc exec` loads it.

        Raises PlanError (not a plan, stale, or not what its sources give) with
        the message `bamasc exec` prints, UsageError for a missing file.
        """
        from bamasc.plan.load import REFUSALS, load_plan

        source = os.fspath(path)
        if not os.path.isfile(source):
            raise errors.UsageError(f"no such file: {source}")
        try:
            compiled, program = load_plan(source)
        except REFUSALS as problem:
            raise errors.PlanError(str(problem)) from None
        return cls(compiled, program, system, plan_dir=os.path.dirname(os.path.abspath(source)))

    # ------------------------------------------------------------ running

    async def run(self, task: str, *, budget: float | None = None, deadline: float | None = None,
                  provider: Providers | None = None, template: str | None = None, trace: str | None = None,
                  task_id: str = "task") -> Result:
        """Run one task, as `bamasc exec --task` does: every call reserved before it is made.

        `budget` (µ$) and `deadline` (s) may tighten the plan's for this task,
        never loosen them (BudgetError); `provider` answers the calls instead of
        the models' own (`bamasc.providers.fake(...)`); `trace` appends the
        task's reserve, call and task lines to that file.
        """
        collector = Collector()
        (result,) = await self._run(tasks_of([Task(task_id, task)]), collector, budget=budget, deadline=deadline,
                                    provider=provider, template=template, trace=trace)
        return result

    def run_sync(self, task: str, *, budget: float | None = None, deadline: float | None = None,
                 provider: Providers | None = None, template: str | None = None, trace: str | None = None,
                 task_id: str = "task") -> Result:
        """`run` for scripts without an event loop."""
        _no_running_loop("run_sync", "await plan.run(...)")
        return asyncio.run(self.run(task, budget=budget, deadline=deadline, provider=provider, template=template,
                                    trace=trace, task_id=task_id))

    async def stream(self, task: str, *, budget: float | None = None, deadline: float | None = None,
                     provider: Providers | None = None, template: str | None = None, trace: str | None = None,
                     task_id: str = "task") -> AsyncIterator[Event]:
        """Run one task, yielding CallStarted and CallSettled as each attempt is reserved and charged,
        then TaskDone with the result. Leaving the loop early stops the task; its reservations are kept."""
        queue: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        collector = Collector(queue.put_nowait)

        async def drive() -> None:
            try:
                (result,) = await self._run(tasks_of([Task(task_id, task)]), collector, budget=budget, deadline=deadline,
                                            provider=provider, template=template, trace=trace)
            except BaseException as problem:  # the consumer sees it where it waits
                queue.put_nowait(problem)
                if not isinstance(problem, Exception):
                    raise
                return
            queue.put_nowait(TaskDone(result))

        runner = asyncio.ensure_future(drive())
        try:
            async for event in events_until_done(queue):
                yield event
        finally:
            if not runner.done():
                runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

    async def run_batch(self, tasks: Iterable[str | Task], *, concurrency: int = 8, total_budget: float | None = None,
                        trace: str | None = None, resume: bool = False, budget: float | None = None,
                        deadline: float | None = None, provider: Providers | None = None,
                        template: str | None = None) -> list[Result]:
        """Run many tasks, `concurrency` at a time, as `bamasc exec --dataset` does; the results in task order.

        A text gets its 1-based position as its id; a `bamasc.Task` keeps its own.
        `total_budget` (µ$) caps the batch: a task starts only when its worst case
        fits in what is left (else its status is `skipped_total`). With `resume`,
        tasks finished in `trace` are not run again (and have no result here), and
        unfinished ones continue with what they spent.
        """
        if resume and trace is None:
            raise errors.UsageError("resume needs a trace: the trace holds what each task already spent")
        return await self._run(tasks_of(tasks), Collector(), budget=budget, deadline=deadline, provider=provider,
                               template=template, trace=trace, resume=resume, concurrency=concurrency,
                               total_budget=total_budget)

    def run_batch_sync(self, tasks: Iterable[str | Task], **options: Any) -> list[Result]:
        """`run_batch` for scripts without an event loop."""
        _no_running_loop("run_batch_sync", "await plan.run_batch(...)")
        return asyncio.run(self.run_batch(tasks, **options))

    def session(self, *, trace: str | None = None, total_budget: float | None = None, concurrency: int = 8,
                provider: Providers | None = None, template: str | None = None, timeout: float = 60.0,
                retries: int = 3) -> Session:
        """A long-lived runner for tasks that come one by one (a server): one trace, one total, one set of
        providers. Use it as `async with plan.session(...) as session: await session.run(text)`.
        `timeout` (s per attempt) and `retries` are `bamasc exec`'s --timeout and --retries."""
        from bamasc.api.session import Session

        return Session(self._plan, self._program, self._system, trace=trace, total_budget=total_budget,
                       concurrency=concurrency, provider=provider, template=template, timeout=timeout,
                       retries=retries)

    async def _run(self, tasks: list[Any], collector: Collector, *, budget: object, deadline: object,
                   provider: Providers | None, template: str | None, trace: str | None, resume: bool = False,
                   concurrency: int = 8, total_budget: object = None) -> list[Result]:
        from bamasc.api.checks import checked_budget
        from bamasc.records import replace as replace_record

        replace = untyped(replace_record)
        plan, system = tightened(self._plan, self._system, budget, deadline)
        options = exec_options(system, self._program, provider=provider, template=template, trace=trace,
                               resume=resume, concurrency=concurrency, listener=collector)
        if total_budget is not None:
            options = replace(options, total_budget=checked_budget(total_budget, "total_budget"))
        return await run_tasks(plan, self._program, system, tasks, options, collector)


def internals(plan: Plan) -> tuple[Any, Any]:
    """(the compiled plan, the checked program) behind `plan`, for the command line's tables; not the public API."""
    return plan._plan, plan._program


def _compiled_for(compiled: Any, program: Any, folder: str) -> tuple[Any, Any]:
    """The plan compiled again with its own settings, its source paths relative to `folder`."""
    from bamasc.plan.compile import compile_file

    settings = compiled.compiled_with
    again = compile_file(program.root_files[0], settings["system"], settings["budget"], settings["method"], folder)
    if again.plan is None:
        raise errors.diagnostics_error(again.diagnostics, again.sources)
    return again.plan, again.program


def _no_running_loop(name: str, instead: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise errors.UsageError(f"{name} cannot be called from a running event loop; use {instead}")
