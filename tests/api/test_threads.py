"""Threads through the Python API: a 4-turn ticket whose turns see the earlier ones, within the thread's budget,
across a restart; a reused id with another budget, a turn that would overrun, concurrent turns."""

from __future__ import annotations

import asyncio

import pytest

import bamasc
from tests.helpers.threads import TURNS, desk_source, expected_answers, trace_lines, trace_spend, trace_threads

BUDGET = 5000.0  # µ$: four turns fit (each holds its worst case, about 700 µ$, and charges less)


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("desk")
    return bamasc.load(desk_source(str(folder))).compile()


def _session(plan, trace, latency_s=None):
    return plan.session(trace=str(trace), provider=bamasc.providers.fake("echo", latency_s=latency_s))


async def _turns(plan, trace, thread_id, texts, budget=BUDGET):
    async with _session(plan, trace) as session:
        ticket = session.thread(thread_id, budget=budget)
        results = [await ticket.run(text) for text in texts]
        return results, ticket.state


def test_a_four_turn_ticket_sees_its_earlier_turns_within_its_budget_across_a_restart(plan, tmp_path):
    trace = tmp_path / "desk.jsonl"
    answers = expected_answers()
    first, _ = asyncio.run(_turns(plan, trace, "ticket-777", TURNS[:2]))
    # A new session on the trace (as after a restart) continues the thread: turns 3 and 4 see turns 1 and 2.
    later, state = asyncio.run(_turns(plan, trace, "ticket-777", TURNS[2:]))
    results = first + later
    assert [r.status for r in results] == ["ok"] * 4
    # Each answer is the digest of the prompt the provider was sent: the earlier turns' texts and answers in it.
    assert [r.answer for r in results] == answers
    assert [r.turn for r in results] == [1, 2, 3, 4] and {r.thread_id for r in results} == {"ticket-777"}
    assert [t.turn for t in state.turns] == [1, 2, 3, 4]
    assert [t.answer for t in state.turns] == answers
    # The charges add up across the restart, as the trace holds them, and stay within the budget.
    ids = [r.task_id for r in results]
    assert state.charged == pytest.approx(sum(r.cost for r in results))
    assert state.charged == pytest.approx(trace_spend(str(trace), ids))
    assert 0 < state.charged <= BUDGET
    assert state.left == pytest.approx(BUDGET - state.charged)
    threads = trace_threads(str(trace))
    assert list(threads) == ["ticket-777"]
    assert [line["turn"] for line in threads["ticket-777"]] == [1, 2, 3, 4]
    assert [line["task"] for line in threads["ticket-777"]] == list(TURNS)
    tasks = [line for line in trace_lines(str(trace)) if line["type"] == "task"]
    assert [(line["thread_id"], line["turn"]) for line in tasks] == [("ticket-777", n) for n in (1, 2, 3, 4)]


def test_the_history_in_a_prompt_is_cut_to_its_cap(plan, tmp_path):
    # Long turns: the history outgrows its 400-byte cap, and the answers still match prompts cut to it.
    texts = [f"Turn {n}: " + "the parcel was lost again and again " * 2 for n in range(1, 6)]
    results, state = asyncio.run(_turns(plan, tmp_path / "long.jsonl", "long", texts, budget=50_000))
    assert [r.answer for r in results] == expected_answers(texts)
    # Each turn's bound (which counts the cap) is the same however long the thread grew.
    assert len({r.bound for r in results}) == 1


def test_a_thread_named_again_with_another_budget_is_refused(plan, tmp_path):
    trace = tmp_path / "t.jsonl"
    asyncio.run(_turns(plan, trace, "ticket-1", TURNS[:1]))

    async def again(budget):
        async with _session(plan, trace) as session:
            return session.thread("ticket-1", budget=budget).state

    with pytest.raises(bamasc.UsageError, match="has a budget of 5000 µ\\$; a turn cannot give it 9000"):
        asyncio.run(again(9000))
    assert asyncio.run(again(None)).budget == BUDGET  # no budget given: the thread's own
    assert asyncio.run(again(BUDGET)).turns[0].status == "ok"


@pytest.mark.parametrize("thread_id", ["", " ", "x" * 257, "a\nb", "bad\x00id", "\ud800", 7])
def test_a_thread_id_that_cannot_name_a_thread_is_a_usage_error(plan, tmp_path, thread_id):
    async def name():
        async with _session(plan, tmp_path / "ids.jsonl") as session:
            session.thread(thread_id, budget=BUDGET)

    with pytest.raises(bamasc.UsageError, match="thread_id"):
        asyncio.run(name())


@pytest.mark.parametrize("budget", [0, -1, float("nan"), float("inf"), True, "100"])
def test_a_thread_budget_that_is_no_amount_is_a_usage_error(plan, tmp_path, budget):
    async def name():
        async with _session(plan, tmp_path / "budgets.jsonl") as session:
            session.thread("t", budget=budget)

    with pytest.raises(bamasc.UsageError, match="thread_budget"):
        asyncio.run(name())


def test_a_turn_that_would_overrun_the_thread_is_refused_and_spends_nothing(plan, tmp_path):
    trace = tmp_path / "small.jsonl"
    bound = plan.bound
    assert bound is not None
    budget = bound + 1  # one worst case fits; once the first turn charged anything, a second does not
    results, state = asyncio.run(_turns(plan, trace, "small", TURNS[:3], budget=budget))
    assert results[0].status == "ok" and 0 < results[0].cost <= bound
    for refused in results[1:]:
        assert refused.status == "thread_exhausted" and refused.cost == 0 and not refused.calls
        assert "thread_exhausted" in refused.error and refused.budget is None
        assert not [line for line in trace_lines(str(trace)) if line.get("task_id") == refused.task_id
                    and line["type"] in ("reserve", "call")]
    assert state.charged == pytest.approx(results[0].cost) and state.charged <= budget
    assert [turn.status for turn in state.turns] == ["ok", "thread_exhausted", "thread_exhausted"]


def test_concurrent_turns_of_one_thread_run_one_after_another(plan, tmp_path):
    async def together():
        async with _session(plan, tmp_path / "c.jsonl", latency_s=0.02) as session:  # each call yields
            ticket = session.thread("busy", budget=BUDGET)
            results = await asyncio.gather(*(ticket.run(text) for text in TURNS))
            return results, ticket.state

    results, state = asyncio.run(together())
    # In the order `run` was called, each seeing every turn before it: they ran one at a time.
    assert [r.answer for r in results] == expected_answers()
    assert [r.turn for r in results] == [1, 2, 3, 4]
    assert state.charged <= BUDGET and state.held == 0


def test_concurrent_turns_never_spend_past_the_thread_budget(plan, tmp_path):
    bound = plan.bound

    async def together():
        async with _session(plan, tmp_path / "race.jsonl", latency_s=0.02) as session:
            ticket = session.thread("race", budget=bound + 1)
            results = await asyncio.gather(*(ticket.run(text) for text in TURNS))
            return results, ticket.state

    results, state = asyncio.run(together())
    assert [r.status for r in results] == ["ok"] + ["thread_exhausted"] * 3
    assert state.charged == pytest.approx(results[0].cost) and state.charged <= bound + 1
