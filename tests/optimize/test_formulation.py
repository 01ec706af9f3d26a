"""The formulation: the paper's tier weights by hand, and which models a slot needs to offer."""

from __future__ import annotations

from hypothesis import given

from bamasc.optimize.brute import brute_force, feasible_bindings
from bamasc.optimize.formulation import formulate, offered_models, tier_weights
from bamasc.optimize.highs import solve
from bamasc.optimize.problem import SeatProblem, evaluate
from bamasc.records import replace
from tests.optimize.problems import PROPERTY, assert_same_objective, paper_pool, seat_problems


def test_paper_weights_follow_the_formula():
    # W_2 = 1 for the weakest tier; W_1 = 1 + W_2 * floor(1625 / 203.6) = 1 + 7.
    assert tier_weights(paper_pool()) == (8, 1)


def test_three_tier_weights_by_hand():
    problem = SeatProblem(
        slot_names=("worker",),
        lo=(0,),
        hi=(2,),
        model_names=("a", "b", "c"),
        tiers=(1, 2, 3),
        cost=(((900.0, 300.0, 100.0),) * 2,),
        budget=1000.0,
    )
    # W_3 = 1; W_2 = 1 + 1*floor(1000/100) = 11; W_1 = 1 + 11*floor(1000/300) + 1*10 = 44.
    assert tier_weights(problem) == (44, 11, 1)


def three_seat_slot(**changes) -> SeatProblem:
    """One slot of up to two instances; m0..m2 share tier 1, m3 is tier 2."""
    problem = SeatProblem(
        slot_names=("worker",),
        lo=(1,),
        hi=(2,),
        model_names=("best", "dearer", "cheap_first", "weak"),
        tiers=(1, 1, 1, 2),
        quality=((1.0, 0.9, 0.8, 1.0),),
        cost=(((10.0, 12.0, 9.0, 30.0), (10.0, 12.0, 15.0, 30.0)),),
        budget=25.0,
    )
    return replace(problem, **changes)


def test_a_model_dominated_within_its_tier_is_not_offered():
    problem = three_seat_slot()
    # "dearer" is weaker than "best" and costs more everywhere; "cheap_first" is
    # cheaper at instance 0, so it stays; "weak" is another tier, so it stays.
    assert offered_models(problem) == ((0, 2, 3),)
    assert {m for _, _, m in formulate(problem).seats} == {0, 2, 3}
    assert len(formulate(problem, drop_dominated=False).seats) == 8
    assert_same_objective(solve(problem), brute_force(problem))


def test_excluded_bindings_offer_every_model():
    # The cut may remove the binding a dominated model would have been swapped
    # into, so nothing is dropped then.
    problem = three_seat_slot(excluded=(((0, 0, 0), (0, 1, 0)),))
    assert offered_models(problem) == ((0, 1, 2, 3),)
    assert_same_objective(solve(problem), brute_force(problem))


def test_an_excluded_binding_on_a_model_not_offered_needs_no_row():
    # The template binder narrows its MILP to the tiers that have seats (exact._in_steps); a binding
    # cut off earlier may use a model left out there.
    problem = three_seat_slot(excluded=(((0, 0, 3),),))
    ilp = formulate(problem, offered=((0, 1, 2),))
    assert not any(row.family.startswith("excluded") for row in ilp.rows)
    assert any(row.family.startswith("excluded") for row in formulate(problem).rows)


@PROPERTY
@given(seat_problems())
def test_dropping_dominated_models_keeps_the_best_objective(problem):
    full = brute_force(problem)
    offered = offered_models(problem)
    narrowed = [
        seats for seats in feasible_bindings(problem) if all(m in offered[s] for s, _, m in seats)
    ]
    best = max((evaluate(problem, seats) for seats in narrowed), key=lambda b: b.objective, default=None)
    assert_same_objective(best, full)
