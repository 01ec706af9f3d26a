"""Whole calls through the official SDKs against local wire-protocol servers: the ledger and the trace."""

from __future__ import annotations

import asyncio

import pytest

from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers import make_provider
from bamasc.runtime.retry import RetryPolicy
from tests.helpers.runtime import KEY, Collect, program_for
from tests.runtime.servers import (  # noqa: F401 (fixtures)
    anthropic_server,
    drop,
    malformed,
    openai_server,
    reply,
    slow,
    status,
    truncated,
)

POLICY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, jitter=0.0, timeout=0.5)


def run_once(plan, program, budget=None):
    system = plan.systems[0]
    template = system.template("single")
    provider = make_provider(program.models["remote"])
    trace = Collect()
    guard = BudgetGuard(budget or system.budget)
    run = TaskRun(program, system, template, {"remote": provider}, guard, "w1", "What is 40 plus 2?", trace, POLICY)

    async def go():
        try:
            return await run.run()
        finally:
            await provider.aclose()

    return asyncio.run(go()), trace.calls


@pytest.fixture(params=["openai", "anthropic"])
def wire(request, tmp_path, monkeypatch):
    server = request.getfixturevalue(f"{request.param}_server")
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    plan, program = program_for(tmp_path, request.param, server.base_url)
    return server, plan, program


def test_a_normal_reply_is_charged_at_reported_usage(wire):
    server, plan, program = wire
    server.script(reply("#### 42", prompt_tokens=30, completion_tokens=5))
    result, calls = run_once(plan, program)
    assert result.status == "ok" and result.answer == "42"
    (call,) = calls
    assert (call["prompt_tokens"], call["completion_tokens"]) == (30, 5)
    assert call["charged"] == pytest.approx(0.5 * 30 + 2.0 * 5)
    assert call["reserved"] >= call["charged"]
    assert result.cost == pytest.approx(call["charged"])
    sent = server.requests[0].body
    assert sent.get("max_completion_tokens", sent.get("max_tokens")) == 64


def test_429_with_retry_after_is_retried_and_costs_nothing(wire):
    server, plan, program = wire
    server.script(status(429, headers={"Retry-After": "0"}), reply("#### 7", prompt_tokens=20, completion_tokens=3))
    result, calls = run_once(plan, program)
    assert [c["attempt"] for c in calls] == [1, 2]
    assert calls[0]["error"].startswith("rate_limited") and calls[0]["charged"] == 0
    assert result.cost == pytest.approx(0.5 * 20 + 2.0 * 3)
    assert len(server.requests) == 2


def test_500_is_retried_and_its_hold_kept(wire):
    """A 500 may come after the model ran: retried, its reservation kept in full (as the proxy keeps it)."""
    server, plan, program = wire
    server.script(status(500), reply("#### 7", prompt_tokens=20, completion_tokens=3))
    result, calls = run_once(plan, program)
    assert result.status == "ok" and [c["attempt"] for c in calls] == [1, 2]
    assert calls[0]["charged"] == pytest.approx(calls[0]["reserved"]) and calls[0]["reserved"] > 0


def test_an_overloaded_provider_is_retried_and_charged_nothing(wire):
    server, plan, program = wire
    server.script(status(503), reply("#### 7", prompt_tokens=20, completion_tokens=3))
    result, calls = run_once(plan, program)
    assert result.status == "ok" and [c["attempt"] for c in calls] == [1, 2]
    assert calls[0]["charged"] == 0


@pytest.mark.parametrize("failure", [slow(2.0), malformed(), truncated(), drop()], ids=["slow", "malformed", "truncated", "dropped"])
def test_unknown_outcomes_keep_their_reservation(wire, failure):
    server, plan, program = wire
    server.script(failure, reply("#### 7", prompt_tokens=20, completion_tokens=3))
    result, calls = run_once(plan, program)
    first = calls[0]
    assert first["error"] and first["charged"] == pytest.approx(first["reserved"]) and first["reserved"] > 0
    assert result.cost == pytest.approx(first["reserved"] + 0.5 * 20 + 2.0 * 3)
    assert result.cost <= plan.systems[0].budget


def test_a_budget_that_cannot_cover_a_retry_stops_the_task(wire):
    server, plan, program = wire
    server.script(slow(2.0), slow(2.0), slow(2.0))
    result, calls = run_once(plan, program, budget=200)
    assert result.cost <= 200
    assert result.status in ("failed", "exhausted", "error")
    assert any(c["skipped"] or c["clamped"] for c in calls)


def test_4xx_is_not_retried_and_the_key_never_leaks(wire):
    server, plan, program = wire
    server.script(status(400))
    result, calls = run_once(plan, program)
    assert len(calls) == 1 and result.status == "error"
    assert KEY not in (result.error or "") and all(KEY not in str(c) for c in calls)
