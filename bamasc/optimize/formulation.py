"""The seat ILP, solver-neutral: binary seat columns, sparse rows for every rule, and the objectives.

HiGHS (`highs.py`) and PuLP/CBC (`pulp_model.py`) both solve exactly what this
builds. Every number handed on stays within the range HiGHS takes exactly
(see LARGEST_SOLVER_VALUE).
"""

from __future__ import annotations

import math

from bamasc.optimize.errors import InexactWeights
from bamasc.optimize.problem import Seat, SeatProblem
from bamasc.records import record

EXACT_INTEGER_LIMIT = 2**53
"""Above this, float64 no longer holds every integer, so tier weights stop being exact."""

QUALITY_TOLERANCE = 1e-7
"""Total-quality differences below this count as ties."""

LARGEST_SOLVER_VALUE = 2.0**40
"""The largest coefficient handed to HiGHS. It refuses matrix values from 1e15 on
and reads costs from 1e20 on as infinite; rows and objectives above this are
scaled by a power of two, which is exact in floating point."""


@record
class MilpRow:
    """lower <= Σ values[i] · x[columns[i]] <= upper, tagged with the rule it encodes."""

    family: str
    columns: tuple[int, ...]
    values: tuple[float, ...]
    lower: float
    upper: float


@record
class Column:
    """A column after the seats: lower <= value <= upper, integer or continuous."""

    name: str
    lower: float = 0.0
    upper: float = math.inf
    integer: bool = False


@record
class SeatIlp:
    """Binary column j is seat `seats[j]`; columns from len(seats) on are `extra`; `rows` are every constraint."""

    seats: tuple[Seat, ...]
    rows: tuple[MilpRow, ...]
    extra: tuple[Column, ...] = ()

    @property
    def width(self) -> int:
        return len(self.seats) + len(self.extra)

    def column_vector(self, value_of_seat) -> list[float]:
        """One entry per column: `value_of_seat` for the seats, 0 for the extra columns."""
        return [float(value_of_seat(s, k, m)) for s, k, m in self.seats] + [0.0] * len(self.extra)


def offered_models(problem: SeatProblem) -> tuple[tuple[int, ...], ...]:
    """Per slot, the models a binding needs to consider there, strongest first.

    Walking a slot's strength order, a model is left out when the last model kept
    has the same tier and costs no more at every instance. A binding that uses
    the left-out model can give those seats to the kept one instead: the models
    between the two in the order were left out too, so the instances stay
    strongest first; tier counts, and with them every require row and
    min_agents, stay the same; quality does not fall (within a tier the order
    puts higher quality first); cost does not rise. So some best binding uses
    offered models only, and the ILP shrinks (at 50 models x 20 slots of the
    solver benchmark, from 50 models per slot to 7 to 17). The swap could land on
    an excluded binding, so a problem with excluded bindings offers every model.
    """
    offered = []
    for s in range(len(problem.slot_names)):
        kept: list[int] = []
        for m in problem.strength_order(s):
            if kept and not problem.excluded and _dominates(problem, s, kept[-1], m):
                continue
            kept.append(m)
        offered.append(tuple(kept))
    return tuple(offered)


def _dominates(problem: SeatProblem, slot: int, kept: int, model: int) -> bool:
    return problem.tiers[kept] == problem.tiers[model] and all(
        row[kept] <= row[model] for row in problem.cost[slot]
    )


def formulate(
    problem: SeatProblem, *, drop_dominated: bool = True, offered: tuple[tuple[int, ...], ...] | None = None
) -> SeatIlp:
    """Build the ILP's columns and rows (docs/language.md, "How the compiler binds").

    Columns are the seats of `offered_models`; drop_dominated=False offers every
    model everywhere, the full formulation (the solver benchmark's baseline);
    `offered` (per slot, strongest first) overrides both.
    """
    if offered is None and drop_dominated:
        offered = offered_models(problem)
    elif offered is None:
        offered = tuple(problem.strength_order(s) for s in range(len(problem.slot_names)))
    seats = tuple(
        (s, k, m) for s in range(len(problem.slot_names)) for k in range(problem.hi[s]) for m in offered[s]
    )
    column = {seat: j for j, seat in enumerate(seats)}
    rows: list[MilpRow] = []
    inf = math.inf

    def instance(s: int, k: int) -> list[int]:
        return [column[s, k, m] for m in offered[s]]

    for s, name in enumerate(problem.slot_names):
        models = offered[s]
        width = len(models)
        top_rank = width - 1
        for k in range(problem.hi[s]):
            # Instances fill in order, so the first lo are always filled. min_count alone says so
            # only for 0/1 seats; this row says it to the LP relaxation too, which otherwise fills
            # every instance a little (a third each, at lo = 1 of 3) and reads their outputs for free.
            filled = 1.0 if k < problem.lo[s] else -inf
            rows.append(MilpRow(f"seat[{name}]", tuple(instance(s, k)), (1.0,) * width, filled, 1.0))
            if k + 1 == problem.hi[s]:
                continue
            # a_{s,k+1} <= a_{s,k}: instances fill in order.
            rows.append(
                MilpRow(
                    f"fill[{name}]",
                    (*instance(s, k + 1), *instance(s, k)),
                    (1.0,) * width + (-1.0,) * width,
                    -inf,
                    0.0,
                )
            )
            # rank_k <= rank_{k+1} + top_rank·(1 - a_{s,k+1}): instance k is not weaker
            # than k+1. `models` is strongest first, so a model's rank is its position.
            values = tuple(float(r) for r in range(width)) + tuple(float(top_rank - r) for r in range(width))
            rows.append(
                MilpRow(
                    f"order[{name}]", (*instance(s, k), *instance(s, k + 1)), values, -inf, float(top_rank)
                )
            )
        if problem.lo[s] > 0:
            slot_columns = tuple(j for j, seat in enumerate(seats) if seat[0] == s)
            rows.append(
                MilpRow(
                    f"min_count[{name}]", slot_columns, (1.0,) * len(slot_columns), float(problem.lo[s]), inf
                )
            )
    for i, row in enumerate(problem.require):
        coefficient: dict[int, float] = {}
        for slot, tier, coef in row.terms:
            for j, (s, _, m) in enumerate(seats):
                if s == slot and (tier is None or problem.tiers[m] == tier):
                    coefficient[j] = coefficient.get(j, 0.0) + coef
        lower = -inf if row.sense == "<=" else float(row.rhs)
        upper = inf if row.sense == ">=" else float(row.rhs)
        rows.append(MilpRow(f"require #{i + 1}", tuple(coefficient), tuple(coefficient.values()), lower, upper))
    everything = tuple(range(len(seats)))
    if problem.min_agents > 0:
        rows.append(MilpRow("min_agents", everything, (1.0,) * len(seats), float(problem.min_agents), inf))
    if problem.budget < inf:
        costs = tuple(_budget_coefficient(problem, s, k, m) for s, k, m in seats)
        rows.append(scaled_row(MilpRow("budget", everything, costs, -inf, float(problem.budget))))
    for i, binding in enumerate(problem.excluded):
        if any(seat not in column for seat in binding):
            continue  # a binding on a model this ILP does not offer cannot come back
        # No-good cut: Σ_{in binding} (1 - x) + Σ_{not in binding} x >= 1.
        chosen = {column[seat] for seat in binding}
        values = tuple(-1.0 if j in chosen else 1.0 for j in everything)
        rows.append(MilpRow(f"excluded[{i}]", everything, values, 1.0 - len(chosen), inf))
    return SeatIlp(seats, tuple(rows))


def _budget_coefficient(problem: SeatProblem, s: int, k: int, m: int) -> float:
    """A seat's cost in the budget row, capped just above the budget.

    Costs are never negative, so a seat that alone costs more than the budget is
    in no binding within it, whatever its coefficient above the budget; the cap
    keeps such a seat's 1e20 µ$ from reaching the solver.
    """
    return float(min(problem.cost[s][k][m], 2.0 * problem.budget + 1.0))


def _power_of_two_scale(largest: float) -> float:
    """The power of two that brings `largest` down to LARGEST_SOLVER_VALUE (1.0 when it is no larger)."""
    if not largest > LARGEST_SOLVER_VALUE:
        return 1.0
    return 2.0 ** -math.ceil(math.log2(largest / LARGEST_SOLVER_VALUE))


def scaled_row(row: MilpRow) -> MilpRow:
    bounds = [abs(b) for b in (row.lower, row.upper) if math.isfinite(b)]
    largest = max([*map(abs, row.values), *bounds], default=0.0)
    scale = _power_of_two_scale(largest)
    if scale == 1.0:
        return row
    return MilpRow(row.family, row.columns, tuple(v * scale for v in row.values), row.lower * scale, row.upper * scale)


def tier_weights(problem: SeatProblem) -> tuple[int, ...]:
    """The paper's weights per tier level, strongest first: W_i = 1 + Σ_{j>i} W_j·⌊B/c_j⌋.

    c_j is the cheapest seat of tier j (`SeatProblem.least_seat_cost`), so ⌊B/c_j⌋ bounds how many tier-j seats the
    budget buys; the weakest tier weighs 1. Where that bound is undefined (a free
    seat, or no budget) the number of seats the template allows is used instead.
    Raises ValueError when the weighted objective could exceed 2**53, where
    floats stop being exact.
    """
    levels = problem.tier_levels
    seat_bound = []
    for tier in levels:
        cheapest = min(
            (
                problem.least_seat_cost(s, m)
                for s in range(len(problem.slot_names))
                for m in range(len(problem.tiers))
                if problem.tiers[m] == tier and problem.hi[s] > 0
            ),
            default=math.inf,
        )
        if cheapest == math.inf:
            seat_bound.append(0)
        elif cheapest == 0 or problem.budget == math.inf:
            seat_bound.append(problem.capacity)
        elif problem.budget / cheapest > EXACT_INTEGER_LIMIT:
            raise InexactWeights(
                f"a budget of {problem.budget:g} buys more than 2**53 seats of tier {tier}, so the tier weights "
                "are not exact; use method='lexicographic'"
            )
        else:
            seat_bound.append(max(0, math.floor(problem.budget / cheapest)))
    weights = [0] * len(levels)
    for i in reversed(range(len(levels))):
        weights[i] = 1 + sum(weights[j] * seat_bound[j] for j in range(i + 1, len(levels)))
    largest_objective = sum(weights) * problem.capacity
    if largest_objective > EXACT_INTEGER_LIMIT:
        raise InexactWeights(
            f"tier weights {weights} can make an objective of {largest_objective}, beyond 2**53 "
            "where floats are no longer exact; use method='lexicographic'"
        )
    return tuple(weights)


@record
class Objective:
    """One objective to minimise; solves take them in priority order."""

    coefficients: list[float]  # minimised
    tolerance: float  # how far later objectives may push this one off its optimum


def scaled_objective(coefficients: list[float], tolerance: float) -> Objective:
    """An objective scaled, with its tolerance, into the range HiGHS takes (see LARGEST_SOLVER_VALUE)."""
    scale = _power_of_two_scale(max((abs(c) for c in coefficients), default=0.0))
    if scale == 1.0:
        return Objective(coefficients, tolerance)
    return Objective([c * scale for c in coefficients], tolerance * scale)


def ordered_objectives(problem: SeatProblem, ilp: SeatIlp, method: str, tie_break: bool) -> list[Objective]:
    """Objectives in priority order, each to minimise (maximised things are negated).

    By value there are no tier objectives, whatever `method`: the total quality, then the cost."""
    if problem.by_value:
        value = quality_objective(problem, ilp)
        return [value, cost_objective(problem, ilp)] if tie_break else [value]
    levels = problem.tier_levels
    # An integer objective moves in steps of 1, so a tolerance of 0.5 keeps it at
    # its optimum exactly while absorbing floating-point noise in the solver.
    if method == "lexicographic":
        tiers = [
            scaled_objective(ilp.column_vector(lambda s, k, m, t=t: -(problem.tiers[m] == t)), 0.5) for t in levels
        ]
    elif method == "weights":
        weight = dict(zip(levels, tier_weights(problem), strict=True))
        tiers = [scaled_objective(ilp.column_vector(lambda s, k, m: -weight[problem.tiers[m]]), 0.5)]
    else:
        raise ValueError(f"method must be 'lexicographic' or 'weights', got {method!r}")
    if not tie_break or _tiers_fix_the_seats(ilp, problem):
        return tiers
    # The paper's weights rank tiers only; quality and then cost break ties here.
    cost = cost_objective(problem, ilp)
    if quality_follows_tiers(problem, ilp):
        return [*tiers, cost]
    return [*tiers, quality_objective(problem, ilp), cost]


def quality_objective(problem: SeatProblem, ilp: SeatIlp) -> Objective:
    """Total quality to maximise (by value: weight x quality of each slot's instance 0), held to within
    QUALITY_TOLERANCE."""
    return scaled_objective(ilp.column_vector(lambda s, k, m: -problem.seat_quality(s, k, m)), QUALITY_TOLERANCE)


def cost_objective(problem: SeatProblem, ilp: SeatIlp) -> Objective:
    """Total cost to minimise; under a budget, seats that cannot fit it weigh what the budget row gives them."""
    if problem.budget < math.inf:
        return scaled_objective(ilp.column_vector(lambda s, k, m: _budget_coefficient(problem, s, k, m)), 0.0)
    return scaled_objective(ilp.column_vector(lambda s, k, m: problem.cost[s][k][m]), 0.0)


def _tiers_fix_the_seats(ilp: SeatIlp, problem: SeatProblem) -> bool:
    """Whether the tier counts leave one binding: one slot, whose models all differ in tier.

    Then instances are filled strongest first with one model per tier, and quality
    and cost have nothing left to decide (the paper's one-executor pool).
    """
    slots = {s for s, _, _ in ilp.seats}
    if len(slots) > 1:
        return False
    models = {m for _, _, m in ilp.seats}
    return len({problem.tiers[m] for m in models}) == len(models)


def quality_follows_tiers(problem: SeatProblem, ilp: SeatIlp) -> bool:
    """Whether every seat of a tier has the same quality, in every slot.

    Then total quality is a sum over tier counts, fixed once the tier objectives
    are, and solving for it would only repeat their answer (the common case: no
    `quality` declared, 1.0 everywhere). Never by value, which has no tier objectives.
    """
    if problem.by_value:
        return False
    quality_of_tier: dict[int, float] = {}
    for s, _, m in ilp.seats:
        if quality_of_tier.setdefault(problem.tiers[m], problem.quality[s][m]) != problem.quality[s][m]:
            return False
    return True
