"""`bamasc serve`'s /metrics: Prometheus's format (promtool), USD equal to the trace's charges, refusals by reason,
and the token."""

from __future__ import annotations

import asyncio

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("prometheus_client", reason="the serve extra's prometheus-client is not installed")

import bamasc  # noqa: E402
from bamasc.runtime.trace import read_ledgers  # noqa: E402
from bamasc.serve.app import Limits, build_app  # noqa: E402
from tests.helpers.metrics import promtool_check, samples, series, total  # noqa: E402
from tests.serve.harness import TOKEN, compiled_plan  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_the_scrape_passes_promtool_and_counts_what_the_trace_charged(tmp_path):
    plan = bamasc.Plan.load(compiled_plan(str(tmp_path)))
    trace = tmp_path / "trace.jsonl"

    async def main():
        async with plan.session(trace=str(trace), total_budget=4000,
                                provider=bamasc.providers.fake("verbose")) as session:
            app = build_app(plan, session, TOKEN.encode(), Limits(max_body=4096))
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
                statuses = [(await client.post("/v1/tasks", json={"task": f"What is {n} + 2?"}, headers=AUTH)).status_code
                            for n in range(5)]
                unauthorized = await client.get("/metrics")
                text = (await client.get("/metrics", headers=AUTH)).text
            full = build_app(plan, session, TOKEN.encode(), Limits(max_pending=0))  # every task finds the server full
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=full), base_url="http://test") as client:
                busy = (await client.post("/v1/tasks", json={"task": "What is 1 + 1?"}, headers=AUTH)).status_code
                busy_text = (await client.get("/metrics", headers=AUTH)).text
            return session.models, statuses, unauthorized, text, busy, busy_text

    models, statuses, unauthorized, text, busy, busy_text = asyncio.run(main())
    assert busy == 429 and total(samples(busy_text), "bamasc_refusals_total", reason="busy") == 1
    assert 200 in statuses and 402 in statuses, statuses  # the total runs out: a refusal
    assert unauthorized.status_code == 401 and "bamasc_" not in unauthorized.text
    promtool_check(text)
    found = samples(text)
    assert total(found, "bamasc_refusals_total", reason="total") == statuses.count(402)
    assert total(found, "bamasc_tasks_total", status="ok") == statuses.count(200)
    assert total(found, "bamasc_task_duration_seconds_count") == len(statuses)
    assert series(found, "bamasc_calls_total", "model") <= set(models)
    assert found[("bamasc_http_responses_total", (("code", "402"),))] == statuses.count(402)
    assert total(found, "bamasc_budget_total_usd") == pytest.approx(4000e-6)
    # The USD counter is the trace's charge for these tasks, to the µ$, model by model.
    charged = sum(ledger.spent for ledger in read_ledgers(str(trace)).values())
    spent = total(found, "bamasc_spent_usd_total")
    assert charged > 0 and abs(spent * 1e6 - charged) < 1.0, (spent, charged)
    assert abs(total(found, "bamasc_ledger_spent_usd") * 1e6 - charged) < 1.0
    assert total(found, "bamasc_calls_total", outcome="settled") == total(found, "bamasc_call_duration_seconds_count")
