"""The HiGHS solve against brute force, the paper's pool, no-good cuts, HiGHS's quirks and CBC."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given, settings

from bamasc.optimize.brute import brute_force, feasible_bindings
from bamasc.optimize.formulation import tier_weights
from bamasc.optimize.highs import solve
from bamasc.optimize.problem import SeatProblem, evaluate, violations
from bamasc.records import replace
from tests.optimize.problems import (
    PAPER_STRONG_SEAT,
    PAPER_WEAK_SEAT,
    PROPERTY,
    assert_same_objective,
    paper_pool,
    seat_problems,
)


@PROPERTY
@given(seat_problems())
def test_highs_matches_brute_force(problem):
    expected = brute_force(problem)
    found = solve(problem)
    assert_same_objective(found, expected)
    if found is not None:
        assert found.cost <= problem.budget
        assert violations(problem, found.seats) == ()
    assert_same_objective(solve(problem, method="weights"), expected)


@settings(max_examples=60, deadline=None)
@given(seat_problems())
def test_no_feasible_binding_beats_the_chosen_tiers(problem):
    chosen = solve(problem)
    candidates = [evaluate(problem, seats) for seats in feasible_bindings(problem)]
    if chosen is None:
        assert candidates == []
        return
    for other in candidates:
        # Tuples compare lexicographically: more tier-1 seats first, then tier-2, ...
        assert other.tier_counts <= chosen.tier_counts
        if other.tier_counts == chosen.tier_counts:
            assert other.quality <= chosen.quality + 1e-6


@settings(max_examples=60, deadline=None)
@given(seat_problems())
def test_no_good_cut_gives_the_next_binding(problem):
    best = solve(problem)
    if best is None:
        return
    without_best = replace(problem, excluded=(best.seats,))
    second = solve(without_best)
    assert second is None or second.seats != best.seats
    assert_same_objective(second, brute_force(without_best))


@settings(max_examples=40, deadline=None)
@given(seat_problems())
def test_native_multi_objective_mode_matches_the_default(problem):
    # The default solves one objective at a time; HiGHS's own multi-objective
    # mode must reach the same optimum.
    assert_same_objective(solve(problem, native=True), solve(problem))


@pytest.mark.parametrize("method", ["lexicographic", "weights"])
def test_paper_pool_buys_two_strong_and_two_weak_seats(method):
    binding = solve(paper_pool(), method=method)
    assert binding is not None
    assert binding.tier_counts == (2, 2)
    assert binding.cost == pytest.approx(2 * PAPER_STRONG_SEAT + 2 * PAPER_WEAK_SEAT)
    assert [m for _, _, m in binding.seats] == [0, 0, 1, 1]  # strongest instances first


def test_weights_beyond_exact_floats_raise_but_lexicographic_solves():
    tiers = (1, 2, 3, 4, 5, 6)
    problem = SeatProblem(
        slot_names=("worker",),
        lo=(1,),
        hi=(3,),
        model_names=tuple(f"m{t}" for t in tiers),
        tiers=tiers,
        cost=((tuple(1.0 + t for t in tiers),) * 3,),
        budget=1e6,
    )
    with pytest.raises(ValueError, match="2\\*\\*53"):
        tier_weights(problem)
    with pytest.raises(ValueError, match="lexicographic"):
        solve(problem, method="weights")
    binding = solve(problem)
    assert binding is not None and binding.tier_counts == (3, 0, 0, 0, 0, 0)
    assert_same_objective(binding, brute_force(problem))


def test_excluding_the_paper_optimum_gives_the_second_best():
    problem = paper_pool()
    best = solve(problem)
    second = solve(replace(problem, excluded=(best.seats,)))
    # (2 strong, 2 weak) is gone; (2, 1) at 1318.4 beats (1, 5) at 1575.4 on tier-1 seats.
    assert second.tier_counts == (2, 1)
    assert second.cost == pytest.approx(2 * PAPER_STRONG_SEAT + PAPER_WEAK_SEAT)
    third = solve(replace(problem, excluded=(best.seats, second.seats)))
    assert third.tier_counts == (2, 0)


def test_importing_the_optimize_modules_does_not_load_highspy():
    modules = ", ".join(f"bamasc.optimize.{name}" for name in ("problem", "formulation", "highs", "relax", "bind"))
    code = f"import sys, {modules}; assert 'highspy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cost_tie_break_survives_the_highs_presolve_defect():
    # Found by the property test: with presolve on, HiGHS 1.16's multi-objective
    # mode returned cost 51 here although 50 buys the same five tier-1 seats.
    same = (10.0, 10.0, 10.0, 10.0)
    problem = SeatProblem(
        slot_names=("s0", "s1", "s2"),
        lo=(0, 0, 0),
        hi=(3, 0, 2),
        model_names=("m0", "m1", "m2", "m3"),
        tiers=(1, 1, 1, 1),
        cost=((same, same, same), (), (same, (10.0, 10.0, 10.0, 11.0))),
        budget=math.inf,
    )
    binding = solve(problem)
    assert binding.tier_counts == (5,)
    assert binding.cost == 50.0
    assert_same_objective(binding, brute_force(problem))


def test_solves_after_another_highspy_user_started_the_scheduler():
    # HiGHS sizes one task scheduler per process at its first run; bamasc asks
    # for one thread and must cope with a scheduler started with another count.
    code = """
import highspy, numpy as np
from bamasc.optimize.highs import solve
from bamasc.optimize.problem import SeatProblem
other = highspy.Highs()
other.setOptionValue("output_flag", False)
other.setOptionValue("threads", 2)
other.addVar(0.0, 1.0)
other.run()
pool = SeatProblem(slot_names=("executor",), lo=(1,), hi=(5,), model_names=("strong", "weak"),
                   tiers=(1, 2), cost=(((557.4, 203.6),) * 5,), budget=1625.0)
print(solve(pool).tier_counts)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "(2, 2)"


@settings(max_examples=15, deadline=None)
@given(seat_problems())
def test_cbc_solves_the_same_ilps(problem):
    pytest.importorskip("pulp")
    from bamasc.optimize.pulp_model import solve_with_cbc

    lexicographic = solve_with_cbc(problem, "lexicographic", tie_break=True)
    assert_same_objective(lexicographic, solve(problem))
    weighted = solve_with_cbc(problem, drop_dominated=False) if problem.capacity <= 6 else lexicographic
    assert (weighted is None) == (lexicographic is None)
    if weighted is not None:
        assert weighted.tier_counts == lexicographic.tier_counts
