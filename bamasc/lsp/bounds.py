"""Worst-case costs for hover and code lenses: each system's templates bound by the compiler's
binder at the system's budget, in a background thread, cached by the program's source hash."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from bamasc.program import Program
from bamasc.records import record

ERRORS = "errors"  # the program has errors: nothing to bind
COMPUTING = "computing"
DONE = "done"
FAILED = "failed"

CACHED_PROGRAMS = 16


@record
class TemplateBound:
    template: str
    feasible: bool
    worst_case_cost: float | None  # µ$, the proven bound of the chosen binding; None when infeasible
    cheapest_cost: float | None  # µ$, the cheapest binding at any budget (None: the rules conflict)
    seats: tuple[str, ...]  # "executor: 2x gpt41_nano", as `bamasc compile` shows a binding
    problem: str | None = None  # why the template could not be bound at all


@record
class ClassBound:
    """The templates' bounds for tasks of one length class (the system's `task_tokens`, or one of its list)."""

    task_tokens: int
    templates: tuple[TemplateBound, ...]
    selected: str | None  # the template its `select` rule picks for tasks this long (None: none fits)


@record
class SystemBound:
    system: str
    budget: float | None  # µ$ per task; None when the system declares none
    classes: tuple[ClassBound, ...]  # every length class, shortest first; () without a budget

    @property
    def templates(self) -> tuple[TemplateBound, ...]:
        """The first (shortest) class's: what `bamasc compile` prints first and a lens shows."""
        return self.classes[0].templates if self.classes else ()

    @property
    def selected(self) -> str | None:
        return self.classes[0].selected if self.classes else None

    @property
    def fits(self) -> bool:
        return any(t.feasible for t in self.templates)

    def template(self, name: str) -> TemplateBound | None:
        return next((t for t in self.templates if t.template == name), None)


def bind_program(program: Program) -> dict[str, SystemBound]:
    """Every system's templates bound at its declared budget for each of its length classes, as `bamasc
    compile` binds them (a longer class binds the system again as if `task_tokens` were that long)."""
    from bamasc.records import replace

    found = {}
    for system in program.systems.values():
        if system.budget is None:
            found[system.name] = SystemBound(system.name, None, ())
            continue
        classes = [_bind_class(program, system)]
        for tokens in system.classes[1:]:
            classes.append(_bind_class(program, replace(system, task_tokens=tokens, length_classes=())))
        found[system.name] = SystemBound(system.name, system.budget, tuple(classes))
    return found


def _bind_class(program: Program, system) -> ClassBound:
    """`system`'s templates bound for tasks of its `task_tokens`."""
    from bamasc.optimize.bind import BindingError, bind_template, select_template
    from bamasc.optimize.errors import SolverError

    templates, bindings = [], []
    for name in system.topologies:
        try:
            binding = bind_template(program, system, name, system.budget)
        except (BindingError, SolverError) as problem:
            templates.append(TemplateBound(name, False, None, None, (), str(problem)))
            continue
        bindings.append(binding)
        seats: dict[tuple[str, str, int | None], int] = {}
        for seat in binding.seats:
            seats[seat.slot, seat.model, seat.cap] = seats.get((seat.slot, seat.model, seat.cap), 0) + 1
        shown = tuple(f"{slot}: {count}x {model}" + ("" if cap is None else f" (cap {cap})")
                      for (slot, model, cap), count in seats.items())
        cost = binding.worst_case_cost if binding.feasible else None
        templates.append(TemplateBound(name, binding.feasible, cost, binding.cheapest_cost, shown))
    # A policy picks per task; ahead of a task the plan's default is the strongest.
    rule = "cheapest" if system.select.kind == "cheapest" else "strongest"
    selected = select_template(bindings, rule)
    return ClassBound(system.task_tokens, tuple(templates), selected.template if selected else None)


class Bounds:
    """Bounds per program, computed one at a time off the server's loop; `on_done` runs in the
    worker thread when one finishes (the server then asks the editor to refresh its lenses)."""

    def __init__(self, on_done: Callable[[], None] = lambda: None, compute=bind_program):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bamasc-bounds")
        self._futures: OrderedDict[str, Future] = OrderedDict()
        self._lock = threading.Lock()
        self._on_done = on_done
        self._compute = compute

    def state(self, analysis) -> tuple[str, object]:
        """(ERRORS | COMPUTING | DONE | FAILED, bounds by system or the failure's text); starts the work."""
        if analysis.errors or analysis.program is None:
            return ERRORS, None
        with self._lock:
            future = self._futures.get(analysis.digest)
            if future is None:
                future = self._executor.submit(self._compute, analysis.program)
                future.add_done_callback(lambda _: self._on_done())
                self._futures[analysis.digest] = future
                while len(self._futures) > CACHED_PROGRAMS:
                    self._futures.popitem(last=False)
            else:
                self._futures.move_to_end(analysis.digest)
        if not future.done():
            return COMPUTING, None
        problem = future.exception()
        if problem is not None:
            return FAILED, f"{type(problem).__name__}: {problem}"
        return DONE, future.result()

    def wait(self, analysis, timeout: float | None = None) -> None:
        """Block until this program's bounds are ready (tests and benchmarks)."""
        self.state(analysis)
        future = self._futures.get(analysis.digest)
        if future is not None:
            future.exception(timeout)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
