"""Binds models to the slot instances of one template under a budget, exactly.

The whole template is one MILP (`template.py`, built from what each flow
statement calls at each count of its slots, `statements.py`): seat columns,
count indicators where a statement's seats rotate with the counts, and the
products of input prices and read outputs linearised exactly, so the budget
row is the exact worst case of the binding the solver picks. Its solve time
grows with the size of that model, not with the product of the slot ranges.
Templates with few count vectors are bound one vector at a time instead, where
that is faster (`BindStrategy.enumerate_up_to`), with the same exact MILP at
fixed counts. The binding records which way its bind went (`BindPath`).

Either way the chosen binding's bound is then computed again on its unrolled
calls, independently of the MILP; it must fit the budget and match what the
MILP priced, or the binder fails loudly. A larger budget only adds bindings to
the same model, so it never loses one a smaller budget had.

Count vectors that would leave an instance without a single call are never
chosen (see `has_idle_seat`; the MILP's `idle` rows).
"""

from __future__ import annotations

import itertools
import math

from bamasc import limits
from bamasc.check.linear import linear_row
from bamasc.check.sizes import too_many_units
from bamasc.ir.tokens import output_cap, template_tokens
from bamasc.ir.unroll import Unrolled, unroll
from bamasc.optimize.binding import BindingError, TemplateBinding, TemplateSeat
from bamasc.optimize.caps import bind_with_caps, cap_steps
from bamasc.optimize.dominance import undominated
from bamasc.optimize.exact import Found, TemplateSolver, objective
from bamasc.optimize.problem import RequireRow, SeatProblem
from bamasc.optimize.prune import MARGIN, Vector
from bamasc.optimize.statements import NotDecomposable
from bamasc.optimize import strategy as strategies
from bamasc.optimize.strategy import BindPath, BindStrategy
from bamasc.optimize.value import SeatWorth
from bamasc.program import Model, Program, System
from bamasc.records import replace

def bind_template(
    program: Program,
    system: System,
    template: str,
    budget: float | None = None,
    method: str = "lexicographic",
    strategy: BindStrategy | None = None,
) -> TemplateBinding:
    """`template`'s best binding under `budget` (default: the system's), or why it has none. `strategy`
    (default: `strategy.DEFAULT_STRATEGY`, read at each call) decides how it is searched for, not what
    counts as best."""
    strategy = strategies.DEFAULT_STRATEGY if strategy is None else strategy
    topology = program.topologies[template]
    if cap_steps(program, topology):  # a role's `max_output = lo..hi`: bound at fixed caps, level by level
        return bind_with_caps(lambda fixed: bind_template(fixed, system, template, budget, method, strategy),
                              program, system, topology)
    budget = system.budget if budget is None else budget
    pool = [program.models[name] for name in system.models]
    tiers = tuple(sorted({m.tier for m in pool}))
    # Every tier keeps a model (only a model of the same tier dominates), so `tiers` is unchanged.
    too_large = too_many_units(topology)
    if too_large:
        raise BindingError(too_large[0])
    largest = unroll(topology, {slot.name: slot.hi for slot in topology.slots})
    quality = SeatWorth(program, topology, largest.calls).quality if system.objective == "value" else Model.quality_for
    pool = undominated(pool, [program.roles[slot.role] for slot in topology.slots], quality)
    slot_index = {slot.name: i for i, slot in enumerate(topology.slots)}
    rows = tuple(
        RequireRow(tuple((slot_index[s], t, c) for s, t, c in row.terms), row.sense, row.rhs)
        for row in (linear_row(r) for r in topology.requires)
    )
    ranges = tuple(range(slot.lo, slot.hi + 1) for slot in topology.slots)
    order = _order_problem(program, system, topology, pool, rows, budget, largest)
    solver = TemplateSolver(program, system, topology, pool, order, method, largest, strategy)
    found, search, vectors = _best(solver, ranges)
    path = BindPath(search, vectors, solver.vectors_solved, tuple(solver.ways.items()), solver.cuts)
    if found is None:
        return _infeasible(template, budget, tiers, solver, order, ranges, path)
    return _result(template, budget, topology, pool, tiers, found, solver, path)


def _order_problem(program, system, topology, pool, rows, budget, unrolled: Unrolled) -> SeatProblem:
    """The template's seat problem at its largest counts (`unrolled` there): rules, qualities, and
    per-seat costs that only order models of equal tier and quality (and bound seats for the paper's weights)."""
    largest = {slot.name: slot.hi for slot in topology.slots}
    problem = _seat_problem(program, system, topology, pool, largest, unrolled, rows, budget)
    floor = _seat_floor(program, topology, pool, unrolled)
    return replace(problem, lo=tuple(slot.lo for slot in topology.slots), floor=floor)


def _seat_floor(program, topology, pool, unrolled) -> tuple[tuple[float, ...], ...]:
    """[slot][model]: the least a seat may cost in any count vector, for the paper's tier weights.

    The largest counts' per-seat costs do not bound that: a seat of a smaller vector may make fewer
    calls (an executor with no critic is asked once, not once per revision), so they may call a
    budget unable to buy a seat that it buys. Every seat that counts makes at least one call, which
    shows at least its role's prompt text and is billed its output cap, at the least rates the
    bound ever bills; unless its calls run under a route's branch or a plan's choice of seat
    (`CallNode.alternative`), which the bound may not take: such a slot's seats may cost nothing.
    """
    chosen = {call.slot for call in unrolled.calls if call.alternative}

    def one_call(role, model) -> float:
        prices = model.prices()
        least = prices.worst_rates(0)
        return least.input * template_tokens(role) + least.output * output_cap(role, model) + prices.per_request

    return tuple(
        (0.0,) * len(pool) if slot.name in chosen else tuple(one_call(program.roles[slot.role], m) for m in pool)
        for slot in topology.slots
    )


def _result(template, budget, topology, pool, tiers, found, solver, path: BindPath) -> TemplateBinding:
    seats = tuple(TemplateSeat(topology.slots[s].name, k, pool[m].name) for s, k, m in found.seats)
    return TemplateBinding(
        template=template,
        budget=budget,
        feasible=True,
        counts=tuple(found.counts.items()),
        seats=seats,
        unrolled=found.unrolled,
        bounds=found.bounds,
        worst_case_cost=found.exact,
        tiers=tiers,
        tier_seats=found.tier_seats,
        quality=found.quality,
        solves=solver.solves,
        cuts=solver.cuts,
        cheapest_cost=None,
        binding_rows=(),
        path=path,
        objective_kind=solver.order.objective,
    )


def _seat_problem(program, system, topology, pool, counts, unrolled, rows, budget) -> SeatProblem:
    """Per-seat costs that never exceed the exact ones (see the module docstring)."""
    smallest: dict[str, int] = {}
    cost = {(slot.name, k): [0.0] * len(pool) for slot in topology.slots for k in range(counts[slot.name])}
    for call in unrolled.calls:
        role = program.roles[call.role]
        tokens_in = template_tokens(role) + (system.task_tokens if call.reads_task else 0)
        tokens_in += call.tokens_read(smallest, system.task_tokens, again=False)
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
        quality=(
            SeatWorth(program, topology, unrolled.calls).values(topology, pool)
            if system.objective == "value"
            else tuple(tuple(m.quality_for(slot.role) for m in pool) for slot in topology.slots)
        ),
        cost=tuple(
            tuple(tuple(cost[(slot.name, k)]) for k in range(counts[slot.name])) for slot in topology.slots
        ),
        require=rows,
        min_agents=system.min_agents,
        budget=budget,
        objective=system.objective,
    )


def _best(solver: TemplateSolver, ranges, budget=None, cheapest=False, **changes) -> tuple[Found | None, str, int]:
    """The best binding over all of `ranges` (the cheapest when asked), how the counts were searched (a key
    of `strategy.SEARCHES`) and the count vectors searched one at a time (0: none); `changes` relax rules.

    Slots whose counts rotate seats (a `refine` or `plan` statement's) are
    enumerated when their counts combine in at most `enumerate_up_to` ways,
    each vector an MILP over the other slots without count indicators; beyond
    that one MILP with indicators covers everything. A flow whose values
    cannot be summarised (`NotDecomposable`) is enumerated vector by vector.
    """
    try:
        rotating = solver.rotating(ranges)
        if not rotating or math.prod(len(ranges[s]) for s in rotating) > solver.strategy.enumerate_up_to:
            found = solver.solve(ranges, solver.analyse(ranges), budget, cheapest, **changes)
            return found, "indicators" if rotating else "padded", 0
        # Each vector's statements are analysed when it is solved: one a skipped vector would
        # not summarise is never looked at (the vectors solved are bound exactly either way).
        found = _enumerate(solver, _fixings(ranges, rotating), solver.analyse, budget, cheapest, changes)
        return found, "enumerate", math.prod(len(ranges[s]) for s in rotating)
    except NotDecomposable:
        if math.prod(len(r) for r in ranges) > limits.MAX_COUNT_VECTORS:
            raise BindingError(
                f"template '{solver.topology.name}' reads parts of earlier values and has more than "
                f"{limits.MAX_COUNT_VECTORS} slot-count combinations to enumerate"
            ) from None
        fixings = _fixings(ranges, range(len(ranges)))
        found = _enumerate(solver, fixings, solver.analyse_fixed, budget, cheapest, changes)
        return found, "every-vector", math.prod(len(r) for r in ranges)


def _fixings(ranges, slots):
    """`ranges` with the given slots fixed to each combination of their counts, in product order."""
    for vector in itertools.product(*(ranges[s] for s in slots)):
        fixed = list(ranges)
        for s, n in zip(slots, vector):
            fixed[s] = range(n, n + 1)
        yield tuple(fixed)


def _enumerate(solver: TemplateSolver, fixings, analyse, budget, cheapest: bool, changes) -> Found | None:
    """The best binding over count vectors solved one at a time (the earliest in product order wins
    ties): the lowest bound, or the best objective. A vector whose bound shows it cannot win is
    skipped unsolved, and the rest are solved best bound first (optimize/prune.py)."""
    limit = solver.order.budget if budget is None else budget
    vectors = [vector for i, fixed in enumerate(fixings) if (vector := Vector(i, fixed, solver, limit)).possible()]
    best, at = None, -1

    def solve(vector: Vector) -> None:
        nonlocal best, at
        solver.vectors_solved += 1
        found = solver.solve(vector.fixed, analyse(vector.fixed), budget, cheapest, **changes)
        if found is None:
            return
        if best is None:
            better = True
        elif cheapest:
            better = (found.exact, vector.index) < (best.exact, at)
        else:
            found_score, best_score = objective(found, solver.order), objective(best, solver.order)
            better = found_score > best_score or (found_score == best_score and vector.index < at)
        if better:
            best, at = found, vector.index

    if cheapest:
        for vector in sorted(vectors, key=lambda v: (v.floor, v.index)):
            if best is None or vector.floor * (1 - MARGIN) <= best.exact:
                solve(vector)
        return best
    # Most seats first: the best binding found early leaves the most to skip.
    for vector in sorted(vectors, key=lambda v: (-len(v.seats), v.index)):
        if best is None or not vector.cannot_win(objective(best, solver.order), vector.index < at):
            solve(vector)
    return best


def _infeasible(template, budget, tiers, solver, order, ranges, path: BindPath) -> TemplateBinding:
    """No binding fits: the cheapest exact bound of any binding, and which rules stop the others.

    Each rule is dropped in turn (the budget, a slot's lower count, min_agents,
    each require row, the deadline): those whose removal alone admits a binding within the
    budget are reported; when no budget would do, those whose removal alone lets
    the other rules be met.
    """
    cheapest = _best(solver, ranges, math.inf, cheapest=True)[0]
    relaxed = []
    for s, name in enumerate(order.slot_names):
        if ranges[s][0] > 0:
            wider = tuple(range(0, r[-1] + 1) if i == s else r for i, r in enumerate(ranges))
            relaxed.append((f"min_count[{name}]", wider, {}))
    if order.min_agents > 0:
        relaxed.append(("min_agents", ranges, {"min_agents": 0}))
    for i in range(len(order.require)):
        relaxed.append((f"require #{i + 1}", ranges, {"require": order.require[:i] + order.require[i + 1 :]}))
    if solver.system.deadline is not None:
        relaxed.append(("deadline", ranges, {"deadline": False}))
    rows = []
    for row, wider, changes in relaxed:
        limit = budget if cheapest is not None else math.inf
        if _best(solver, wider, limit, cheapest=True, **changes)[0] is not None:
            rows.append(row)
    if cheapest is not None:
        rows.append("budget")
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
        solves=solver.solves,
        cuts=solver.cuts,
        cheapest_cost=None if cheapest is None else cheapest.exact,
        binding_rows=tuple(sorted(rows)),
        path=path,
        objective_kind=solver.order.objective,
    )


def select_template(bindings: list[TemplateBinding], rule: str) -> TemplateBinding | None:
    """`strongest`: the highest objective among feasible templates; `cheapest`: the lowest bound."""
    feasible = [b for b in bindings if b.feasible]
    if not feasible:
        return None
    if rule == "cheapest":
        return min(feasible, key=lambda b: (b.worst_case_cost, b.template))
    return max(feasible, key=lambda b: b.objective)
