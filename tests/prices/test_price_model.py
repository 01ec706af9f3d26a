"""The price model keeps every bound and reservation an upper bound of the charge, for every catalogue shape."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from bamasc import catalog
from bamasc.prices import PriceTier, Pricing, Usage
from bamasc.metering.guard import BudgetGuard
from tests.conftest import model_declaration


def _catalogue() -> list[Pricing]:
    found = []
    for ref in catalog.entry_refs():
        try:
            found.append(catalog.pricing(ref))
        except catalog.CatalogError:
            continue
    return found


PRICINGS = _catalogue()
DOUBLING = Pricing(1.25, 10.0, cache_read=0.125, tiers=(PriceTier(200_000, 2.5, 20.0, 0.25),))


def test_the_catalogue_has_every_shape():
    assert len(PRICINGS) > 2000
    assert any(p.tiers for p in PRICINGS)
    assert any(p.cache_read is not None for p in PRICINGS)
    assert any(p.cache_write is not None for p in PRICINGS)
    assert any(len(p.tiers) > 1 or p.per_request for p in PRICINGS)
    assert any(not p.tiers and p.cache_read is None for p in PRICINGS)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(0, len(PRICINGS) - 1),
    prompt_bound=st.integers(0, 1_200_000),
    max_tokens=st.integers(16, 200_000),
    data=st.data(),
)
def test_no_reported_usage_within_a_reservation_is_charged_more(index, prompt_bound, max_tokens, data):
    pricing = PRICINGS[index]
    prompt = data.draw(st.integers(0, prompt_bound))
    cached = data.draw(st.integers(0, prompt))
    completion = data.draw(st.integers(0, max_tokens))
    guard = BudgetGuard(budget=1e15)
    model = model_declaration(price_input=pricing.input, price_output=pricing.output, pricing=pricing)
    reservation = guard.reserve(model, prompt_bound, max_tokens)
    assert reservation is not None and reservation.max_tokens == max_tokens
    charge, _ = guard.settle_usage(reservation, Usage(prompt, completion, cached))
    bound = sum(pricing.worst_cost(prompt_bound, max_tokens))
    assert charge <= reservation.amount * (1 + 1e-12) + 1e-9
    assert charge <= bound * (1 + 1e-12) + 1e-9
    assert guard.overbilled is None


def test_a_prompt_that_could_cross_the_threshold_is_reserved_at_the_tier_above():
    assert DOUBLING.worst_cost(200_000, 100) == (1.25 * 200_000, 10.0 * 100)
    assert DOUBLING.worst_cost(200_001, 100) == (2.5 * 200_001, 20.0 * 100)
    # A reported prompt below the threshold settles at the base rates.
    charge, rates = DOUBLING.charge(Usage(150_000, 100))
    assert rates.above is None and charge == pytest.approx(1.25 * 150_000 + 10.0 * 100)
    charge, rates = DOUBLING.charge(Usage(250_000, 100, cached_tokens=50_000))
    assert rates.above == 200_000
    assert charge == pytest.approx(2.5 * 200_000 + 0.25 * 50_000 + 20.0 * 100)


def test_a_cached_read_dearer_than_input_is_what_the_bound_pays():
    odd = Pricing(1.0, 2.0, cache_read=3.0)
    assert odd.worst_cost(100, 0)[0] == 300.0
    assert odd.charge(Usage(100, 0, cached_tokens=100))[0] == 300.0


def test_an_unasked_cache_write_that_costs_more_than_reserved_overbills():
    pricing = Pricing(3.0, 15.0, cache_read=0.3, cache_write=3.75)
    model = model_declaration(provider="anthropic", price_input=3.0, price_output=15.0, pricing=pricing)
    guard = BudgetGuard(budget=1e9)
    reservation = guard.reserve(model, 1000, 100)
    charge = guard.settle(reservation, 1000, 100, cache_write_tokens=1000)
    assert charge == pytest.approx(3.75 * 1000 + 15.0 * 100)
    assert guard.overbilled and "cache-write" in guard.overbilled


def test_cached_reads_are_credited_only_as_reported():
    pricing = catalog.pricing("openai/gpt-4.1-nano")
    model = model_declaration(price_input=pricing.input, price_output=pricing.output, pricing=pricing)
    guard = BudgetGuard(budget=1e9)
    reservation = guard.reserve(model, 1000, 100)
    assert reservation.amount == pytest.approx(0.1 * 1000 + 0.4 * 100)  # no discount assumed
    assert guard.settle(reservation, 1000, 100, cached_tokens=800) == pytest.approx(0.1 * 200 + 0.025 * 800 + 0.4 * 100)


def test_every_entry_at_each_threshold_and_both_cache_extremes():
    for pricing in PRICINGS:
        for bound in {0, 1, *(t.above for t in pricing.tiers), *(t.above + 1 for t in pricing.tiers), 2_000_000}:
            reserved = sum(pricing.worst_cost(bound, 4096))
            for cached in (0, bound):
                assert pricing.charge(Usage(bound, 4096, cached))[0] <= reserved * (1 + 1e-12) + 1e-9, pricing.catalog
