"""Seat problems the optimize tests share: the paper's pool, random small problems, and a comparison."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from bamasc.optimize.problem import SENSES, RequireRow, SeatProblem

PAPER_STRONG_SEAT = 557.4  # µ$ per executor seat on the tier-1 model
PAPER_WEAK_SEAT = 203.6  # µ$ per executor seat on the tier-2 model
PAPER_BUDGET = 1625.0


def paper_pool(budget: float = PAPER_BUDGET) -> SeatProblem:
    return SeatProblem(
        slot_names=("executor",),
        lo=(1,),
        hi=(5,),
        model_names=("strong", "weak"),
        tiers=(1, 2),
        cost=(((PAPER_STRONG_SEAT, PAPER_WEAK_SEAT),) * 5,),
        budget=budget,
    )


@st.composite
def seat_problems(draw) -> SeatProblem:
    models = draw(st.integers(2, 4))
    tier_set = draw(st.sampled_from([(1,), (1, 2), (1, 3), (2, 3), (1, 2, 3)]))
    tiers = tuple(draw(st.sampled_from(tier_set)) for _ in range(models))
    slots = draw(st.integers(1, 3))
    hi = tuple(draw(st.integers(0, 3)) for _ in range(slots))
    lo = tuple(draw(st.integers(0, h)) for h in hi)
    price = st.one_of(st.integers(10, 2000).map(float), st.integers(100, 20000).map(lambda v: v / 10))
    cost = []
    for s in range(slots):
        base = [draw(price) for _ in range(models)]
        if draw(st.booleans()):  # the same cost for every instance, as in the paper
            cost.append(tuple(tuple(base) for _ in range(hi[s])))
        else:
            cost.append(tuple(tuple(draw(price) for _ in range(models)) for _ in range(hi[s])))
    quality = ()
    if draw(st.booleans()):
        quality = tuple(
            tuple(draw(st.sampled_from([0.5, 0.6, 0.75, 0.9, 1.0])) for _ in range(models))
            for _ in range(slots)
        )
    require = ()
    if draw(st.booleans()):
        terms = tuple(
            (
                draw(st.integers(0, slots - 1)),
                draw(st.sampled_from((None, *tier_set))),
                draw(st.sampled_from([-2, -1, 1, 2])),
            )
            for _ in range(draw(st.integers(1, 2)))
        )
        require = (RequireRow(terms, draw(st.sampled_from(SENSES)), draw(st.integers(-2, 4))),)
    most = sum(max(row) for rows in cost for row in rows)
    budget = draw(st.one_of(st.floats(0, most * 1.1, allow_nan=False).map(round), st.just(math.inf)))
    return SeatProblem(
        slot_names=tuple(f"s{i}" for i in range(slots)),
        lo=lo,
        hi=hi,
        model_names=tuple(f"m{i}" for i in range(models)),
        tiers=tiers,
        quality=quality,
        cost=tuple(cost),
        require=require,
        min_agents=draw(st.integers(0, 4)),
        budget=float(budget),
    )


def assert_same_objective(found, expected) -> None:
    assert (found is None) == (expected is None)
    if found is None:
        return
    assert found.tier_counts == expected.tier_counts
    assert found.quality == pytest.approx(expected.quality, abs=1e-6)
    assert found.cost == pytest.approx(expected.cost, rel=1e-9, abs=1e-6)


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
