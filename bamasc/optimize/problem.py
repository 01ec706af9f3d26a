"""One seat-binding problem over plain arrays: its rules, and what a set of seats scores and breaks.

A seat is one instance k of one slot s running one model m, written (s, k, m).
A binding picks seats so that the strongest tiers are filled first, then
quality, then cost, within the budget; under the value objective, the highest
total quality (each seat's role weight times its model's quality, as the
caller fills `quality`), then cost. By value a slot is worth what its best
instance is worth, once: more instances of a slot add calls, not value
(docs/language.md, "Weights"). Instances are then numbered best value first,
so instance 0 carries the slot's value and the others are worth nothing.

What a `SeatProblem` deliberately does not hold: templates, ASTs or call graphs
(callers turn those into a problem); costs that depend on how many instances a
slot gets (callers solve one problem per count vector, with lo == hi, when they
need that); any reordering of instances by cost. Instances are numbered
strongest model first, which removes symmetric duplicates; when the cost of a
seat depends on its instance number, this rule also decides which instance the
strong models sit in, and brute force applies the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

from bamasc.records import record

Seat = tuple[int, int, int]
"""(slot index, instance index, model index)."""

SENSES = ("<=", ">=", "==")
OBJECTIVES = ("tiers", "value")  # bamasc.program.OBJECTIVES


@record
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


@record
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
    # [slot][model]: the least a seat of the slot costs on the model in any count vector, where
    # `cost` holds one vector's costs for a problem that spans many (a template's); () means
    # `cost` is that least (see `least_seat_cost`).
    floor: tuple[tuple[float, ...], ...] = ()
    # "tiers": most seats of each tier, strongest first, then quality, then cost; "value": the highest
    # quality (there the caller's weight x quality per seat), then cost.
    objective: str = "tiers"

    @property
    def by_value(self) -> bool:
        return self.objective == "value"

    def score(self, tier_counts: tuple[int, ...], quality: float, cost: float) -> tuple:
        """What a binding scores, larger being better (`quality` as compared: rounded by the caller)."""
        return (quality, -cost) if self.by_value else (*tier_counts, quality, -cost)

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

    def least_seat_cost(self, slot: int, model: int) -> float:
        """The least any seat of `slot` on `model` costs: what bounds how many such seats a budget buys."""
        if self.floor:
            return self.floor[slot][model]
        return min((row[model] for row in self.cost[slot]), default=math.inf)

    def strength_order(self, slot: int) -> tuple[int, ...]:
        """Models for this slot, strongest first: tier, then quality, then cheaper, then index; by
        value, quality first, so that instance 0 holds the slot's most valuable model."""
        first_instance = self.cost[slot][0] if self.hi[slot] else (0.0,) * len(self.tiers)
        if self.by_value:
            return tuple(
                sorted(
                    range(len(self.tiers)),
                    key=lambda m: (-self.quality[slot][m], self.tiers[m], first_instance[m], m),
                )
            )
        return tuple(
            sorted(
                range(len(self.tiers)),
                key=lambda m: (self.tiers[m], -self.quality[slot][m], first_instance[m], m),
            )
        )

    def seat_quality(self, slot: int, instance: int, model: int) -> float:
        """What one seat adds to the objective's quality: by value, the slot's value on instance 0
        alone (the strength order puts its most valuable model there), else the model's quality."""
        if self.by_value and instance > 0:
            return 0.0
        return self.quality[slot][model]

    def total_quality(self, seats: Sequence[Seat]) -> float:
        """The quality a set of seats scores: by tiers the sum over seats; by value, per slot, the
        highest value among its seats, counted once (whatever the instance numbering)."""
        if not self.by_value:
            return math.fsum(self.quality[s][m] for s, _, m in seats)
        best: dict[int, float] = {}
        for s, _, m in seats:
            best[s] = max(best.get(s, -math.inf), self.quality[s][m])
        return math.fsum(best.values())


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
    if problem.floor and (
        len(problem.floor) != slots
        or any(len(row) != models or not all(math.isfinite(c) and c >= 0 for c in row) for row in problem.floor)
    ):
        raise ValueError("floor needs one row per slot of finite costs >= 0, one per model")
    for row in problem.require:
        for slot, tier, _ in row.terms:
            # A tier no model has is allowed: it counts zero seats.
            if not 0 <= slot < slots or (tier is not None and tier < 1):
                raise ValueError(f"require term names an unknown slot or a tier below 1: {(slot, tier)}")
    if problem.objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {problem.objective!r}")
    if math.isnan(problem.budget):
        raise ValueError("budget is NaN")
    for binding in problem.excluded:
        for s, k, m in binding:
            if not (0 <= s < slots and 0 <= k < problem.hi[s] and 0 <= m < models):
                raise ValueError(f"excluded binding names a seat outside the problem: {(s, k, m)}")


@record
class Binding:
    """A chosen set of seats and what it scores."""

    seats: tuple[Seat, ...]  # sorted (slot, instance, model)
    tier_counts: tuple[int, ...]  # seats per tier level, strongest first
    quality: float  # sum of quality over seats; by value, of each slot's best seat
    cost: float  # sum of worst-case seat costs, µ$
    objective: tuple[float, ...]  # (*tier_counts, quality, -cost), or (quality, -cost) by value; larger is better

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
    quality = problem.total_quality(seats)
    cost = math.fsum(problem.cost[s][k][m] for s, k, m in seats)
    return Binding(seats, tier_counts, quality, cost, problem.score(tier_counts, quality, cost))


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
