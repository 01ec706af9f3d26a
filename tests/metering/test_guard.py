"""The budget guard's ledger, by hand."""

from __future__ import annotations

import pytest

from bamasc.program import Model
from bamasc.metering.guard import BudgetGuard, PosthocGuard
from bamasc.source import Span

SPAN = Span("t.bam", 1, 1, 1, 2)


def model(price_in=0.27, price_out=1.10):
    return Model("m", "fake", "m", price_in, price_out, 1, None, None, None, None, None, {}, 1.0, SPAN)


def test_a_reservation_holds_the_worst_case_and_settles_to_usage():
    guard = BudgetGuard(1000)
    reservation = guard.reserve(model(), prompt_tokens=500, max_tokens=384)
    assert reservation.amount == pytest.approx(0.27 * 500 + 1.10 * 384)
    assert not reservation.clamped
    assert guard.remaining == pytest.approx(1000 - reservation.amount)
    charged = guard.settle(reservation, prompt_tokens=480, completion_tokens=100)
    assert charged == pytest.approx(0.27 * 480 + 1.10 * 100)
    assert guard.charged == pytest.approx(charged)
    assert guard.remaining == pytest.approx(1000 - charged)


def test_max_tokens_is_clamped_to_what_fits():
    guard = BudgetGuard(300)
    reservation = guard.reserve(model(), prompt_tokens=500, max_tokens=384)
    # 300 - 135 = 165 µ$ left for output: 165 / 1.10 = 150 tokens.
    assert reservation.max_tokens == 150
    assert reservation.clamped
    assert reservation.amount == pytest.approx(300)


def test_below_a_useful_minimum_the_call_is_not_made():
    guard = BudgetGuard(140)
    assert guard.reserve(model(), prompt_tokens=500, max_tokens=384) is None  # 5 µ$ buys 4 tokens
    assert guard.charged == 0 and guard.held == 0


def test_unknown_outcomes_keep_the_reservation_and_refusals_release_it():
    guard = BudgetGuard(2000)
    first = guard.reserve(model(), 100, 100)
    guard.keep(first)
    assert guard.charged == pytest.approx(first.amount)
    second = guard.reserve(model(), 100, 100)
    guard.release(second)
    assert guard.charged == pytest.approx(first.amount)
    assert guard.held == pytest.approx(0)


def test_retries_draw_on_the_same_budget_until_nothing_fits():
    guard = BudgetGuard(500)
    sizes = []
    while (reservation := guard.reserve(model(), 200, 200)) is not None:
        guard.keep(reservation)  # every attempt times out
        sizes.append(reservation.max_tokens)
    # 274 µ$ for the first attempt; the second fits only 156 output tokens; then 0.4 µ$ is left.
    assert sizes == [200, 156]
    assert guard.charged <= 500


def test_posthoc_checks_only_after_spending_and_can_overrun():
    guard = PosthocGuard(500)
    first = guard.reserve(model(), 200, 384)
    guard.settle(first, 200, 384)  # 476.4 µ$
    second = guard.reserve(model(), 200, 384)
    assert second is not None and second.max_tokens == 384  # nothing stops or clamps it
    guard.settle(second, 200, 384)
    assert guard.overran
    assert guard.reserve(model(), 200, 384) is None  # only now does it stop


def test_budget_check_none_records_every_call_and_after_stops_once_spent():
    from bamasc.metering.guard import RecordingGuard, guard_class

    assert guard_class("reserve", "none") is RecordingGuard
    assert guard_class("reserve", "after") is PosthocGuard
    assert guard_class("reserve", "before") is BudgetGuard
    for kind, calls in ((RecordingGuard, 10), (PosthocGuard, 1)):  # one call of 557.4 µ$ spends the 500
        guard = kind(budget=500.0)
        made = 0
        for _ in range(10):
            reservation = guard.reserve(model(), prompt_tokens=500, max_tokens=384)
            if reservation is None:
                break
            assert reservation.max_tokens == 384  # never clamped
            guard.settle(reservation, 500, 384)
            made += 1
        assert made == calls
        assert guard.overran
