"""Explaining a problem without a binding: which rules bind and what the cheapest binding costs."""

from __future__ import annotations

import pytest

from bamasc.optimize.highs import solve
from bamasc.optimize.problem import RequireRow
from bamasc.optimize.relax import cheapest_seats_cost, explain_infeasibility
from bamasc.records import replace
from tests.optimize.problems import PAPER_WEAK_SEAT, paper_pool


def test_budget_below_cheapest_seat_is_explained():
    problem = paper_pool(budget=150.0)
    assert solve(problem) is None
    explanation = explain_infeasibility(problem)
    assert not explanation.feasible
    assert "budget" in explanation.binding_rows
    assert explanation.cheapest_cost == pytest.approx(PAPER_WEAK_SEAT)
    assert explanation.feasible_from_budget == pytest.approx(PAPER_WEAK_SEAT)
    assert explanation.shortfall == pytest.approx(PAPER_WEAK_SEAT - 150.0)
    assert solve(replace(problem, budget=explanation.feasible_from_budget)) is not None
    assert solve(replace(problem, budget=explanation.feasible_from_budget - 0.01)) is None


def test_structural_conflict_is_not_blamed_on_the_budget():
    # Six tier-1 executors are required but the slot holds at most five.
    problem = replace(paper_pool(budget=1e9), require=(RequireRow(((0, 1, 1),), ">=", 6),))
    explanation = explain_infeasibility(problem)
    assert not explanation.feasible
    assert explanation.cheapest_cost is None and explanation.shortfall is None
    assert explanation.binding_rows == ("require #1",)
    assert cheapest_seats_cost(problem) is None


def test_min_agents_conflict_with_budget_is_reported_per_row():
    problem = replace(paper_pool(budget=500.0), min_agents=3)
    explanation = explain_infeasibility(problem)
    assert not explanation.feasible
    assert explanation.cheapest_cost == pytest.approx(3 * PAPER_WEAK_SEAT)
    assert set(explanation.binding_rows) == {"budget", "min_agents"}
    by_row = {r.row: r for r in explanation.relaxations}
    assert by_row["min_agents"].cheapest_cost == pytest.approx(PAPER_WEAK_SEAT)
    assert not by_row["min_count[executor]"].feasible


def test_feasible_problem_explains_as_feasible():
    explanation = explain_infeasibility(paper_pool())
    assert explanation.feasible and explanation.binding_rows == ()
    assert explanation.cheapest_cost == pytest.approx(PAPER_WEAK_SEAT)
