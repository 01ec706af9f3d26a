"""A thread's budget as a level of the admission protocol: a turn's worst case is held from what is left, or
refused with nothing held; settled to what it charged, the sum of charges never passes the budget."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bamasc.metering.admission import TaskHold
from bamasc.metering.refusals import Refused, ThreadExhausted
from bamasc.metering.threads import ThreadBudget, ThreadLink


def test_a_turn_that_does_not_fit_is_refused_holding_nothing():
    ledger = ThreadBudget("t", 100.0)
    link = ThreadLink(ledger)

    async def run():
        first = TaskHold("a", 60.0)
        await link.admit(first)
        with pytest.raises(ThreadExhausted) as refused:
            await link.admit(TaskHold("b", 41.0))  # 40 left while the first holds 60
        assert ledger.held == 60.0 and refused.value.limit == "thread"
        assert "has 40.0 µ$ left of its 100 µ$ budget" in refused.value.error
        await link.settle(first, 10.0)  # the rest comes back
        await link.admit(TaskHold("b", 90.0))  # exactly what is left fits
        assert ledger.left == 0.0

    asyncio.run(run())


def test_an_unknown_outcome_keeps_the_hold_and_a_release_gives_it_back():
    ledger = ThreadBudget("t", 100.0)
    link = ThreadLink(ledger)

    async def run():
        kept, released = TaskHold("a", 30.0), TaskHold("b", 30.0)
        await link.admit(kept)
        await link.admit(released)
        await link.settle(kept, None)
        await link.release(released)
        assert ledger.spent == 30.0 and ledger.held == 0.0 and ledger.left == 70.0

    asyncio.run(run())


def test_a_thread_without_a_budget_admits_every_turn():
    ledger = ThreadBudget("t", None)
    assert ledger.reserve(1e12) and ledger.left is None


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1, max_value=1e6),
       st.lists(st.tuples(st.floats(min_value=0, max_value=1e6), st.floats(min_value=0, max_value=1)), max_size=30))
def test_turns_that_keep_to_their_holds_never_spend_past_the_budget(budget, turns):
    ledger = ThreadBudget("t", budget)
    link = ThreadLink(ledger)

    async def run():
        for worst, share in turns:
            hold = TaskHold("x", worst)
            try:
                await link.admit(hold)
            except Refused:
                continue
            await link.settle(hold, worst * share)
        assert ledger.spent <= budget + 1e-6 and ledger.held == pytest.approx(0.0, abs=1e-6)

    asyncio.run(run())
