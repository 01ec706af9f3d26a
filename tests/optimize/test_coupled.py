"""Reads priced as products of seat choices (optimize/coupled.py), and the always-filled seat rows."""

from __future__ import annotations

import math
import random

import pytest

from bamasc.optimize import bind, coupled, exact
from bamasc.optimize.formulation import formulate
from bamasc.optimize.problem import SeatProblem
from tests.helpers.milp import brute_force, load, objective, random_source, same, strategy


@pytest.mark.parametrize("seed", range(40))
def test_coupled_reads_bind_like_the_split_reads_and_brute_force(tmp_path, monkeypatch, seed):
    """The same best binding whether reads are coupled products or R/Q splits, equal to brute force."""
    rng = random.Random(5000 + seed)
    _, source = random_source(rng)
    program = load(tmp_path, source)
    system = program.systems["s"]
    chosen = strategy(enumerate_up_to=rng.choice([0, 64]))
    truth = brute_force(program, system.budget)
    with_products = objective(bind.bind_template(program, system, "t", system.budget, strategy=chosen))
    monkeypatch.setattr(coupled, "COUPLE_UP_TO", 0)
    split = objective(bind.bind_template(program, system, "t", system.budget, strategy=chosen))
    assert same(with_products, truth), (source, with_products, truth)
    assert same(split, truth), (source, split, truth)


PIPELINE = """
model strong { provider = fake  name = "strong"  tier = 1  max_output = 300  price { input = 2.0  output = 6.0 } }
model wide { provider = fake  name = "wide"  tier = 2  max_output = 900  price { input = 0.2  output = 0.9 } }
model small { provider = fake  name = "small"  tier = 2  max_output = 100  price { input = 0.9  output = 1.5 } }
role A { reads = answer  prompt = "Do {{task}}" }
role B { reads = answer  prompt = "Then {{task}} {{first}}" }
role C { reads = answer  prompt = "Last {{task}} {{second}}" }
topology t {
  slot a : A [1..3]
  slot b : B [1..3]
  slot c : C [0..2]
  flow {
    first = parallel a(task)
    second = parallel b(task, first)
    answer parallel c(task, second)
  }
}
system s { models = [strong, wide, small]  topologies = [t]  budget = %(budget)s  task_tokens = 50 }
"""


@pytest.mark.parametrize("budget", [900, 2500, 6000, 20000])
def test_coupled_products_price_a_binding_as_the_split_reads_do(tmp_path, monkeypatch, budget):
    """At the chosen seats the products are exactly the reads: the budget row holds the same total
    in both forms, never below the exact bound (an over-priced binding would be ruled out by a
    budget it fits, an under-priced one could break it)."""
    program = load(tmp_path, PIPELINE % {"budget": budget})
    system = program.systems["s"]
    solve = exact.optimise_columns
    priced = {}
    for limit in (coupled.COUPLE_UP_TO, 0):
        seen = []

        def spy(ilp, objectives, **options):
            values = solve(ilp, objectives, **options)
            seen.append((ilp, values))
            return values

        monkeypatch.setattr(exact, "optimise_columns", spy)
        monkeypatch.setattr(coupled, "COUPLE_UP_TO", limit)
        found = bind.bind_template(program, system, "t", float(budget))
        assert found.feasible
        (ilp, values), *_ = seen
        assert any(column.name.startswith("z[") for column in ilp.extra) == (limit > 0)
        row = next(row for row in ilp.rows if row.family == "budget")
        priced[limit] = (math.fsum(v * values[j] for j, v in zip(row.columns, row.values)), found.worst_case_cost)
    (products, exact_bound), (split, split_bound) = priced.values()
    assert math.isclose(exact_bound, split_bound, rel_tol=1e-9)
    assert math.isclose(products, split, rel_tol=1e-9, abs_tol=1e-6)
    assert products >= exact_bound - 1e-6


def test_seats_below_the_lowest_count_are_filled_in_the_relaxation_too():
    problem = SeatProblem(
        slot_names=("a", "b"), lo=(2, 0), hi=(3, 2), model_names=("x", "y"), tiers=(1, 2),
        cost=(((1.0, 1.0),) * 3, ((1.0, 1.0),) * 2), budget=math.inf,
    )  # fmt: skip
    lower = {row.columns[0]: row.lower for row in formulate(problem).rows if row.family.startswith("seat[")}
    seats = formulate(problem).seats
    filled = {seats[j][:2] for j, bound in lower.items() if bound == 1.0}
    assert filled == {(0, 0), (0, 1)}
    assert all(bound == -math.inf for j, bound in lower.items() if seats[j][:2] not in filled)
