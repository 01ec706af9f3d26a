"""Threads over `bamasc serve`: `thread_id` and `thread_budget` on POST /v1/tasks, GET /v1/threads/{id}, a kill -9
between turns, hostile thread ids, a budget changed under a thread, and concurrent turns of one thread."""

from __future__ import annotations

import asyncio
import os
import urllib.parse

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

import bamasc  # noqa: E402
from bamasc.serve.app import build_app  # noqa: E402
from tests.helpers.threads import TURNS, desk_source, expected_answers, expected_answers_after, trace_spend  # noqa: E402
from tests.helpers.threads import trace_threads  # noqa: E402
from tests.serve.harness import TOKEN, Server  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}
BUDGET = 5000.0
# Path-like, unicode, spaces and a slash: any text is a key, never a path.
HOSTILE_ID = "../../etc/passwd ticket-777 ü 工单 %2F"


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("desk"))
    path = os.path.join(folder, "plan.json")
    bamasc.load(desk_source(folder)).compile().save(path)
    return path


def _thread_url(thread_id: str) -> str:
    return "/v1/threads/" + urllib.parse.quote(thread_id, safe="")


def _serve(plan_path, tmp_path, check, latency_s=None):
    plan = bamasc.Plan.load(plan_path)
    provider = bamasc.providers.fake("echo", latency_s=latency_s)

    async def main():
        async with plan.session(trace=str(tmp_path / "trace.jsonl"), provider=provider) as session:
            app = build_app(plan, session, TOKEN.encode())
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
                await check(client, plan)

    asyncio.run(main())


def test_a_ticket_survives_a_kill_9_between_turns(plan_path, tmp_path):
    trace = str(tmp_path / "ledger.jsonl")
    options = ("--fake", "echo", "--trace", trace)
    answers = expected_answers()
    bodies = []
    first = Server(plan_path, *options)
    try:
        with httpx.Client(base_url=first.url, headers=AUTH, timeout=120) as client:
            for number, text in enumerate(TURNS[:2]):
                body = {"task": text, "thread_id": HOSTILE_ID} | ({"thread_budget": BUDGET} if number == 0 else {})
                answered = client.post("/v1/tasks", json=body)
                assert answered.status_code == 200, answered.text
                bodies.append(answered.json())
    finally:
        first.kill()  # kill -9 after turn 2
    second = Server(plan_path, *options)
    try:
        with httpx.Client(base_url=second.url, headers=AUTH, timeout=120) as client:
            known = client.get(_thread_url(HOSTILE_ID)).json()
            assert [turn["turn"] for turn in known["turns"]] == [1, 2] and known["budget"] == BUDGET
            for text in TURNS[2:]:
                answered = client.post("/v1/tasks", json={"task": text, "thread_id": HOSTILE_ID})
                assert answered.status_code == 200, answered.text
                bodies.append(answered.json())
            thread = client.get(_thread_url(HOSTILE_ID))
            assert thread.status_code == 200, thread.text
            thread = thread.json()
    finally:
        second.stop()
    # Turns 3 and 4, answered by the restarted server, saw turns 1 and 2 in their prompts.
    assert [body["answer"] for body in bodies] == answers
    assert [body["turn"] for body in bodies] == [1, 2, 3, 4]
    assert [turn["answer"] for turn in thread["turns"]] == answers
    assert [turn["status"] for turn in thread["turns"]] == ["ok"] * 4
    # The charges add up across the restart and stay within the thread's budget.
    assert thread["charged"] == pytest.approx(sum(body["cost"] for body in bodies))
    assert thread["charged"] == pytest.approx(trace_spend(trace, [body["task_id"] for body in bodies]))
    assert thread["charged"] <= thread["budget"] == BUDGET
    assert thread["left"] == pytest.approx(BUDGET - thread["charged"])
    assert {key: [line["turn"] for line in lines] for key, lines in trace_threads(trace).items()} == {
        HOSTILE_ID: [1, 2, 3, 4]}


@pytest.mark.parametrize("body, field, status", [
    ({"thread_id": "x" * 257}, "thread_id", 422),
    ({"thread_id": ""}, "thread_id", 422),
    ({"thread_id": "a\nb"}, "thread_id", 422),
    ({"thread_id": "\u0000"}, "thread_id", 422),
    ({"thread_id": 7}, "thread_id", 422),
    ({"thread_id": ["t"]}, "thread_id", 422),
    ({"thread_budget": 100}, "thread_budget", 422),
    ({"thread_id": "t", "thread_budget": None}, "thread_budget", 422),
    ({"thread_id": "t", "thread_budget": -5}, "thread_budget", 422),
    ({"thread_id": "t", "thread_budget": "100"}, "thread_budget", 422),
])
def test_a_thread_field_that_is_wrong_is_refused_naming_it(plan_path, tmp_path, body, field, status):
    async def check(client, plan):
        refused = await client.post("/v1/tasks", json={"task": "hello", **body}, headers=AUTH)
        assert refused.status_code == status, refused.text
        assert refused.json()["error"]["field"] == field
        assert (await client.get("/v1/budget", headers=AUTH)).json()["spent"] == 0

    _serve(plan_path, tmp_path, check)


def test_hostile_thread_ids_are_keys_and_a_changed_budget_is_refused(plan_path, tmp_path):
    ids = [HOSTILE_ID, "x" * 256, "🎫" * 64, "/", "a/b/../c", "%00", "' OR 1=1 --"]

    async def check(client, plan):
        for thread_id in ids:
            answered = await client.post("/v1/tasks", json={"task": TURNS[0], "thread_id": thread_id,
                                                             "thread_budget": BUDGET}, headers=AUTH)
            assert answered.status_code == 200, (thread_id, answered.text)
            found = await client.get(_thread_url(thread_id), headers=AUTH)
            assert found.status_code == 200, (thread_id, found.text)
            assert found.json()["thread_id"] == thread_id and len(found.json()["turns"]) == 1
        changed = await client.post("/v1/tasks", json={"task": "again", "thread_id": HOSTILE_ID,
                                                        "thread_budget": BUDGET * 2}, headers=AUTH)
        assert changed.status_code == 409 and changed.json()["error"]["field"] == "thread_budget"
        assert "5000" in changed.json()["error"]["message"]
        missing = await client.get(_thread_url("never-seen"), headers=AUTH)
        assert missing.status_code == 404 and missing.json()["error"]["field"] == "thread_id"
        assert (await client.get(_thread_url(HOSTILE_ID))).status_code == 401
        document = (await client.get("/openapi.json", headers=AUTH)).json()
        assert "/v1/threads/{thread_id}" in document["paths"]
        assert "thread_exhausted" in document["components"]["schemas"]["Result"]["properties"]["status"]["enum"]

    _serve(plan_path, tmp_path, check)


def test_concurrent_turns_of_one_thread_never_spend_past_its_budget(plan_path, tmp_path):
    async def check(client, plan):
        bound = bamasc.Plan.load(plan_path).bound
        budget = bound + 1  # one worst case fits: once a turn holds or charged anything, no other does

        async def turn(text):
            return await client.post("/v1/tasks", json={"task": text, "thread_id": "busy", "thread_budget": budget},
                                     headers=AUTH)

        answered = await asyncio.gather(*(turn(text) for text in TURNS))
        statuses = [response.json()["status"] for response in answered]
        thread = (await client.get(_thread_url("busy"), headers=AUTH)).json()
        assert thread["charged"] <= budget and thread["held"] == 0
        ran = [response.json() for response in answered if response.status_code == 200]
        assert thread["charged"] == pytest.approx(sum(body["cost"] for body in ran))
        # They ran one at a time, each seeing the turns before it; those that no longer fit got 402 and spent 0.
        assert sorted(statuses) == ["ok"] + ["thread_exhausted"] * 3
        for response in answered:
            if response.json()["status"] == "thread_exhausted":
                assert response.status_code == 402 and response.json()["cost"] == 0
        assert sorted(turn["turn"] for turn in thread["turns"]) == [1, 2, 3, 4]
        # Those that ran saw every turn that ran before them (a refused turn is history too: it has no answer).
        done = sorted((body for body in (response.json() for response in answered)), key=lambda body: body["turn"])
        earlier = []
        for body in done:
            if body["status"] == "ok":
                assert body["answer"] == expected_answers_after(earlier, TURNS[body["turn"] - 1])
            earlier.append((TURNS[body["turn"] - 1], body["answer"] or "(no answer: thread_exhausted)"))

    _serve(plan_path, tmp_path, check, latency_s=0.02)  # each call yields: the turns overlap unless ordered
