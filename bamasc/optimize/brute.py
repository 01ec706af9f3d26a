"""Exhaustive search over seat bindings: the oracle the ILP is tested against.

It enumerates every binding the formulation allows (counts within range,
instances numbered strongest model first) and checks the remaining rules itself,
without the ILP rows, so that a mistake in the formulation shows up as a
disagreement. Exponential; for small problems only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import combinations_with_replacement, product

from bamasc.optimize.problem import Binding, Seat, SeatProblem, evaluate


def brute_force(problem: SeatProblem) -> Binding | None:
    """The best feasible binding by `Binding.objective`, or None."""
    best = None
    for seats in feasible_bindings(problem):
        candidate = evaluate(problem, seats)
        if best is None or candidate.objective > best.objective:
            best = candidate
    return best


def feasible_bindings(problem: SeatProblem) -> Iterator[tuple[Seat, ...]]:
    """Every binding that meets all rules, budget included."""
    excluded = {tuple(sorted(binding)) for binding in problem.excluded}
    for per_slot in product(*(_slot_choices(problem, s) for s in range(len(problem.slot_names)))):
        seats = tuple(seat for slot_seats in per_slot for seat in slot_seats)
        if len(seats) < problem.min_agents or seats in excluded:
            continue
        if math.fsum(problem.cost[s][k][m] for s, k, m in seats) > problem.budget:
            continue
        if all(_require_holds(problem, row, seats) for row in problem.require):
            yield seats


def _slot_choices(problem: SeatProblem, slot: int) -> list[tuple[Seat, ...]]:
    # combinations_with_replacement keeps the input order, so each choice lists
    # its models strongest first: exactly the instance numbering rule.
    strongest_first = problem.strength_order(slot)
    return [
        tuple((slot, k, m) for k, m in enumerate(models))
        for count in range(problem.lo[slot], problem.hi[slot] + 1)
        for models in combinations_with_replacement(strongest_first, count)
    ]


def _require_holds(problem: SeatProblem, row, seats: tuple[Seat, ...]) -> bool:
    total = 0
    for slot, tier, coef in row.terms:
        total += coef * sum(
            1 for s, _, m in seats if s == slot and (tier is None or problem.tiers[m] == tier)
        )
    if row.sense == "<=":
        return total <= row.rhs
    if row.sense == ">=":
        return total >= row.rhs
    return total == row.rhs
