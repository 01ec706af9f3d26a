"""The serve app in-process (httpx over ASGI): its routes, the token, and every way a body can be wrong."""

from __future__ import annotations

import asyncio
import json

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")

import bamasc  # noqa: E402
from bamasc.serve.app import Limits, build_app  # noqa: E402
from tests.serve.harness import TOKEN, compiled_plan  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _serve(tmp_path, check, *, total_budget=None, limits=Limits(max_body=4096), token=TOKEN.encode(), provider=None):
    """Run `check(client, session)` against the app of a freshly opened session on the solver plan."""
    plan = bamasc.Plan.load(compiled_plan(str(tmp_path)))

    async def main():
        async with plan.session(trace=str(tmp_path / "trace.jsonl"), total_budget=total_budget,
                                provider=provider or bamasc.providers.fake("verbose")) as session:
            app = build_app(plan, session, token, limits)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
                await check(client, session)

    asyncio.run(main())


def test_a_task_runs_and_its_calls_are_kept(tmp_path):
    async def check(client, session):
        answered = await client.post("/v1/tasks", json={"task": "What is 2 + 2?"}, headers=AUTH)
        assert answered.status_code == 200, answered.text
        body = answered.json()
        assert set(body) >= {"answer", "cost", "bound", "status", "template", "task_id"}
        assert body["status"] == "ok" and 0 < body["cost"] <= body["bound"] <= 2000
        found = (await client.get(f"/v1/tasks/{body['task_id']}", headers=AUTH)).json()
        assert found["status"] == "ok" and len(found["calls"]) == 4
        assert sum(call["charged"] for call in found["calls"]) == pytest.approx(body["cost"])
        tighter = (await client.post("/v1/tasks", json={"task": "What is 1 + 1?", "budget": 500}, headers=AUTH)).json()
        assert tighter["budget"] == 500 and tighter["cost"] <= 500
        missing = await client.get("/v1/tasks/nope", headers=AUTH)
        assert missing.status_code == 404 and missing.json()["error"]["field"] == "task_id"

    _serve(tmp_path, check)


def test_every_route_but_healthz_needs_the_token(tmp_path):
    async def check(client, session):
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        for method, path in (("GET", "/v1/budget"), ("GET", "/metrics"), ("GET", "/openapi.json"),
                             ("GET", "/v1/tasks/x"), ("POST", "/v1/tasks")):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                            {"Authorization": f"Basic {TOKEN}"}, {"Authorization": f"Bearer {TOKEN}x"}):
                refused = await client.request(method, path, headers=headers, json={"task": "x"})
                assert refused.status_code == 401, (method, path, headers)
                assert refused.headers["www-authenticate"] == "Bearer"
        assert session.statuses == {}, "no task ran without the token"
        assert (await client.get("/v1/budget", headers={"Authorization": f"bearer {TOKEN}"})).status_code == 200

    _serve(tmp_path, check)


HOSTILE = [
    # (body, status, field)
    (b"x" * 20_000, 413, None),
    (b"[" * 3000 + b"]" * 3000, 400, None),
    (b'{"task": ' + b'{"a": ' * 1500 + b"1" + b"}" * 1500 + b"}", 400, None),
    (b"not json", 400, None),
    (b"\xff\xfe{}", 400, None),
    (b"[1, 2]", 400, None),
    (b'"task"', 400, None),
    (b"{}", 422, "task"),
    (b'{"task": ""}', 422, "task"),
    (b'{"task": 5}', 422, "task"),
    (b'{"task": ["a"]}', 422, "task"),
    (b'{"task": "x", "budget": "100"}', 422, "budget"),
    (b'{"task": "x", "budget": true}', 422, "budget"),
    (b'{"task": "x", "budget": NaN}', 422, "budget"),
    (b'{"task": "x", "budget": Infinity}', 422, "budget"),
    (b'{"task": "x", "budget": -Infinity}', 422, "budget"),
    (b'{"task": "x", "budget": 1e308}', 422, "budget"),
    (b'{"task": "x", "budget": 1e999}', 422, "budget"),
    (b'{"task": "x", "budget": -5}', 422, "budget"),
    (b'{"task": "x", "budget": 0}', 422, "budget"),
    (b'{"task": "x", "budget": 2001}', 422, "budget"),
    (b'{"task": "x", "budget": ' + b"9" * 400 + b"}", 422, "budget"),
    (b'{"task": "x", "budget": ' + b"9" * 4500 + b"}", 400, None),
    (b'{"task": "x", "deadline_s": 0}', 422, "deadline_s"),
    (b'{"task": "x", "deadline_s": NaN}', 422, "deadline_s"),
    (b'{"task": "x", "deadline_s": null, "spend": 1}', 422, "spend"),
]


def test_hostile_bodies_are_refused_with_the_field_named(tmp_path):
    async def check(client, session):
        for body, status, field in HOSTILE:
            refused = await client.post("/v1/tasks", content=body, headers=AUTH)
            assert refused.status_code == status, (body[:60], refused.text)
            error = refused.json()["error"]
            assert error["status"] == status and error["field"] == field, (body[:60], error)
        assert session.statuses == {}, "no hostile body ran a task"
        metrics = (await client.get("/metrics", headers=AUTH)).text
        assert f'bamasc_http_responses_total{{code="422"}} {sum(s == 422 for _, s, _ in HOSTILE)}.0' in metrics
        assert (await client.post("/v1/tasks", json={"task": "still serving"}, headers=AUTH)).status_code == 200

    _serve(tmp_path, check, limits=Limits(max_body=16_384))


def test_the_total_refuses_a_task_with_402_and_the_budget_route_says_why(tmp_path):
    async def check(client, session):
        statuses = []
        for n in range(4):
            answered = await client.post("/v1/tasks", json={"task": f"What is {n} + 1?"}, headers=AUTH)
            statuses.append(answered.status_code)
        assert statuses[0] == 200 and statuses[-1] == 402
        assert (await client.post("/v1/tasks", json={"task": "x"}, headers=AUTH)).json()["status"] == "skipped_total"
        budget = (await client.get("/v1/budget", headers=AUTH)).json()
        assert budget["total"] == 4000 and budget["spent"] <= 4000 and budget["held"] == 0
        assert budget["left"] == pytest.approx(4000 - budget["spent"])
        metrics = (await client.get("/metrics", headers=AUTH)).text
        assert 'bamasc_tasks_total{status="skipped_total"}' in metrics
        assert "bamasc_reservations_open 0.0" in metrics

    _serve(tmp_path, check, total_budget=4000)


def test_openapi_describes_the_routes(tmp_path):
    async def check(client, session):
        document = (await client.get("/openapi.json", headers=AUTH)).json()
        assert document["openapi"] == "3.1.0"
        assert set(document["paths"]) == {"/v1/tasks", "/v1/tasks/{task_id}", "/v1/threads/{thread_id}", "/v1/budget",
                                          "/healthz", "/metrics", "/openapi.json"}
        schema = document["paths"]["/v1/tasks"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert schema["properties"]["budget"]["maximum"] == 2000
        # The refusals of the connection layer, on every route: a client generated from the document expects them.
        for path, operations in document["paths"].items():
            for operation in operations.values():
                assert {"408", "431", "503"} <= set(operation["responses"]), path
        assert json.dumps(document)  # plain JSON

    _serve(tmp_path, check)


def test_too_many_pending_tasks_get_429(tmp_path):
    async def check(client, session):
        session.in_flight = 1  # as if one task were running
        refused = await client.post("/v1/tasks", json={"task": "x"}, headers=AUTH)
        assert refused.status_code == 429
        session.in_flight = 0

    _serve(tmp_path, check, limits=Limits(max_pending=1))


def test_requests_past_the_limit_in_progress_get_429(tmp_path):
    async def check(client, session):
        slow = [client.post("/v1/tasks", json={"task": f"What is {n} + 1?"}, headers=AUTH) for n in range(6)]
        codes = sorted(r.status_code for r in await asyncio.gather(*slow))
        assert 429 in codes and 200 in codes
        assert all(code in (200, 429) for code in codes)

    # Replies that take a while keep the six requests in progress together.
    _serve(tmp_path, check, limits=Limits(max_pending=2, spare=0),
           provider=bamasc.providers.fake("echo", latency_s=0.5))


def test_a_task_too_long_for_the_budget_says_so_and_how_long_fits(tmp_path):
    """The bound is taken at each task's length: a task no binding fits ends too_long, spending nothing,
    with the longest length that fits; the body keeps to the OpenAPI schema."""
    jsonschema = pytest.importorskip("jsonschema")

    async def check(client, session):
        schema = (await client.get("/openapi.json", headers=AUTH)).json()["components"]["schemas"]["Result"]
        short = (await client.post("/v1/tasks", json={"task": "What is 2 + 2?"}, headers=AUTH)).json()
        assert short["status"] == "ok" and short["task_tokens"] == len(b"What is 2 + 2?") and short["fits_up_to"] is None
        long = await client.post("/v1/tasks", json={"task": "x" * 60_000}, headers=AUTH)
        assert long.status_code == 200, long.text
        body = long.json()
        assert (body["status"], body["cost"], body["bound"]) == ("too_long", 0.0, None)
        assert body["task_tokens"] == 60_000 and 0 < body["fits_up_to"] < 60_000 and "60000 tokens" in body["error"]
        for answered in (short, body):
            jsonschema.validate(answered, schema)
        found = (await client.get(f"/v1/tasks/{body['task_id']}", headers=AUTH)).json()
        assert found["status"] == "too_long" and found["calls"] == []

    _serve(tmp_path, check, limits=Limits(max_body=1 << 20))
