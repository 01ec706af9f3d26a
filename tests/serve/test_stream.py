"""POST /v1/tasks as server-sent events: their order, the final event against GET /v1/tasks/{id}, refusals as a
final `error` event, hostile bodies refused as plain JSON before any stream, clients that go away mid-stream
(over a real socket) leaving no money held, and many streams at once with /metrics counting them."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

import bamasc  # noqa: E402
from bamasc.runtime.trace import read_ledgers  # noqa: E402
from bamasc.serve.app import Limits, build_app  # noqa: E402
from bamasc.serve.main import Listen, bind  # noqa: E402
from tests.helpers.metrics import samples, total  # noqa: E402
from tests.serve.harness import TOKEN, compiled_plan  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SSE = {**AUTH, "Accept": "text/event-stream"}


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return bamasc.Plan.load(compiled_plan(str(tmp_path_factory.mktemp("stream"))))


def events(text: str) -> list[tuple[str, dict]]:
    """(kind, data) of each event of a text/event-stream body, comments skipped; every frame well formed."""
    found = []
    for frame in text.split("\n\n"):
        lines = [line for line in frame.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        assert [line.split(":", 1)[0] for line in lines] == ["event", "data"], frame
        found.append((lines[0].removeprefix("event: "), json.loads(lines[1].removeprefix("data: "))))
    return found


def _serve(plan, tmp_path, check, *, total_budget=None, provider=None, limits=Limits(max_body=4096)):
    async def main():
        async with plan.session(trace=str(tmp_path / "trace.jsonl"), total_budget=total_budget,
                                provider=provider or bamasc.providers.fake("verbose")) as session:
            app = build_app(plan, session, TOKEN.encode(), limits)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
                await check(client, session)

    asyncio.run(main())


@contextlib.asynccontextmanager
async def listening(app):
    """`app` on uvicorn on a loopback port of this event loop: a real socket a client can close mid-stream."""
    sock = bind(Listen(port=0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    runner = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        assert not runner.done(), "uvicorn did not start"
        await asyncio.sleep(0.01)
    host, port = sock.getsockname()[:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await runner


async def _ended(client, task_ids: list[str]) -> dict[str, dict]:
    """GET /v1/tasks/{id} of each task once none is running (the server runs a task on after its client left),
    or as they are after some 600 polls, when one would never end."""
    shown: dict[str, dict] = {}
    for _ in range(600):
        for task_id in task_ids:
            if shown.get(task_id, {}).get("status", "running") == "running":
                shown[task_id] = (await client.get(f"/v1/tasks/{task_id}", headers=AUTH)).json()
        if all(found.get("status") != "running" for found in shown.values()):
            break
        await asyncio.sleep(0.05)
    return shown


def test_the_events_come_in_order_and_the_last_is_the_task_as_get_shows_it(plan, tmp_path):
    async def check(client, session):
        answered = await client.post("/v1/tasks", json={"task": "What is 2 + 2?"}, headers=SSE)
        assert answered.status_code == 200 and answered.headers["content-type"].startswith("text/event-stream")
        found = events(answered.text)
        kinds = [kind for kind, _ in found]
        assert kinds == ["task"] + ["call_started", "call_settled"] * 4 + ["result"], kinds
        task_id = found[0][1]["task_id"]
        assert all(data["task_id"] == task_id for _, data in found)
        for (_, started), (_, settled) in zip(found[1:-1:2], found[2:-1:2]):
            assert started["node"] == settled["node"] and started["reserved"] == settled["reserved"]
            assert 0 < settled["charged"] <= settled["reserved"]
        result = found[-1][1]
        assert result["http_status"] == 200 and result["status"] == "ok" and result["answer"]
        shown = (await client.get(f"/v1/tasks/{task_id}", headers=AUTH)).json()
        assert {key: shown[key] for key in result if key != "http_status"} == \
            {key: value for key, value in result.items() if key != "http_status"}
        assert result["cost"] == pytest.approx(sum(data["charged"] for kind, data in found if kind == "call_settled"))
        assert [call["charged"] for call in shown["calls"]] == [d["charged"] for k, d in found if k == "call_settled"]
        # `"stream": true` asks as the header does; `"stream": false` answers JSON whatever the header says.
        body = await client.post("/v1/tasks", json={"task": "What is 2 + 2?", "stream": True}, headers=AUTH)
        assert [kind for kind, _ in events(body.text)][-1] == "result"
        plain = await client.post("/v1/tasks", json={"task": "What is 2 + 2?", "stream": False}, headers=SSE)
        assert plain.headers["content-type"] == "application/json" and plain.json()["answer"] == result["answer"]
        for accept in ("*/*", "text/*", "application/json", "text/event-stream;q=0", ""):
            assert (await client.post("/v1/tasks", json={"task": "1 + 1?"}, headers={**AUTH, "Accept": accept})
                    ).headers["content-type"] == "application/json", accept
        listed = await client.post("/v1/tasks", json={"task": "1 + 1?"},
                                   headers={**AUTH, "Accept": "application/json, Text/Event-Stream; q=0.9"})
        assert listed.headers["content-type"].startswith("text/event-stream")
        assert session.budget.held == 0

    _serve(plan, tmp_path, check)


HOSTILE = [
    # (body, status, field): refused as a plain reply, though the client asks for events
    (b"{not json", 400, None),
    (b"[]", 400, None),
    (b"\xff{}", 400, None),
    (b"x" * 5000, 413, None),
    (b'{"task": "hi", "stream": "yes"}', 422, "stream"),
    (b'{"task": "hi", "stream": 1}', 422, "stream"),
    (b'{"task": "hi", "stream": null}', 422, "stream"),
    (b'{"task": "hi", "\\u0073tream": "yes"}', 422, "stream"),
    (b'{"task": "", "stream": true}', 422, "task"),
    (b'{"task": "hi", "stream": true, "budget": -1}', 422, "budget"),
    (b'{"task": "hi", "stream": true, "thread_budget": 5}', 422, "thread_budget"),
    (b'{"task": "hi", "stream": true, "thread_id": "a\\nb"}', 422, "thread_id"),
    (b'{"task": "hi", "stream": true, "event": "x"}', 422, "event"),
]


def test_a_malformed_body_gets_a_plain_json_refusal_before_any_stream(plan, tmp_path):
    async def check(client, session):
        for body, status, field in HOSTILE:
            refused = await client.post("/v1/tasks", content=body, headers={**SSE, "Content-Type": "application/json"})
            assert refused.status_code == status, (body, refused.text)
            assert refused.headers["content-type"] == "application/json", body
            assert refused.json()["error"]["field"] == field, body
        no_token = await client.post("/v1/tasks", json={"task": "hi", "stream": True}, headers={"Accept": SSE["Accept"]})
        assert no_token.status_code == 401 and no_token.headers["content-type"] == "application/json"
        assert session.statuses == {} and session.budget.spent == 0
        post = (await client.get("/openapi.json", headers=AUTH)).json()["paths"]["/v1/tasks"]["post"]
        assert "text/event-stream" in post["responses"]["200"]["content"]
        assert "call_settled" in post["responses"]["200"]["description"]
        assert post["requestBody"]["content"]["application/json"]["schema"]["properties"]["stream"]["type"] == "boolean"

    _serve(plan, tmp_path, check)


def test_refusals_stream_as_a_final_error_event_with_the_plain_reply(plan, tmp_path):
    async def check(client, session):
        # A thread with no room for a turn's worst case: thread_exhausted, as a final error event.
        turn = events((await client.post("/v1/tasks", json={"task": "hello", "thread_id": "t", "thread_budget": 10},
                                         headers=SSE)).text)
        assert [kind for kind, _ in turn] == ["task", "error"] and turn[0][1]["thread_id"] == "t"
        assert turn[-1][1]["http_status"] == 402 and turn[-1][1]["status"] == "thread_exhausted"
        assert turn[-1][1]["turn"] == 1 and turn[-1][1]["cost"] == 0
        # A total of 2000 µ$ holds one worst case (1432 µ$); after one task, none fits: skipped_total.
        first = events((await client.post("/v1/tasks", json={"task": "What is 1 + 1?"}, headers=SSE)).text)
        assert first[-1][0] == "result"
        streamed = events((await client.post("/v1/tasks", json={"task": "What is 3 + 3?"}, headers=SSE)).text)
        plain = await client.post("/v1/tasks", json={"task": "What is 3 + 3?"}, headers=AUTH)
        assert plain.status_code == 402
        assert [kind for kind, _ in streamed] == ["task", "error"]
        error = streamed[-1][1]
        assert error.pop("http_status") == 402
        assert {**error, "task_id": None} == {**plain.json(), "task_id": None}
        assert error["status"] == "skipped_total" and error["cost"] == 0
        assert session.budget.held == 0 and session.budget.spent == pytest.approx(first[-1][1]["cost"])

    _serve(plan, tmp_path, check, total_budget=2000)


def test_threads_stream_their_turns(plan, tmp_path):
    async def check(client, session):
        bodies = []
        for number in range(2):
            body = {"task": f"What is {number} + 1?", "thread_id": "ticket/9", "stream": True,
                    **({"thread_budget": 5000} if number == 0 else {})}
            found = events((await client.post("/v1/tasks", json=body, headers=AUTH)).text)
            assert found[0][1]["thread_id"] == "ticket/9" and found[-1][0] == "result"
            bodies.append(found[-1][1])
        assert [body["turn"] for body in bodies] == [1, 2]
        thread = (await client.get("/v1/threads/ticket%2F9", headers=AUTH)).json()
        assert thread["charged"] == pytest.approx(sum(body["cost"] for body in bodies)) and thread["held"] == 0
        assert [turn["answer"] for turn in thread["turns"]] == [body["answer"] for body in bodies]

    _serve(plan, tmp_path, check)


def test_clients_that_leave_mid_stream_leave_nothing_held_and_metrics_count_every_stream(plan, tmp_path):
    """Twenty streams at once over a real socket; every other client closes after the first event. Each task runs
    to its end: the ledger holds nothing, and each charge is what its calls (the fake's bill) cost."""
    trace = str(tmp_path / "trace.jsonl")
    streams = 20

    async def main():
        provider = bamasc.providers.fake("verbose", latency_s=0.05)  # each call yields: the tasks overlap
        async with plan.session(trace=trace, total_budget=1e9, provider=provider, concurrency=streams) as session:
            app = build_app(plan, session, TOKEN.encode(), Limits(keep_alive_s=0.01))
            async with listening(app) as url, httpx.AsyncClient(base_url=url, timeout=120) as client:

                async def one(number: int) -> tuple[str, list]:
                    body = {"task": f"What is {number} + 2?", "stream": True}
                    async with client.stream("POST", "/v1/tasks", json=body, headers=AUTH) as response:
                        assert response.status_code == 200
                        text = ""
                        async for chunk in response.aiter_text():
                            text += chunk
                            if number % 2 and events(text):  # leave after the first event
                                break
                    found = events(text)
                    return found[0][1]["task_id"], found, text

                # A stream that never ends (its task gone, its comments going on) fails here instead of hanging.
                ran = await asyncio.wait_for(asyncio.gather(*(one(number) for number in range(streams))), 300)
                shown = await _ended(client, [task_id for task_id, _, _ in ran])
                budget = (await client.get("/v1/budget", headers=AUTH)).json()
                metrics = samples((await client.get("/metrics", headers=AUTH)).text)
            return ran, shown, budget, metrics, session.open_reservations

    ran, shown, budget, metrics, open_reservations = asyncio.run(main())
    left = [found for number, (_, found, _) in enumerate(ran) if number % 2]
    assert all([kind for kind, _ in found] == ["task"] for found in left)
    stayed = [found for number, (_, found, _) in enumerate(ran) if not number % 2]
    assert all(found[-1][0] == "result" and found[-1][1]["status"] == "ok" for found in stayed)
    # Each call takes 50 ms and a stream stays silent 10 ms at most: comment lines keep it open.
    assert any(": keep-alive\n\n" in text for number, (_, _, text) in enumerate(ran) if not number % 2)
    ledgers = read_ledgers(trace)
    for task_id, found in shown.items():
        assert found["status"] == "ok" and len(found["calls"]) == 4, found  # ran to its end, its client gone or not
        assert ledgers[task_id].finished and not ledgers[task_id].open
        assert found["cost"] == pytest.approx(ledgers[task_id].spent) == pytest.approx(
            sum(call["charged"] for call in found["calls"]))
    assert open_reservations == 0 and budget["held"] == 0
    assert budget["spent"] == pytest.approx(sum(found["cost"] for found in shown.values()))
    assert total(metrics, "bamasc_tasks_total", status="ok") == streams
    assert total(metrics, "bamasc_ledger_held_usd") == 0
    assert total(metrics, "bamasc_spent_usd_total") * 1e6 == pytest.approx(budget["spent"])
    assert metrics[("bamasc_http_responses_total", (("code", "200"),))] >= streams


def test_a_streamed_task_and_turn_name_their_sender_in_the_trace(plan, tmp_path):
    """A key's /ui finds its streamed tasks after a restart too: their task lines record the key and team."""
    async def check(client, session):
        async for _ in session.stream("What is 2 + 2?", task_id="streamed", key="k1", team="t1"):
            pass
        async for _ in session.thread("ticket", budget=plan.bound * 3).stream("And 3 + 3?", task_id="turn",
                                                                               key="k2"):
            pass

    _serve(plan, tmp_path, check)
    lines = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    tasks = {line["task_id"]: line for line in lines if line["type"] == "task"}
    assert (tasks["streamed"].get("key"), tasks["streamed"].get("team")) == ("k1", "t1")
    assert (tasks["turn"].get("key"), tasks["turn"].get("team")) == ("k2", None)
