"""`bamasc compile` as a library call: check, bind every template under the budget, build the plan."""

from __future__ import annotations

import math
import os

from bamasc.ir.budget import check_loaded
from bamasc.ir.tokens import seat_models
from bamasc.diagnostics import Diagnostic, Note, Sources, error, has_errors, warning
from bamasc.limits import MAX_BUDGET, written
from bamasc.loader import load
from bamasc.words import rounded_up


class CompileError(Exception):
    """A request the compiler cannot act on (unknown system, no systems); a usage error."""


class Compiled:
    """What a compile produced: the plan (None on errors), the bindings and the diagnostics."""

    def __init__(self) -> None:
        self.program = None
        self.plan = None
        self.bindings: dict[str, list] = {}
        # Per system, for each length class after its first (`task_tokens = [...]`): (tokens, bindings).
        self.length_bindings: dict[str, list[tuple[int, list]]] = {}
        self.diagnostics: list[Diagnostic] = []
        self.sources = Sources()


def check_file(path: str, budgets: bool = True):
    """Load and check `path`: (program or None, diagnostics, sources). `budgets` off skips
    the static check of the declared budgets (a compile under another budget binds exactly).

    Every command that runs, binds or serves a program checks it here, so its catalog() prices
    are the snapshot's own, whatever the cache of them holds (lint reads the cache).
    """
    from bamasc import catalog

    loaded = load(path)
    diagnostics = list(loaded.diagnostics)
    program = None
    if loaded.modules:
        with catalog.from_package():
            program, found = check_loaded(loaded, budgets)
        diagnostics.extend(found)
    sources = Sources()
    for source in loaded.sources.values():
        sources.add(source)
    return (None if has_errors(diagnostics) else program), diagnostics, sources


def declared_budgets(program) -> list[Diagnostic]:
    """The static check of each system's declared budget and listed `budgets` on a program free of errors:
    what `check_file` adds with `budgets` on."""
    from bamasc import catalog
    from bamasc.ir.budget import check_budgets

    with catalog.from_package():
        return check_budgets(program)


def compile_file(
    path: str,
    system: str | None = None,
    budget: float | None = None,
    method: str = "lexicographic",
    plan_dir: str | None = None,
) -> Compiled:
    """Bind every template of the chosen system(s); `budget` (µ$) overrides the declared one."""
    # Under --budget the declared budget is not the one in force: the binder's BAM501 and
    # BAM502 judge the budget given, so the static check of the declared one would mislead.
    program, diagnostics, sources = check_file(path, budgets=budget is None)
    if program is None:
        result = Compiled()
        result.diagnostics, result.sources = diagnostics, sources
        return result
    return bind_checked(program, diagnostics, sources, system, budget, method, plan_dir)


def bind_checked(
    program,
    diagnostics: list[Diagnostic],
    sources: Sources,
    system: str | None = None,
    budget: float | None = None,
    method: str = "lexicographic",
    plan_dir: str | None = None,
) -> Compiled:
    """`compile_file` on a program already checked free of errors, its `diagnostics` so far carried into the result."""
    from bamasc.plan.build import build_plan

    result = Compiled()
    result.program, result.diagnostics, result.sources = program, list(diagnostics), sources
    names = _systems(program, system)
    for name in names:
        declared = program.systems[name]
        limit = budget if budget is not None else declared.budget
        if limit is None or limit <= 0:
            raise CompileError(f"system '{name}' has no budget; give one in the file or with --budget")
        if not limit <= MAX_BUDGET:  # NaN too
            raise CompileError(f"a budget of {limit:g} µ$ is above the limit of {written(MAX_BUDGET)} µ$ per task")
        if declared.objective == "value" and method in ("paper", "greedy"):
            option = "--cost-model paper" if method == "paper" else "--method greedy"
            raise CompileError(f"system '{name}' binds by value (objective = value), and {option} binds by the "
                               "paper's tiers; leave it out, or compile a system with objective = tiers")
        found, problems = _bind_all(program, declared, limit, method)
        result.diagnostics.extend(problems)
        found, late = _within_deadline(program, declared, found)
        result.bindings[name] = found
        result.diagnostics.extend(late)
        if not problems:
            result.length_bindings[name] = _longer_classes(program, declared, limit, method)
        given = budget is not None and budget != declared.budget
        result.diagnostics.extend(_feasibility(declared, found, limit, given))
        if method == "paper":
            result.diagnostics.extend(_paper_over_budget(declared, found, limit, given))
    if has_errors(result.diagnostics):
        return result
    result.plan = build_plan(program, result.bindings, plan_dir or os.getcwd(), method, result.length_bindings)
    return result


def _bind_all(program, system, budget: float, method: str) -> tuple[list, list[Diagnostic]]:
    """Every template of `system` bound under `budget`, and a diagnostic for each the binder could not bind."""
    from bamasc.optimize.bind import BindingError
    from bamasc.optimize.errors import SolverError

    found, diagnostics = [], []
    binder = _binder(method)
    for template in system.topologies:
        span = program.topologies[template].span
        try:
            found.append(binder(program, system, template, budget, method))
        except BindingError as problem:
            diagnostics.append(error("BAM503", str(problem), span))
        except SolverError as problem:
            # The limits keep every number in range, so this is the solver's own failure: reported, not raised.
            diagnostics.append(
                error(
                    "BAM504",
                    f"the solver could not bind template '{template}': {problem}",
                    span,
                    hint="try --method lexicographic" if method == "weights" else None,
                )
            )
    return found, diagnostics


def _longer_classes(program, system, budget: float, method: str) -> list[tuple[int, list]]:
    """(tokens, bindings) for each length class after the system's first: every template bound again as if
    the task were that long. A template with no binding there is infeasible in that class only: a task that
    long takes another class's binding if one fits at its length, or ends `too_long` (plan/lengths.py)."""
    from bamasc.records import replace

    classes = []
    for tokens in system.classes[1:]:
        longer = replace(system, task_tokens=tokens, length_classes=())
        found, _ = _bind_all(program, longer, budget, method)  # the first class bound every template
        classes.append((tokens, _within_deadline(program, longer, found)[0]))
    return classes


def _binder(method: str):
    """The binder a method names: the exact MILP, the reference's seat model, or the greedy ablation
    (the last two choose output caps in ranges as the first does: optimize/caps.py)."""
    if method in ("paper", "greedy"):
        from bamasc.optimize.caps import bind_with_caps

        if method == "paper":
            from bamasc.optimize.paper import bind_paper as bind
        else:
            from bamasc.optimize.greedy import bind_greedy as bind
        return lambda program, system, template, budget, _: bind_with_caps(
            lambda fixed: bind(fixed, system, template, budget), program, system, program.topologies[template]
        )
    from bamasc.optimize.bind import bind_template

    return bind_template


GIVEN = "given to compile with --budget"


def _budget_given(system, budget: float | None = None) -> Note:
    """Where a budget passed to compile (--budget) comes from (the caller, when `budget` is given):
    not the file, so the note points at no line of it."""
    given = f"the budget of {budget:g} µ$ was {GIVEN}; " if budget is not None else ""
    return Note(f"{given}the file's own budget, {system.budget:g} µ$, is not in force")


def _paper_over_budget(system, found, budget: float, given: bool = False) -> list[Diagnostic]:
    """BAM506 for each pool of the paper cost model whose exact worst case is above the budget."""
    diagnostics = []
    source = _budget_given(system, budget) if given else Note("the budget is given here", system.spans.get("budget", system.span))
    for binding in found:
        if not binding.feasible or binding.worst_case_cost <= budget * (1 + 1e-9):
            continue
        index = system.topologies.index(binding.template)
        diagnostics.append(
            warning(
                "BAM506",
                f"template '{binding.template}': the paper cost model estimates its pool at "
                f"{rounded_up(binding.estimate)} µ$, but its exact worst case is {rounded_up(binding.worst_case_cost)} µ$, "
                f"above the budget of {budget:g} µ$; at run time "
                + ("a task stops once its spending reaches the budget (budget_check = after), so it may end above "
                   "the budget, never above this bound" if system.budget_check == "after"
                   else "the budget guard stops a task at the budget"),
                system.item_spans["topologies"][index],
                source,
                hint="compile without --cost-model paper for a binding whose worst case is proven within the budget",
            )
        )
    return diagnostics


def _systems(program, system: str | None) -> list[str]:
    if not program.systems:
        raise CompileError("the file declares no system to compile")
    if system is None:
        return list(program.systems)
    if system not in program.systems:
        raise CompileError(f"no system '{system}'; the file declares: {', '.join(program.systems)}")
    return [system]


def _within_deadline(program, system, found) -> tuple[list, list[Diagnostic]]:
    """The bindings, each one whose worst-case latency passes the system's deadline marked infeasible
    (BAM505), and BAM505 for each template the binder found no binding for within the deadline. The binder
    binds under the deadline; the check on the bound graph keeps a plan from promising one it breaks."""
    if system.deadline is None:
        return found, []
    from bamasc.ir.latency import worst_case_latency
    from bamasc.plan.build import DEADLINE_ROW
    from bamasc.records import replace

    kept, diagnostics = [], []
    for binding in found:
        if not binding.feasible:
            if _misses_deadline(binding):
                # Without the deadline the template would bind; with it, no binding does.
                index = system.topologies.index(binding.template)
                others = [row for row in binding.binding_rows if row != DEADLINE_ROW]
                also = f" (dropping one of these would also admit one: {', '.join(others)})" if others else ""
                diagnostics.append(
                    warning(
                        "BAM505",
                        f"template '{binding.template}' has no binding within the deadline of {system.deadline:g} s: "
                        f"every binding its rules and the budget allow is slower{also}",
                        system.item_spans["topologies"][index],
                        Note("the deadline is given here", system.spans.get("deadline", system.span)),
                        hint="raise the deadline, declare faster models, or lower the output caps",
                    )
                )
            kept.append(binding)
            continue
        model_of = seat_models(program.models, binding.seats)
        bound = worst_case_latency(binding.unrolled.calls, model_of, program.roles)
        # Check makes every model of a pool with a deadline declare a latency (BAM408).
        if bound.seconds <= system.deadline:
            kept.append(binding)
            continue
        index = system.topologies.index(binding.template)
        diagnostics.append(
            warning(
                "BAM505",
                f"template '{binding.template}' may take {bound.seconds:.3f} s on its binding, above the deadline of "
                f"{system.deadline:g} s (critical path: {' -> '.join(bound.path)})",
                system.item_spans["topologies"][index],
                Note("the deadline is given here", system.spans.get("deadline", system.span)),
                hint=f"raise the deadline to {bound.seconds:.3f} s or more, declare faster models, or lower the output caps",
            )
        )
        kept.append(replace(binding, feasible=False, worst_case_cost=math.inf, cheapest_cost=None, binding_rows=(DEADLINE_ROW,)))
    return kept, diagnostics


def _misses_deadline(binding) -> bool:
    """No binding meets the deadline, though dropping it would admit one (BAM505, not BAM501)."""
    from bamasc.plan.build import DEADLINE_ROW

    return not binding.feasible and binding.cheapest_cost is None and DEADLINE_ROW in binding.binding_rows


def _feasibility(system, found, budget: float, given: bool = False) -> list[Diagnostic]:
    """BAM501 for each template with no binding, BAM502 when none has one. `given`: the budget came
    from the caller (--budget), so BAM502 points at the system's name and says so, not at the file's budget."""
    diagnostics = []
    span = system.span if given else system.spans.get("budget", system.span)
    for binding in found:
        if binding.feasible or _misses_deadline(binding):
            continue
        index = system.topologies.index(binding.template)
        where = system.item_spans["topologies"][index]
        if binding.cheapest_cost is None:
            diagnostics.append(
                warning(
                    "BAM501",
                    f"template '{binding.template}' has no binding at any budget: "
                    f"its rules conflict ({', '.join(binding.binding_rows) or 'count ranges, require rows, min_agents'})",
                    where,
                )
            )
            continue
        rows = ", ".join(binding.binding_rows) or "budget"
        diagnostics.append(
            warning(
                "BAM501",
                f"template '{binding.template}' cannot fit the budget of {budget:g} µ$: its cheapest binding "
                f"costs {rounded_up(binding.cheapest_cost)} µ$ (binding rows: {rows})",
                where,
                hint=f"it becomes feasible from a budget of {rounded_up(binding.cheapest_cost)} µ$",
            )
        )
    if found and not any(b.feasible for b in found):
        cheapest = [b.cheapest_cost for b in found if b.cheapest_cost is not None]
        within = f"{budget:g} µ$" + (f" (the budget {GIVEN})" if given else "")
        within += f" and {system.deadline:g} s" if system.deadline is not None else ""
        diagnostics.append(
            error(
                "BAM502",
                f"no template of system '{system.name}' has a binding within {within}",
                span,
                *([_budget_given(system)] if given else []),
                *[Note(f"'{b.template}': cheapest {rounded_up(b.cheapest_cost)} µ$" if b.cheapest_cost is not None
                       else f"'{b.template}': misses the deadline (BAM505)" if _misses_deadline(b)
                       else f"'{b.template}': rules conflict") for b in found],
                hint=f"the smallest workable budget is {rounded_up(min(cheapest))} µ$" if cheapest else None,
            )
        )
    return diagnostics
