"""Why a seat problem has no binding, as data: drop each rule in turn and find the cheapest binding left."""

from __future__ import annotations

import math

from bamasc.optimize.highs import cheapest_seats
from bamasc.optimize.problem import SeatProblem, evaluate
from bamasc.records import record, replace


def cheapest_seats_cost(problem: SeatProblem) -> float | None:
    """The cost of the cheapest binding that meets every row except the budget; None if none does."""
    seats = cheapest_seats(problem)
    return None if seats is None else evaluate(problem, seats).cost


@record
class Relaxation:
    """What happens when one rule of the problem is dropped."""

    row: str  # "budget", "min_count[slot]", "min_agents", "require #n" (1-based, as explain says) or "excluded"
    cheapest_cost: float | None  # cheapest binding without this rule, budget ignored; None if none
    feasible: bool  # a binding within the budget exists without this rule


@record
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


def explain_infeasibility(problem: SeatProblem) -> Explanation:
    """Which rules make the problem infeasible: drop each in turn and re-solve."""
    cheapest = cheapest_seats_cost(problem)
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
        cost = cheapest if row == "budget" else cheapest_seats_cost(without)
        relaxations.append(Relaxation(row, cost, cost is not None and cost <= without.budget))
    binding_rows = tuple(r.row for r in relaxations if r.feasible)
    return Explanation(False, problem.budget, cheapest, binding_rows, tuple(relaxations))
