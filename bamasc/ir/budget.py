"""The static budget check: can each template's cheapest possible binding fit the budget?

No solver: the smallest counts each slot allows, every call on its cheapest
model, the worst-case call bounds. This is a lower bound on what the compiler
can find, so a template that fails here is infeasible; one that passes may
still be infeasible once `require` rows and min_agents are added (the
compiler says so).
"""

from __future__ import annotations

from bamasc.check import check
from bamasc.diagnostics import Diagnostic, Note, error, has_errors, warning
from bamasc.ir.bounds import cheapest_cost
from bamasc.ir.tokens import caps_at
from bamasc.ir.unroll import unroll
from bamasc.loader import Loaded
from bamasc.program import Program, System
from bamasc.words import rounded_up


def check_loaded(loaded: Loaded, budgets: bool = True) -> tuple[Program, list[Diagnostic]]:
    """The typed program and every problem found in it: the semantic checks, then
    (on a program free of errors, unless `budgets` is off) the static budget check
    over each unrolled flow against each system's declared budget and each of its listed `budgets`."""
    program, diagnostics = check(loaded)
    if budgets and not (has_errors(diagnostics) or has_errors(loaded.diagnostics)):
        diagnostics.extend(check_budgets(program))
    return program, diagnostics


def template_floor(program: Program, system: System, topology_name: str) -> float:
    """The lower bound on the worst-case cost of any binding of this template in this system (a range
    `max_output = lo..hi` at its low end: the binder may pick it)."""
    program = caps_at(program, 0, 1)
    topology = program.topologies[topology_name]
    pool = [program.models[name] for name in system.models]
    calls = unroll(topology, {slot.name: slot.lo for slot in topology.slots}).calls
    return cheapest_cost(calls, pool, program, system.task_tokens)


def check_budgets(program: Program) -> list[Diagnostic]:
    diagnostics = []
    for system in program.systems.values():
        if not system.topologies:
            continue
        floors = {name: template_floor(program, system, name) for name in system.topologies}
        diagnostics.extend(_listed_budgets(system, floors))
        if system.budget is None:
            continue
        over = {name: floor for name, floor in floors.items() if floor > system.budget}
        budget_span = system.spans.get("budget", system.span)
        if len(over) == len(floors):
            cheapest = min(floors, key=floors.get)
            diagnostics.append(
                error(
                    "BAM404",
                    f"no template of system '{system.name}' fits its budget of {system.budget:g} µ$: "
                    f"the cheapest, '{cheapest}', needs at least {rounded_up(floors[cheapest])} µ$ per task",
                    budget_span,
                    *[Note(f"'{name}' needs at least {rounded_up(floor)} µ$") for name, floor in floors.items()],
                    hint=f"raise the budget to at least {rounded_up(floors[cheapest])}, add a cheaper model, or lower output caps",
                )
            )
            continue
        for name, floor in over.items():
            index = system.topologies.index(name)
            fitting = [amount for amount in system.budgets if amount >= floor]
            notes = [Note("a binder that prices calls below their worst case (`compile --cost-model paper`, the reference's "
                          "cost model) may still choose it")]
            if fitting:
                notes.append(Note(f"it fits the listed budget{'s' if len(fitting) > 1 else ''} "
                                  f"{', '.join(f'{amount:g}' for amount in fitting)} µ$"))
            diagnostics.append(
                warning(
                    "BAM405",
                    f"template '{name}' needs at least {rounded_up(floor)} µ$ per task, above the budget of "
                    f"{system.budget:g} µ$ of system '{system.name}': no binding of it fits, so compile and exec "
                    "never choose it at this budget",
                    system.item_spans["topologies"][index],
                    *notes,
                    hint=f"raise the budget to {rounded_up(floor)} or drop '{name}' from this system",
                )
            )
    return diagnostics




def _listed_budgets(system: System, floors: dict[str, float]) -> list[Diagnostic]:
    """BAM404, a warning, at each amount of the system's `budgets` list that no template's floor fits.

    Compiling at that budget (a sweep, a benchmark, a batch's allocation, a
    reproduction's cell) finds nothing to run. Only a warning: a list may hold a
    budget a baseline cannot meet on purpose (the paper's tables report those
    cells as infeasible), and the declared `budget` is the one a plan runs at.
    An amount equal to the declared budget is judged there.
    """
    cheapest = min(floors, key=floors.get)
    diagnostics = []
    for amount, span in zip(system.budgets, system.item_spans.get("budgets", ())):
        if floors[cheapest] <= amount or amount == system.budget:
            continue
        diagnostics.append(
            warning(
                "BAM404",
                f"no template of system '{system.name}' fits its listed budget of {amount:g} µ$: "
                f"the cheapest, '{cheapest}', needs at least {rounded_up(floors[cheapest])} µ$ per task; "
                "compiled at this budget, the system has nothing to run",
                span,
                *[Note(f"'{name}' needs at least {rounded_up(floor)} µ$") for name, floor in floors.items()],
                hint=f"raise this budget to at least {rounded_up(floors[cheapest])}, or drop it from the list",
            )
        )
    return diagnostics
