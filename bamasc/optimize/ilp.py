"""The model-to-seat ILP over plain arrays: formulation, HiGHS solve, infeasibility explanation.

A seat is one instance k of one slot s running one model m, written (s, k, m).
The ILP picks seats so that the strongest tiers are filled first, then quality,
then cost, within the budget.

What this module deliberately does not do: it knows nothing about templates,
ASTs or call graphs (callers turn those into a `SeatProblem`); it does not model
costs that depend on how many instances a slot gets (callers solve one problem
per count vector, with lo == hi, when they need that); it does not reorder
instances by cost. Instances are numbered strongest model first, which removes
symmetric duplicates; when the cost of a seat depends on its instance number,
this rule also decides which instance the strong models sit in, and brute
force applies the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Literal

Seat = tuple[int, int, int]
"""(slot index, instance index, model index)."""

SENSES = ("<=", ">=", "==")
EXACT_INTEGER_LIMIT = 2**53
"""Above this, float64 no longer holds every integer, so tier weights stop being exact."""

QUALITY_TOLERANCE = 1e-7
"""Total-quality differences below this count as ties."""

_MAX_BUDGET_RETRIES = 50
LARGEST_SOLVER_VALUE = 2.0**40
"""The largest coefficient handed to HiGHS. It refuses matrix values from 1e15 on
and reads costs from 1e20 on as infinite; rows and objectives above this are
scaled by a power of two, which is exact in floating point."""

PRESOLVE_UP_TO_COLUMNS = 20
"""HiGHS's MIP presolve settles models this small outright (the paper's pool:
0.3 ms a solve with it, 0.6 ms without); from about 20 seat columns on it costs
more than it saves on the lexicographic solves (5 models x 3 slots: 15 ms
against 4 ms)."""


class SolverError(RuntimeError):
    """HiGHS failed, or answered something that breaks the problem's own rows."""


class InexactWeights(SolverError, ValueError):
    """The paper's tier weights would pass 2**53, where floats stop being exact."""


@dataclass(frozen=True)
class RequireRow:
    """A template `require` row: Σ coef · count(slot[, tier]) <sense> rhs.

    Each term is (slot index, tier or None, integer coefficient); a tier of None
    counts every seat of the slot, a tier t counts the seats running tier-t models.
    """

    terms: tuple[tuple[int, int | None, int], ...]
    sense: str
    rhs: int

    def __post_init__(self) -> None:
        if self.sense not in SENSES:
            raise ValueError(f"require sense must be one of {SENSES}, got {self.sense!r}")


@dataclass(frozen=True, kw_only=True)
class SeatProblem:
    """One binding problem: slots with count ranges, models with tiers, costs and a budget."""

    slot_names: tuple[str, ...]
    lo: tuple[int, ...]  # fewest instances of each slot
    hi: tuple[int, ...]  # most instances of each slot
    model_names: tuple[str, ...]
    tiers: tuple[int, ...]  # tier of each model; 1 is strongest, numbers may skip
    quality: tuple[tuple[float, ...], ...] = ()  # [slot][model]; () means 1.0 everywhere
    cost: tuple[tuple[tuple[float, ...], ...], ...]  # [slot][instance < hi][model], worst-case µ$
    require: tuple[RequireRow, ...] = ()
    min_agents: int = 0  # fewest seats in total
    budget: float  # µ$; math.inf means no budget row
    excluded: tuple[tuple[Seat, ...], ...] = ()  # full bindings that must not be returned

    def __post_init__(self) -> None:
        if not self.quality:
            ones = tuple(1.0 for _ in self.model_names)
            object.__setattr__(self, "quality", tuple(ones for _ in self.slot_names))
        _validate(self)

    @property
    def tier_levels(self) -> tuple[int, ...]:
        """The distinct tiers, strongest first."""
        return tuple(sorted(set(self.tiers)))

    @property
    def capacity(self) -> int:
        """The most seats any binding can have."""
        return sum(self.hi)

    def strength_order(self, slot: int) -> tuple[int, ...]:
        """Models for this slot, strongest first: tier, then quality, then cheaper, then index."""
        first_instance = self.cost[slot][0] if self.hi[slot] else (0.0,) * len(self.tiers)
        return tuple(
            sorted(
                range(len(self.tiers)),
                key=lambda m: (self.tiers[m], -self.quality[slot][m], first_instance[m], m),
            )
        )


def _validate(problem: SeatProblem) -> None:
    slots, models = len(problem.slot_names), len(problem.model_names)
    if not (len(problem.lo) == len(problem.hi) == len(problem.cost) == len(problem.quality) == slots):
        raise ValueError("lo, hi, cost and quality need one entry per slot")
    if len(problem.tiers) != models or models == 0:
        raise ValueError("tiers needs one entry per model, and there must be a model")
    if any(t < 1 for t in problem.tiers):
        raise ValueError("tiers are positive integers, 1 being the strongest")
    for s in range(slots):
        if not 0 <= problem.lo[s] <= problem.hi[s]:
            raise ValueError(f"slot {problem.slot_names[s]!r}: need 0 <= lo <= hi")
        if len(problem.quality[s]) != models or not all(math.isfinite(q) for q in problem.quality[s]):
            raise ValueError(f"slot {problem.slot_names[s]!r}: quality needs one finite entry per model")
        if len(problem.cost[s]) != problem.hi[s]:
            raise ValueError(f"slot {problem.slot_names[s]!r}: cost needs one row per instance (hi)")
        for row in problem.cost[s]:
            if len(row) != models or not all(math.isfinite(c) and c >= 0 for c in row):
                raise ValueError(f"slot {problem.slot_names[s]!r}: costs are finite, >= 0, one per model")
    for row in problem.require:
        for slot, tier, _ in row.terms:
            # A tier no model has is allowed: it counts zero seats.
            if not 0 <= slot < slots or (tier is not None and tier < 1):
                raise ValueError(f"require term names an unknown slot or a tier below 1: {(slot, tier)}")
    if math.isnan(problem.budget):
        raise ValueError("budget is NaN")
    for binding in problem.excluded:
        for s, k, m in binding:
            if not (0 <= s < slots and 0 <= k < problem.hi[s] and 0 <= m < models):
                raise ValueError(f"excluded binding names a seat outside the problem: {(s, k, m)}")


@dataclass(frozen=True)
class Binding:
    """A chosen set of seats and what it scores."""

    seats: tuple[Seat, ...]  # sorted (slot, instance, model)
    tier_counts: tuple[int, ...]  # seats per tier level, strongest first
    quality: float  # sum of quality over seats
    cost: float  # sum of worst-case seat costs, µ$
    objective: tuple[float, ...]  # (*tier_counts, quality, -cost); larger is better

    def counts(self, problem: SeatProblem) -> tuple[int, ...]:
        """Instances per slot."""
        per_slot = [0] * len(problem.slot_names)
        for s, _, _ in self.seats:
            per_slot[s] += 1
        return tuple(per_slot)


def evaluate(problem: SeatProblem, seats: Sequence[Seat]) -> Binding:
    """Score a set of seats (no feasibility check; see `violations`)."""
    seats = tuple(sorted(seats))
    levels = problem.tier_levels
    tier_counts = tuple(sum(1 for _, _, m in seats if problem.tiers[m] == t) for t in levels)
    quality = math.fsum(problem.quality[s][m] for s, _, m in seats)
    cost = math.fsum(problem.cost[s][k][m] for s, k, m in seats)
    return Binding(seats, tier_counts, quality, cost, (*tier_counts, quality, -cost))


def violations(problem: SeatProblem, seats: Sequence[Seat]) -> tuple[str, ...]:
    """Names of the rows a set of seats breaks, checked exactly; () when feasible."""
    broken: list[str] = []
    seats = tuple(sorted(seats))
    if len({(s, k) for s, k, _ in seats}) != len(seats):
        broken.append("seat")
    for s, name in enumerate(problem.slot_names):
        models = [m for slot, _, m in seats if slot == s]
        if [k for slot, k, _ in seats if slot == s] != list(range(len(models))):
            broken.append(f"fill[{name}]")
        rank = {m: r for r, m in enumerate(problem.strength_order(s))}
        if any(rank[a] > rank[b] for a, b in pairwise(models)):
            broken.append(f"order[{name}]")
        if not problem.lo[s] <= len(models) <= problem.hi[s]:
            broken.append(f"min_count[{name}]")
    for i, row in enumerate(problem.require):
        if not _compare(_require_lhs(problem, row, seats), row.sense, row.rhs):
            broken.append(f"require #{i + 1}")
    if len(seats) < problem.min_agents:
        broken.append("min_agents")
    if math.fsum(problem.cost[s][k][m] for s, k, m in seats) > problem.budget:
        broken.append("budget")
    if any(tuple(sorted(b)) == seats for b in problem.excluded):
        broken.append("excluded")
    return tuple(broken)


def _require_lhs(problem: SeatProblem, row: RequireRow, seats: Sequence[Seat]) -> int:
    return sum(
        coef * sum(1 for s, _, m in seats if s == slot and (tier is None or problem.tiers[m] == tier))
        for slot, tier, coef in row.terms
    )


def _compare(lhs: float, sense: str, rhs: float) -> bool:
    return lhs <= rhs if sense == "<=" else lhs >= rhs if sense == ">=" else lhs == rhs


# ---------------------------------------------------------------------------
# Formulation: solver-neutral sparse rows, shared by the HiGHS and PuLP builds
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearRow:
    """lower <= Σ values[i] · x[columns[i]] <= upper, tagged with the rule it encodes."""

    family: str
    columns: tuple[int, ...]
    values: tuple[float, ...]
    lower: float
    upper: float


@dataclass(frozen=True)
class SeatIlp:
    """Binary column j is seat `seats[j]`; `rows` are every constraint of the problem."""

    seats: tuple[Seat, ...]
    rows: tuple[LinearRow, ...]

    def column_vector(self, value_of_seat) -> list[float]:
        return [float(value_of_seat(s, k, m)) for s, k, m in self.seats]


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


def formulate(problem: SeatProblem, *, drop_dominated: bool = True) -> SeatIlp:
    """Build the ILP's columns and rows (see ARCHITECTURE.md, "Binding models to slots").

    Columns are the seats of `offered_models`; drop_dominated=False offers every
    model everywhere, the full formulation (the solver benchmark's baseline).
    """
    if drop_dominated:
        offered = offered_models(problem)
    else:
        offered = tuple(problem.strength_order(s) for s in range(len(problem.slot_names)))
    seats = tuple(
        (s, k, m) for s in range(len(problem.slot_names)) for k in range(problem.hi[s]) for m in offered[s]
    )
    column = {seat: j for j, seat in enumerate(seats)}
    rows: list[LinearRow] = []
    inf = math.inf

    def instance(s: int, k: int) -> list[int]:
        return [column[s, k, m] for m in offered[s]]

    for s, name in enumerate(problem.slot_names):
        models = offered[s]
        width = len(models)
        top_rank = width - 1
        for k in range(problem.hi[s]):
            rows.append(LinearRow(f"seat[{name}]", tuple(instance(s, k)), (1.0,) * width, -inf, 1.0))
            if k + 1 == problem.hi[s]:
                continue
            # a_{s,k+1} <= a_{s,k}: instances fill in order.
            rows.append(
                LinearRow(
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
                LinearRow(
                    f"order[{name}]", (*instance(s, k), *instance(s, k + 1)), values, -inf, float(top_rank)
                )
            )
        if problem.lo[s] > 0:
            slot_columns = tuple(j for j, seat in enumerate(seats) if seat[0] == s)
            rows.append(
                LinearRow(
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
        rows.append(LinearRow(f"require #{i + 1}", tuple(coefficient), tuple(coefficient.values()), lower, upper))
    everything = tuple(range(len(seats)))
    if problem.min_agents > 0:
        rows.append(LinearRow("min_agents", everything, (1.0,) * len(seats), float(problem.min_agents), inf))
    if problem.budget < inf:
        costs = tuple(_budget_coefficient(problem, s, k, m) for s, k, m in seats)
        rows.append(_scaled_row(LinearRow("budget", everything, costs, -inf, float(problem.budget))))
    for i, binding in enumerate(problem.excluded):
        # No-good cut: Σ_{in binding} (1 - x) + Σ_{not in binding} x >= 1.
        chosen = {column[seat] for seat in binding}
        values = tuple(-1.0 if j in chosen else 1.0 for j in everything)
        rows.append(LinearRow(f"excluded[{i}]", everything, values, 1.0 - len(chosen), inf))
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


def _scaled_row(row: LinearRow) -> LinearRow:
    bounds = [abs(b) for b in (row.lower, row.upper) if math.isfinite(b)]
    largest = max([*map(abs, row.values), *bounds], default=0.0)
    scale = _power_of_two_scale(largest)
    if scale == 1.0:
        return row
    return LinearRow(row.family, row.columns, tuple(v * scale for v in row.values), row.lower * scale, row.upper * scale)


def tier_weights(problem: SeatProblem) -> tuple[int, ...]:
    """The paper's weights per tier level, strongest first: W_i = 1 + Σ_{j>i} W_j·⌊B/c_j⌋.

    c_j is the cheapest seat of tier j, so ⌊B/c_j⌋ bounds how many tier-j seats the
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
                c
                for s in range(len(problem.slot_names))
                for row in problem.cost[s]
                for m, c in enumerate(row)
                if problem.tiers[m] == tier
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


@dataclass(frozen=True)
class _Objective:
    coefficients: list[float]  # minimised
    tolerance: float  # how far later objectives may push this one off its optimum


def _objective(coefficients: list[float], tolerance: float) -> _Objective:
    """An objective scaled, with its tolerance, into the range HiGHS takes (see LARGEST_SOLVER_VALUE)."""
    scale = _power_of_two_scale(max((abs(c) for c in coefficients), default=0.0))
    if scale == 1.0:
        return _Objective(coefficients, tolerance)
    return _Objective([c * scale for c in coefficients], tolerance * scale)


def _objectives(problem: SeatProblem, ilp: SeatIlp, method: str, tie_break: bool) -> list[_Objective]:
    """Objectives in priority order, each to minimise (maximised things are negated)."""
    levels = problem.tier_levels
    # An integer objective moves in steps of 1, so a tolerance of 0.5 keeps it at
    # its optimum exactly while absorbing floating-point noise in the solver.
    if method == "lexicographic":
        tiers = [
            _objective(ilp.column_vector(lambda s, k, m, t=t: -(problem.tiers[m] == t)), 0.5) for t in levels
        ]
    elif method == "weights":
        weight = dict(zip(levels, tier_weights(problem), strict=True))
        tiers = [_objective(ilp.column_vector(lambda s, k, m: -weight[problem.tiers[m]]), 0.5)]
    else:
        raise ValueError(f"method must be 'lexicographic' or 'weights', got {method!r}")
    if not tie_break or _tiers_fix_the_seats(ilp, problem):
        return tiers
    # The paper's weights rank tiers only; quality and then cost break ties here.
    cost = _cost_objective(problem, ilp)
    if _quality_follows_tiers(problem, ilp):
        return [*tiers, cost]
    quality = _objective(ilp.column_vector(lambda s, k, m: -problem.quality[s][m]), QUALITY_TOLERANCE)
    return [*tiers, quality, cost]


def _cost_objective(problem: SeatProblem, ilp: SeatIlp) -> _Objective:
    """Total cost to minimise; under a budget, seats that cannot fit it weigh what the budget row gives them."""
    if problem.budget < math.inf:
        return _objective(ilp.column_vector(lambda s, k, m: _budget_coefficient(problem, s, k, m)), 0.0)
    return _objective(ilp.column_vector(lambda s, k, m: problem.cost[s][k][m]), 0.0)


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


def _quality_follows_tiers(problem: SeatProblem, ilp: SeatIlp) -> bool:
    """Whether every seat of a tier has the same quality, in every slot.

    Then total quality is a sum over tier counts, fixed once the tier objectives
    are, and solving for it would only repeat their answer (the common case: no
    `quality` declared, 1.0 everywhere).
    """
    quality_of_tier: dict[int, float] = {}
    for s, _, m in ilp.seats:
        if quality_of_tier.setdefault(problem.tiers[m], problem.quality[s][m]) != problem.quality[s][m]:
            return False
    return True


# ---------------------------------------------------------------------------
# HiGHS adapter
# ---------------------------------------------------------------------------

_HIGHS_OPTIONS = (
    ("output_flag", False),
    # One thread: these MIPs take a few milliseconds, and waiting on HiGHS's
    # second worker (root analytic centre, symmetry detection) cost more than it
    # saved, up to 20-40 ms a solve whenever another process held the other core.
    ("threads", 1),
    ("mip_rel_gap", 0.0),
    ("mip_abs_gap", 1e-9),
    ("random_seed", 0),
    ("blend_multi_objectives", False),
    # The feasibility-jump heuristic costs ~8 ms per MIP even on the paper's
    # 10-column pool and did not pay for itself on the benchmark sizes.
    ("mip_heuristic_run_feasibility_jump", False),
)


def _new_highs(time_limit: float | None):
    import highspy

    # highspy.Highs registers callbacks in its constructor, and that makes HiGHS
    # print its banner to stdout before output_flag can be switched off; the
    # core class underneath does not, and has the same solving methods.
    highs = getattr(highspy, "_Highs", highspy.Highs)()
    for name, value in _HIGHS_OPTIONS:
        highs.setOptionValue(name, value)
    if time_limit is not None:
        highs.setOptionValue("time_limit", float(time_limit))
    return highs


def _load(highs, ilp: SeatIlp) -> None:
    import highspy
    import numpy as np

    n = len(ilp.seats)
    no_entries = np.zeros(0, dtype=np.int32)
    _check(highs.addCols(n, np.zeros(n), np.zeros(n), np.ones(n), 0, no_entries, no_entries, np.zeros(0)), "addCols")
    _check(
        highs.changeColsIntegrality(
            n, np.arange(n, dtype=np.int32), np.full(n, int(highspy.HighsVarType.kInteger), dtype=np.uint8)
        ),
        "changeColsIntegrality",
    )
    if not ilp.rows:
        return
    starts = np.cumsum([0] + [len(r.columns) for r in ilp.rows[:-1]]).astype(np.int32)
    indices = np.fromiter((j for r in ilp.rows for j in r.columns), dtype=np.int32)
    values = np.fromiter((v for r in ilp.rows for v in r.values), dtype=np.float64)
    lower = np.array([max(r.lower, -highspy.kHighsInf) for r in ilp.rows])
    upper = np.array([min(r.upper, highspy.kHighsInf) for r in ilp.rows])
    # A row HiGHS refuses would be dropped silently, and the answer would break it.
    _check(highs.addRows(len(ilp.rows), lower, upper, len(indices), starts, indices, values), "addRows")


def _optimise(
    ilp: SeatIlp,
    objectives: list[_Objective],
    *,
    native: bool = False,
    presolve: bool = False,
    time_limit: float | None = None,
) -> tuple[Seat, ...] | None:
    """Minimise the objectives lexicographically; the chosen seats, or None if infeasible.

    native=False solves them one at a time, fixing each optimum with a row, with
    HiGHS's presolve on or off; native=True hands all objectives to HiGHS's
    multi-objective mode (presolve always off there; separate solves where
    highspy lacks the mode).
    """
    if not ilp.seats:
        # HiGHS reports an empty model as an error status; decide it here.
        return () if all(r.lower <= 0.0 <= r.upper for r in ilp.rows) else None
    highs = _new_highs(time_limit)
    _load(highs, ilp)
    highs.setOptionValue("presolve", "on" if presolve else "off")
    if native and hasattr(highs, "addLinearObjective"):
        values = _run_native(highs, objectives)
    else:
        values = _run_sequential(highs, objectives, time_limit)
    if values is None:
        return None
    return tuple(seat for seat, x in zip(ilp.seats, values, strict=True) if x > 0.5)


def _run_native(highs, objectives: list[_Objective]):
    import highspy
    import numpy as np

    # HiGHS 1.16 starts each priority's MIP from the previous optimum, and with
    # presolve on it can map that start wrongly and return a worse point as
    # optimal (seen on a 20-column instance: cost 51 where 50 is feasible,
    # reported as 40). Without presolve the result is right.
    highs.setOptionValue("presolve", "off")
    for position, objective in enumerate(objectives):
        linear = highspy.HighsLinearObjective()
        # In lexicographic mode HiGHS reads only the sign of the weight (> 0
        # minimises, <= 0 maximises) and ignores the model's sense; when blending
        # it scales by the weight and minimises. Weight 1 with negated
        # coefficients for maximised terms means "minimise" in both modes.
        linear.weight = 1.0
        linear.offset = 0.0
        linear.coefficients = np.asarray(objective.coefficients, dtype=np.float64)
        linear.abs_tolerance = objective.tolerance
        linear.rel_tolerance = -1.0  # < 0 switches the relative bound off
        linear.priority = len(objectives) - position  # higher priority is solved first
        _check(highs.addLinearObjective(linear), "addLinearObjective")
    _run(highs)
    return _solution_or_none(highs)


def _run_sequential(highs, objectives: list[_Objective], time_limit: float | None):
    """Lexicographic solve by hand: optimise, fix the optimum with a row, go on."""
    import time

    import highspy
    import numpy as np

    deadline = None if time_limit is None else time.monotonic() + time_limit
    n = highs.getNumCol()
    columns = np.arange(n, dtype=np.int32)
    values = None
    for position, objective in enumerate(objectives):
        coefficients = np.asarray(objective.coefficients, dtype=np.float64)
        # Start each solve from scratch: a previous optimum kept as a MIP start
        # would meet the presolve defect described in _run_native.
        highs.clearSolver()
        highs.changeObjectiveSense(highspy.ObjSense.kMinimize)
        highs.changeColsCost(n, columns, coefficients)
        if deadline is not None:
            highs.setOptionValue("time_limit", max(0.0, deadline - time.monotonic()))
        _run(highs)
        values = _solution_or_none(highs)
        if values is None:
            return None
        if position + 1 < len(objectives):
            optimum = float(np.dot(coefficients, values))
            nonzero = np.flatnonzero(coefficients).astype(np.int32)
            _check(
                highs.addRow(
                    -highspy.kHighsInf,
                    optimum + objective.tolerance,
                    len(nonzero),
                    nonzero,
                    coefficients[nonzero],
                ),
                "addRow",
            )
    return values


def _run(highs) -> None:
    """highs.run(), restarting HiGHS's task scheduler if it was started with another thread count."""
    import highspy

    if highs.run() == highspy.HighsStatus.kError and highs.getModelStatus() == highspy.HighsModelStatus.kNotset:
        # HiGHS keeps one scheduler per process, sized by the first run in it;
        # a run that asks for another number of threads fails until it is reset
        # (another highspy user in the same process may have started it).
        highs.resetGlobalScheduler(True)
        highs.run()


def _solution_or_none(highs):
    import highspy

    status = highs.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None
    if status == highspy.HighsModelStatus.kTimeLimit:
        raise TimeoutError("HiGHS reached its time limit before proving a binding optimal")
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(f"HiGHS stopped with model status {highs.modelStatusToString(status)}")
    return list(highs.getSolution().col_value)


def _check(status, what: str) -> None:
    import highspy

    if status == highspy.HighsStatus.kError:
        raise SolverError(f"HiGHS {what} failed")


# ---------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------


def solve(
    problem: SeatProblem,
    method: Literal["lexicographic", "weights"] = "lexicographic",
    *,
    tie_break: bool = True,
    native: bool = False,
    time_limit: float | None = None,
) -> Binding | None:
    """The best binding, or None when none is feasible.

    Best means most tier-1 seats, then most tier-2 seats, ..., then the highest
    total quality, then the lowest cost. "lexicographic" solves that order one
    objective at a time, fixing each optimum with a row before the next, and is
    exact at any scale; native=True hands the same objectives to HiGHS's
    multi-objective mode instead (same bindings; slower on these models).
    "weights" uses the paper's single weighted tier objective (see
    `tier_weights`) and raises ValueError where those weights are not exact.
    tie_break=False stops after the tier objective(s), like the paper's single
    solve: quality and cost are then whatever the solver happened to find.
    time_limit (seconds, per HiGHS run) raises TimeoutError when reached.
    """
    ilp = formulate(problem)
    objectives = _objectives(problem, ilp, method, tie_break)
    for _ in range(_MAX_BUDGET_RETRIES):
        # The weighted objective solves faster with presolve (1.6x and 4.6x on two
        # 50x20 instances); the native mode must run without it (see _run_native).
        presolve = method == "weights" or len(ilp.seats) <= PRESOLVE_UP_TO_COLUMNS
        seats = _optimise(ilp, objectives, native=native, presolve=presolve, time_limit=time_limit)
        if seats is None:
            return None
        broken = violations(problem, seats)
        if not broken:
            return evaluate(problem, seats)
        if broken != ("budget",):
            raise SolverError(f"HiGHS returned seats that break {', '.join(broken)}: {seats}")
        # Over budget only by the solver's feasibility tolerance: rule that binding
        # out and solve again, so the budget holds exactly.
        problem = replace(problem, excluded=(*problem.excluded, seats))
        ilp = formulate(problem)
    raise SolverError("HiGHS kept returning bindings just over the budget")


def cheapest_seats(problem: SeatProblem) -> tuple[Seat, ...] | None:
    """The cheapest binding that meets every row except the budget (excluded bindings stay out)."""
    unbudgeted = replace(problem, budget=math.inf)
    ilp = formulate(unbudgeted)
    return _optimise(ilp, [_cost_objective(unbudgeted, ilp)], native=False)


def cheapest_cost(problem: SeatProblem) -> float | None:
    """The cost of the cheapest binding that meets every row except the budget; None if none does."""
    seats = cheapest_seats(problem)
    return None if seats is None else evaluate(problem, seats).cost


@dataclass(frozen=True)
class Relaxation:
    """What happens when one rule of the problem is dropped."""

    row: str  # "budget", "min_count[slot]", "min_agents", "require #n" (1-based, as explain says) or "excluded"
    cheapest_cost: float | None  # cheapest binding without this rule, budget ignored; None if none
    feasible: bool  # a binding within the budget exists without this rule


@dataclass(frozen=True)
class Explanation:
    """Why a problem has (or has no) binding."""

    feasible: bool
    budget: float
    cheapest_cost: float | None  # every non-budget rule met; None if they conflict on their own
    binding_rows: tuple[str, ...]  # rules whose removal alone makes the problem feasible
    relaxations: tuple[Relaxation, ...]  # one per droppable rule; () when feasible

    @property
    def feasible_from_budget(self) -> float | None:
        """The smallest budget at which the other rules can be met."""
        return self.cheapest_cost

    @property
    def shortfall(self) -> float | None:
        """How much budget is missing; None when the other rules conflict on their own."""
        return None if self.cheapest_cost is None else max(0.0, self.cheapest_cost - self.budget)


def explain(problem: SeatProblem) -> Explanation:
    """Which rules make the problem infeasible, as data: drop each in turn and re-solve."""
    cheapest = cheapest_cost(problem)
    feasible = cheapest is not None and cheapest <= problem.budget
    if feasible:
        return Explanation(True, problem.budget, cheapest, (), ())
    relaxed = [("budget", replace(problem, budget=math.inf))]
    relaxed += [
        (
            f"min_count[{name}]",
            replace(problem, lo=tuple(0 if i == s else lo for i, lo in enumerate(problem.lo))),
        )
        for s, name in enumerate(problem.slot_names)
        if problem.lo[s] > 0
    ]
    if problem.min_agents > 0:
        relaxed.append(("min_agents", replace(problem, min_agents=0)))
    relaxed += [
        (f"require #{i + 1}", replace(problem, require=problem.require[:i] + problem.require[i + 1 :]))
        for i in range(len(problem.require))
    ]
    if problem.excluded:
        relaxed.append(("excluded", replace(problem, excluded=())))
    relaxations = []
    for row, without in relaxed:
        cost = cheapest if row == "budget" else cheapest_cost(without)
        relaxations.append(Relaxation(row, cost, cost is not None and cost <= without.budget))
    binding_rows = tuple(r.row for r in relaxations if r.feasible)
    return Explanation(False, problem.budget, cheapest, binding_rows, tuple(relaxations))
