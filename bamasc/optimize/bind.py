"""Binds models to the slot instances of one template under a budget, exactly.

For every count vector the template allows, the flow is unrolled and the seat
ILP (`formulation.py`, solved on HiGHS by `highs.py`) is solved with per-seat
costs that under-estimate context growth: a call's input counts the smallest
output any pool model could feed it. The exact bound of the chosen binding is then computed on the unrolled
calls; if it breaks the budget, that binding is cut off and the ILP solved
again. Because the solver's costs never exceed the exact ones, the first
binding that passes is optimal among all bindings for that count vector, and
the best over all vectors is the template's optimum.

Count vectors that would leave an instance without a single call are skipped
(see `_has_idle_seat`).

What this module does not do: templates whose count vectors number more than
`limits.MAX_COUNT_VECTORS` are refused (lint says so first, BAM503) with a clear error instead of being bound by
a linearisation over count indicators.
"""

from __future__ import annotations

import itertools
import math

from bamasc.check.linear import linear_row
from bamasc.check.sizes import too_many_vectors
from bamasc.program import Program, System
from bamasc.ir.bounds import CallBound, call_bounds
from bamasc.ir.tokens import output_cap, template_tokens
from bamasc.ir.unroll import Unrolled, unroll
from bamasc.optimize.highs import cheapest_seats, solve
from bamasc.optimize.problem import RequireRow, SeatProblem
from bamasc.optimize.relax import explain_infeasibility
from bamasc.records import record, replace

MAX_CUTS = 200
# Relative slack for comparing float sums of µ$ against the budget.
BUDGET_TOLERANCE = 1e-9


class BindingError(Exception):
    """A template cannot be bound at all (too large to enumerate)."""


@record
class TemplateSeat:
    """One seat of a template binding, by name: the model that runs an instance of a slot."""

    slot: str
    instance: int
    model: str


@record
class TemplateBinding:
    """A template's best binding under a budget, or why it has none."""

    template: str
    budget: float
    feasible: bool
    counts: tuple[tuple[str, int], ...]
    seats: tuple[TemplateSeat, ...]
    unrolled: Unrolled | None
    bounds: tuple[CallBound, ...]
    worst_case_cost: float  # exact, from the unrolled calls; math.inf when infeasible
    tiers: tuple[int, ...]  # tier levels of the pool, strongest first
    tier_seats: tuple[int, ...]  # seats per tier level
    quality: float
    solves: int  # ILP solves, cuts included
    cuts: int  # bindings cut off because their exact bound broke the budget
    cheapest_cost: float | None  # the cheapest exact bound of any binding, budget ignored
    binding_rows: tuple[str, ...]  # when infeasible: rules whose removal alone would admit a binding

    @property
    def objective(self) -> tuple:
        """Larger is better: seats per tier strongest first, then quality, then lower cost."""
        return (*self.tier_seats, round(self.quality, 9), -self.worst_case_cost)


def bind_template(
    program: Program,
    system: System,
    template: str,
    budget: float | None = None,
    method: str = "lexicographic",
) -> TemplateBinding:
    topology = program.topologies[template]
    budget = system.budget if budget is None else budget
    pool = [program.models[name] for name in system.models]
    tiers = tuple(sorted({m.tier for m in pool}))
    ranges = [range(slot.lo, slot.hi + 1) for slot in topology.slots]
    too_many = too_many_vectors(topology)
    if too_many:
        raise BindingError(too_many)
    slot_index = {slot.name: i for i, slot in enumerate(topology.slots)}
    rows = tuple(
        RequireRow(tuple((slot_index[s], t, c) for s, t, c in row.terms), row.sense, row.rhs)
        for row in (linear_row(r) for r in topology.requires)
    )
    best = None
    solves = cuts = 0
    # Explained only if no vector fits: an explanation costs 1 + slots solves, wasted once one does.
    unfit: list[tuple[SeatProblem, Unrolled]] = []
    for vector in itertools.product(*ranges):
        counts = dict(zip(slot_index, vector))
        unrolled = unroll(topology, counts)
        if _has_idle_seat(unrolled, counts):
            continue
        problem = _seat_problem(program, system, topology, pool, counts, unrolled, rows, budget)
        found, used, cut = _solve_exactly(program, system, pool, problem, unrolled, budget, method)
        solves += used
        cuts += cut
        if found is None:
            unfit.append((problem, unrolled))
            continue
        candidate = _binding(template, budget, topology, pool, tiers, counts, unrolled, found)
        if best is None or candidate.objective > best.objective:
            best = candidate
    if best is not None:
        return replace(best, solves=solves, cuts=cuts)
    return _infeasible(program, system, template, budget, pool, tiers, unfit, solves, cuts)


def _has_idle_seat(unrolled: Unrolled, counts: dict[str, int]) -> bool:
    """Would some instance never be called? (e.g. a third executor when one critic allows
    only two revisions). Such a seat costs nothing and does nothing, so it must not
    count towards the objective or min_agents: that count vector is skipped."""
    called = {(call.slot, call.instance) for call in unrolled.calls}
    return any((slot, k) not in called for slot, count in counts.items() for k in range(count))


def _seat_problem(program, system, topology, pool, counts, unrolled, rows, budget) -> SeatProblem:
    """Per-seat costs that never exceed the exact ones (see the module docstring)."""
    smallest: dict[str, int] = {}
    cost = {(slot.name, k): [0.0] * len(pool) for slot in topology.slots for k in range(counts[slot.name])}
    for call in unrolled.calls:
        role = program.roles[call.role]
        tokens_in = template_tokens(role) + (system.task_tokens if call.reads_task else 0)
        tokens_in += sum(smallest[source] for source in call.inputs)
        smallest[call.id] = min(output_cap(role, m) for m in pool)
        seat = cost[(call.slot, call.instance)]
        for m, model in enumerate(pool):
            seat[m] += model.price_input * tokens_in + model.price_output * output_cap(role, model)
    return SeatProblem(
        slot_names=tuple(slot.name for slot in topology.slots),
        lo=tuple(counts[slot.name] for slot in topology.slots),
        hi=tuple(counts[slot.name] for slot in topology.slots),
        model_names=tuple(m.name for m in pool),
        tiers=tuple(m.tier for m in pool),
        quality=tuple(tuple(m.quality_for(slot.role) for m in pool) for slot in topology.slots),
        cost=tuple(
            tuple(tuple(cost[(slot.name, k)]) for k in range(counts[slot.name])) for slot in topology.slots
        ),
        require=rows,
        min_agents=system.min_agents,
        budget=budget,
    )


def _exact_bounds(program, system, pool, problem: SeatProblem, unrolled: Unrolled, seats) -> tuple[CallBound, ...]:
    model_of = {(problem.slot_names[s], k): pool[m] for s, k, m in seats}
    return tuple(call_bounds(unrolled.calls, model_of, program.roles, system.task_tokens))


def _solve_exactly(program, system, pool, problem, unrolled, budget, method):
    """The best binding whose exact bound fits, cutting off those that do not."""
    solves = 0
    for cut in range(MAX_CUTS + 1):
        solves += 1
        found = solve(problem, method)
        if found is None:
            return None, solves, cut
        bounds = _exact_bounds(program, system, pool, problem, unrolled, found.seats)
        exact = sum(b.cost for b in bounds)
        if exact <= budget * (1 + BUDGET_TOLERANCE):
            return (found, bounds, exact), solves, cut
        problem = replace(problem, excluded=(*problem.excluded, found.seats))
    raise BindingError(f"more than {MAX_CUTS} bindings had to be cut off; the cost model is far too loose")


def _binding(template, budget, topology, pool, tiers, counts, unrolled, found) -> TemplateBinding:
    binding, bounds, exact = found
    seats = tuple(TemplateSeat(topology.slots[s].name, k, pool[m].name) for s, k, m in binding.seats)
    return TemplateBinding(
        template=template,
        budget=budget,
        feasible=True,
        counts=tuple(counts.items()),
        seats=seats,
        unrolled=unrolled,
        bounds=bounds,
        worst_case_cost=exact,
        tiers=tiers,
        tier_seats=tuple(sum(pool[m].tier == t for _, _, m in binding.seats) for t in tiers),
        quality=binding.quality,
        solves=0,
        cuts=0,
        cheapest_cost=None,
        binding_rows=(),
    )


def _infeasible(program, system, template, budget, pool, tiers, unfit, solves, cuts) -> TemplateBinding:
    """No count vector admits a binding: report the cheapest exact cost and the rows that bind."""
    cheapest = None
    rows: set[str] = set()  # rules whose removal alone makes a vector fit the budget
    conflicting: set[str] = set()  # rules whose removal alone lets a vector's rules be met at all
    for problem, unrolled in unfit:
        explanation = explain_infeasibility(problem)
        rows.update(explanation.binding_rows)
        conflicting.update(r.row for r in explanation.relaxations if r.cheapest_cost is not None and r.row != "budget")
        if explanation.cheapest_cost is None:
            continue
        exact = _cheapest_exact(program, system, pool, problem, unrolled)
        if exact is not None and (cheapest is None or exact < cheapest):
            cheapest = exact
    return TemplateBinding(
        template=template,
        budget=budget,
        feasible=False,
        counts=(),
        seats=(),
        unrolled=None,
        bounds=(),
        worst_case_cost=math.inf,
        tiers=tiers,
        tier_seats=tuple(0 for _ in tiers),
        quality=0.0,
        solves=solves,
        cuts=cuts,
        cheapest_cost=cheapest,
        # When no budget helps, the rules that conflict are the answer, whatever this budget is.
        binding_rows=tuple(sorted(rows if cheapest is not None else conflicting)),
    )


def _cheapest_exact(program, system, pool, problem: SeatProblem, unrolled: Unrolled) -> float | None:
    """The smallest exact bound of any binding that meets every rule but the budget.

    Bindings come cheapest first by the solver's (lower) costs; once that lower
    cost reaches the best exact bound seen, no later binding can beat it.
    """
    best = None
    remaining = replace(problem, budget=math.inf)
    for _ in range(MAX_CUTS):
        seats = cheapest_seats(remaining)
        if seats is None:
            break
        lower = sum(problem.cost[s][k][m] for s, k, m in seats)
        if best is not None and lower >= best:
            break
        exact = sum(b.cost for b in _exact_bounds(program, system, pool, problem, unrolled, seats))
        best = exact if best is None else min(best, exact)
        remaining = replace(remaining, excluded=(*remaining.excluded, seats))
    return best


def select_template(bindings: list[TemplateBinding], rule: str) -> TemplateBinding | None:
    """`strongest`: the highest objective among feasible templates; `cheapest`: the lowest bound."""
    feasible = [b for b in bindings if b.feasible]
    if not feasible:
        return None
    if rule == "cheapest":
        return min(feasible, key=lambda b: (b.worst_case_cost, b.template))
    return max(feasible, key=lambda b: b.objective)
