"""The shared /metrics series (bamasc/http/metrics.py): bounded labels whatever names arrive, and counts taken from the
admission chain's events, never worked out again."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("prometheus_client", reason="the serve and proxy extras' prometheus-client is not installed")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bamasc.http.metrics import OTHER, REASONS, Metrics  # noqa: E402
from bamasc.metering.admission import Admission, Admissions, Attempt  # noqa: E402
from bamasc.metering.refusals import BudgetExhausted, LedgerLost, Refused, ScopeClosed, ShortOfTotal  # noqa: E402
from bamasc.prices import Usage  # noqa: E402
from bamasc.version import __version__  # noqa: E402
from tests.helpers.metrics import promtool_check, samples, series, total  # noqa: E402

DECLARED = ("m_small", "m_large")
names = st.text(min_size=1, max_size=40)


@settings(max_examples=25, deadline=None)
@given(models=st.lists(names, min_size=1, max_size=60), keys=st.lists(names, min_size=1, max_size=60),
       charges=st.lists(st.integers(0, 10**9), min_size=1, max_size=60))
def test_no_name_a_client_sends_grows_the_series_past_their_bounds(models, keys, charges):
    metrics = Metrics(DECLARED, max_keys=5)
    for index, charge in enumerate(charges):
        metrics.call(models[index % len(models)], "settled", float(charge), 0.5, key=keys[index % len(keys)])
    found = samples(metrics.text().decode())
    assert series(found, "bamasc_spent_usd_total", "model") <= {*DECLARED, OTHER}
    assert series(found, "bamasc_call_duration_seconds_count", "model") <= {*DECLARED, OTHER}
    assert len(series(found, "bamasc_key_spent_usd_total", "key") - {OTHER}) <= 5
    # Bounded, and nothing lost: every µ$ is in some series.
    assert total(found, "bamasc_spent_usd_total") == pytest.approx(sum(charges) * 1e-6, abs=1e-9)
    assert total(found, "bamasc_key_spent_usd_total") == pytest.approx(sum(charges) * 1e-6, abs=1e-9)
    assert total(found, "bamasc_calls_total") == len(charges)


def test_a_generated_family_of_keys_keeps_the_first_ones_and_shares_the_rest():
    metrics = Metrics(DECLARED, keys=["declared-key"], max_keys=3)
    for number in range(1000):
        metrics.charged_to_key(f"key-{number}", 1.0)
    metrics.charged_to_key("declared-key", 2.0)
    found = samples(metrics.text().decode())
    assert series(found, "bamasc_key_spent_usd_total", "key") == {"declared-key", "key-0", "key-1", "key-2", OTHER}
    assert total(found, "bamasc_key_spent_usd_total", key=OTHER) == pytest.approx(997e-6)


def test_a_hostile_label_value_is_escaped_and_the_text_passes_promtool():
    metrics = Metrics(DECLARED, max_keys=2)
    metrics.call("m_small", "settled", 12.5, 1.25, key='a"b\\c\nd', prompt_tokens=10, completion_tokens=3)
    metrics.refused("budget")
    metrics.refused("not a reason")
    metrics.ledger(1_500_000.0, 10.0, None, None)
    metrics.responses[200] += 2
    text = metrics.text().decode()
    found = samples(text)
    assert series(found, "bamasc_key_spent_usd_total", "key") == {'a"b\\c\nd'}
    assert found[("bamasc_build_info", (("version", __version__),))] == 1
    assert total(found, "bamasc_refusals_total", reason=OTHER) == 1
    assert total(found, "bamasc_ledger_spent_usd") == pytest.approx(1.5)
    assert ("bamasc_budget_total_usd", ()) not in found  # no total, no total's gauges
    assert found[("bamasc_http_responses_total", (("code", "200"),))] == 2
    promtool_check(text)


class Model:
    def __init__(self, name: str) -> None:
        self.name = name


class Holds(Admission):
    """A link that charges `charge` µ$ to a settled attempt and the whole `hold` to a kept one, or refuses."""

    def __init__(self, refusal: Refused | None = None, charge: float = 7.0, hold: float = 30.0) -> None:
        self.refusal, self.charge, self.hold = refusal, charge, hold

    async def admit(self, attempt: Attempt) -> None:
        if self.refusal is not None:
            raise self.refusal

    async def settle(self, attempt: Attempt, usage) -> None:
        attempt.usage = usage
        attempt.charged = self.hold if usage is None else self.charge

    async def release(self, attempt: Attempt) -> None:
        attempt.charged = 0.0


def test_the_chain_s_events_count_each_ending_and_each_refusal_by_its_limit():
    metrics = Metrics(DECLARED)

    async def main():
        async def one(ending: str, refusal: Refused | None = None) -> None:
            chain = Admissions((Holds(refusal),), (metrics.listener("k"),))
            attempt = Attempt(None, None, Model("m_small"), 1, 100, 50, 60.0)
            try:
                await chain.admit(attempt)
            except Refused:
                return
            await asyncio.sleep(0)
            if ending == "settle":
                await chain.settle(attempt, Usage(100, 20))
            elif ending == "keep":
                await chain.keep(attempt, "timeout")
            else:
                await chain.release(attempt, "upstream status 400")

        refusals = [BudgetExhausted("s"), ShortOfTotal("s"), ScopeClosed("s"), LedgerLost("s")]
        # Many at once, interleaved at every await: none is lost.
        await asyncio.gather(*(one(ending) for ending in ("settle", "keep", "release") * 50),
                             *(one("settle", refusal) for refusal in refusals * 5))

    asyncio.run(main())
    found = samples(metrics.text().decode())
    assert total(found, "bamasc_calls_total", outcome="settled") == 50
    assert total(found, "bamasc_calls_total", outcome="kept") == 50
    assert total(found, "bamasc_calls_total", outcome="released") == 50
    assert total(found, "bamasc_calls_total", outcome="refused") == 20
    for limit in ("budget", "total", "overbilled", "ledger"):
        assert total(found, "bamasc_refusals_total", reason=limit) == 5, limit
    assert {"budget", "total", "overbilled", "ledger", "deadline", "busy"} <= REASONS
    # The chain's charges, no other arithmetic: 50 settled at 7 µ$, 50 kept at 30 µ$, 50 released at 0.
    assert total(found, "bamasc_spent_usd_total") == pytest.approx((50 * 7 + 50 * 30) * 1e-6, abs=1e-12)
    assert total(found, "bamasc_key_spent_usd_total", key="k") == pytest.approx((50 * 7 + 50 * 30) * 1e-6, abs=1e-12)
    assert total(found, "bamasc_tokens_total", kind="prompt") == 50 * 100
    assert total(found, "bamasc_call_duration_seconds_count") == 150  # the refused were never sent
